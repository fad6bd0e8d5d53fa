package dispatch

import (
	"sync/atomic"
	"time"
)

// Most polls are empty, and most empty replies are alike: users of one group share
// their next due times. emptyReplies builds the reply of a fetch that hands out
// nothing once per next due time and keeps it (a slot per time, the latest time to
// land in a slot winning it), so that an empty poll's reply is looked up, not written.

// emptySlots is how many next due times the cache keeps at once (a power of two).
const emptySlots = 1024

// emptyReply is the encoded reply of an empty fetch whose next due time is at.
type emptyReply struct {
	at   time.Time
	body []byte
}

// emptyReplies caches empty fetches' replies by next due time. The zero value is ready.
type emptyReplies struct {
	slots [emptySlots]atomic.Pointer[emptyReply]
}

// noneDue is the reply of an empty fetch with nothing scheduled.
var noneDue = appendEmptyFetch(nil, nil)

// reply is the JSON reply (as web.Encode writes FetchResult{NextDueAt: next}) of a
// fetch that hands out nothing, next being when the next task is due (nil: nothing
// is scheduled). ok is false for a time it does not write (a year outside 0..9999,
// which time.Time.MarshalJSON refuses). The bytes returned are shared: they must not
// be changed.
func (c *emptyReplies) reply(next *time.Time) (body []byte, ok bool) {
	if next == nil {
		return noneDue, true
	}
	if y := next.Year(); y < 0 || y > 9999 {
		return nil, false
	}
	if next.Location() != time.UTC {
		// Only UTC times are kept (heap entries are): the same instant in another
		// zone is written with its offset.
		return appendEmptyFetch(make([]byte, 0, 64), next), true
	}
	slot := &c.slots[uint64(next.Unix()^int64(next.Nanosecond()))%emptySlots]
	if r := slot.Load(); r != nil && r.at.Equal(*next) {
		return r.body, true
	}
	r := &emptyReply{at: *next, body: appendEmptyFetch(make([]byte, 0, 64), next)}
	slot.Store(r)
	return r.body, true
}

// appendEmptyFetch appends the JSON reply of a fetch that hands out nothing (as
// web.Encode writes FetchResult{NextDueAt: next}: a time as time.Time.MarshalJSON
// writes it, RFC 3339 with nanoseconds, for a year in 0..9999) to b.
func appendEmptyFetch(b []byte, next *time.Time) []byte {
	b = append(b, `{"task":null,"next_due_at":`...)
	if next == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = next.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}
