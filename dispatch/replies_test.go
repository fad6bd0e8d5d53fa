package dispatch

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/web"
)

// encoded is what the JSON encoder writes for an empty fetch with next.
func encoded(next *time.Time) string {
	rec := httptest.NewRecorder()
	web.Encode(rec, http.StatusOK, FetchResult{NextDueAt: next})
	return rec.Body.String()
}

// An empty fetch's cached reply is byte for byte the encoder's, for any next due time
// (whole seconds, nanoseconds, another zone, two times sharing a slot), is built once
// per time while it keeps its slot, and a time the encoder refuses is left to it.
func TestEmptyReplies(t *testing.T) {
	t.Parallel()
	var c emptyReplies
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	tokyo := time.FixedZone("JST", 9*3600)
	times := []*time.Time{nil, new(at), new(at.Add(1500 * time.Millisecond)), new(at.Add(time.Nanosecond)),
		new(at.In(tokyo)), new(at.Add(emptySlots * time.Second)), new(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))}
	for range 2 {
		for _, next := range times {
			body, ok := c.reply(next)
			if !ok || string(body) != encoded(next) {
				t.Errorf("reply for %v: %q %v, want %q", next, body, ok, encoded(next))
			}
		}
	}
	first, _ := c.reply(new(at))
	again, _ := c.reply(new(at))
	if &first[0] != &again[0] {
		t.Error("the reply for one time was built twice")
	}
	if _, ok := c.reply(new(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))); ok {
		t.Error("a year past 9999 was written")
	}
}

// Concurrent polls with times that share slots each get their own time's reply.
func TestEmptyRepliesConcurrent(t *testing.T) {
	t.Parallel()
	var c emptyReplies
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				next := at.Add(time.Duration((g+i)%5) * emptySlots * time.Second) // one slot, five times
				body, _ := c.reply(&next)
				if !bytes.Equal(body, []byte(encoded(&next))) {
					t.Errorf("reply for %v: %q", next, body)
					return
				}
			}
		})
	}
	wg.Wait()
}
