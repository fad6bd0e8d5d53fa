package store

import (
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// A dispatch record's log id is a UUIDv7 (RFC 9562) that carries the record's dispatch
// time: the 48-bit Unix milliseconds, then, in the 12 bits the RFC leaves to extra
// clock precision, the microseconds within that millisecond. The primary key's order
// is therefore the dispatch order to the microsecond (ties in the order a process made
// them),
// and the records dispatched in a time range are a range of ids: the lists, events and
// stats walk the primary key instead of an index of their own (migration 0024).

// newLogID returns a new log id for a record dispatched at at. After the time come
// 30 bits of a count the process keeps and 32 random bits: ids of one time sort in the
// order this process made them (a user's records in a row, under a test's fixed
// clock; the count wraps after a billion ids), and ids are unique across processes by
// chance, as any UUIDv7's.
func newLogID(at time.Time) string {
	u := logIDAt(at)
	c := logIDCount.Add(1)
	u[8] = 0x80 | byte(c>>24)&0x3f // the RFC's variant, then the count
	u[9], u[10], u[11] = byte(c>>16), byte(c>>8), byte(c)
	return u.String()
}

// logIDCount numbers the ids this process made.
var logIDCount atomic.Uint32

// logIDAt returns a version-7 UUID of at with random bits to follow.
func logIDAt(at time.Time) uuid.UUID {
	var u uuid.UUID
	if _, err := rand.Read(u[8:]); err != nil {
		panic(fmt.Sprintf("log id: %v", err)) // crypto/rand does not fail on Linux
	}
	putTime(&u, at)
	u[6] |= 0x70            // version 7, above the sub-millisecond bits
	u[8] = 0x80 | u[8]&0x3f // the RFC's variant
	return u
}

// putTime writes at's milliseconds and, in the next 12 bits, its microseconds within
// the millisecond into u (the version nibble stays zero). Times outside what 48 bits of
// milliseconds since 1970 hold are clamped to their ends.
func putTime(u *uuid.UUID, at time.Time) {
	const maxMS = 1<<48 - 1
	var ms, sub int64
	switch {
	case at.Before(time.UnixMilli(0)):
	case at.After(time.UnixMilli(maxMS)):
		ms, sub = maxMS, 4095
	default:
		us := at.UnixMicro()
		ms, sub = us/1000, us%1000*4096/1000 // sub: 0..4095, rising with the microseconds
	}
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[7] = byte(sub>>8), byte(sub)
}

// logIDSlack is how far the time in an id may lie from its record's dispatched_at.
// Ids made by newLogID carry dispatched_at itself; records dispatched before them
// (migration 0024) have ids taken from the clock while the claim was being written,
// a few milliseconds after the dispatch time, rarely more. A time range is widened by
// this much on each side on the ids and kept exact on dispatched_at.
const logIDSlack = time.Minute

// logIDFloor returns an id at or below that of every record dispatched at or after t
// (less the slack), as MySQL compares the strings.
func logIDFloor(t time.Time) string {
	var u uuid.UUID
	putTime(&u, t.Add(-logIDSlack))
	u[6] &= 0x0f // no version nibble: below every id of the same microsecond
	return u.String()
}

// logIDCeiling returns an id above that of every record dispatched before t (plus the
// slack).
func logIDCeiling(t time.Time) string {
	var u uuid.UUID
	putTime(&u, t.Add(logIDSlack))
	u[6] |= 0x70
	for i := 8; i < 16; i++ {
		u[i] = 0xff
	}
	return u.String()
}
