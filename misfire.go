package taskd

import (
	"strconv"
	"time"
)

// Misfire is a rotate task's policy for the occurrences a user missed: due while it
// was away (or its agent busy), and another of the task's occurrences due since.
type Misfire uint8

const (
	// MisfireCatchUp hands out every missed occurrence in turn, within
	// DISPATCH_CATCH_UP (the behaviour of a task without a policy).
	MisfireCatchUp Misfire = iota + 1
	// MisfireLatest hands out only the latest due occurrence: the earlier ones are
	// missed.
	MisfireLatest
	// MisfireSkip hands out an occurrence only on time, within MisfireGrace of its due
	// time: the user gets those due from now on.
	MisfireSkip
)

// MisfireGrace is how late a skip task's occurrence may be taken and still count as on
// time.
const MisfireGrace = time.Minute

var misfireNames = [...]string{MisfireCatchUp: "catch_up", MisfireLatest: "latest", MisfireSkip: "skip"}

func (m Misfire) String() string {
	if m > 0 && int(m) < len(misfireNames) {
		return misfireNames[m]
	}
	return "misfire(" + strconv.Itoa(int(m)) + ")"
}

// ParseMisfire parses catch_up, latest or skip; "" is catch_up.
func ParseMisfire(s string) (Misfire, error) {
	switch s {
	case "", "catch_up":
		return MisfireCatchUp, nil
	case "latest":
		return MisfireLatest, nil
	case "skip":
		return MisfireSkip, nil
	}
	return 0, Errorf(CodeInvalid, "misfire: must be catch_up, latest or skip, got %q", s)
}

// MarshalText is the policy's name ("" for none: a once task's).
func (m Misfire) MarshalText() ([]byte, error) {
	if m == 0 {
		return nil, nil
	}
	return []byte(m.String()), nil
}

// Missed is a run of occurrences of one task that a user will never get because of
// the task's misfire policy: from First to Last, Count of them.
type Missed struct {
	UID         string
	Task        TaskKey
	First, Last time.Time
	Count       int
}

// MissedEventID is the id of the missed event of a run starting at occurrence first
// for uid: the same in the events API, the outbox and Elasticsearch.
func MissedEventID(first Occurrence, uid string) string {
	return first.String() + ":" + uid + ":missed"
}
