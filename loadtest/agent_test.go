package loadtest

import (
	"context"
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A fetch carrying a complete that is answered 429 was refused whole, complete
// included: the agent sends the complete on its own, or the item it names would stay
// in flight until its lease ran out. A 409 refused the complete itself: not sent again.
func TestCarriedCompleteRefusedWithThePoll(t *testing.T) {
	for _, c := range []struct {
		status int
		code   string
		resent int64
	}{{429, "rate_limited", 1}, {409, "conflict", 0}, {503, "unavailable", 1}} {
		var completes atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/complete" {
				completes.Add(1)
				w.Write([]byte(`{}`))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": c.code, "message": "no"}})
		}))
		cli := NewClient(srv.URL, "token", 1, 5*time.Second)
		rec := newRecorder()
		prev := &carried{logID: "cmp-1-0-1-x", success: true, item: true}
		next := cycle(context.Background(), cli, "key", time.Now(), phaseOptions{}, mrand.New(mrand.NewPCG(1, 1)), rec, &counters{}, prev)
		cli.Close()
		srv.Close()
		if next != nil || completes.Load() != c.resent || int64(len(rec.ackedItems)) != c.resent {
			t.Errorf("fetch answered %d: complete sent on its own %d times (acknowledged %v), want %d",
				c.status, completes.Load(), rec.ackedItems, c.resent)
		}
	}
}
