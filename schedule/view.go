package schedule

// OpenState is what the cache knows of a user's open dispatch.
type OpenState uint8

const (
	OpenUnknown OpenState = iota // not cached: ask MySQL
	OpenNone                     // no open dispatch
	OpenSome                     // LogID is open (a hint: verify in MySQL)
)

// OpenHint is the cache's hint about a user's open dispatch. MySQL holds the truth;
// the hint only says whether to look.
type OpenHint struct {
	State OpenState
	LogID string // when State is OpenSome
}

// OpenIs is the hint that logID is open.
func OpenIs(logID string) OpenHint { return OpenHint{State: OpenSome, LogID: logID} }

// NoneOpen is the hint that nothing is open.
var NoneOpen = OpenHint{State: OpenNone}

// View is a user's heap as one peek saw it.
type View struct {
	Open OpenHint
	Due  []Entry // entries due now, in heap order
	Next *Entry  // the first entry not yet due
}
