package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

// KeptReply shows a key's reply only once its request succeeded, and only within the
// expiry; it decides nothing (BeginIdempotent does).
func TestKeptReply(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	const day = 24 * time.Hour
	kept := func(at time.Time) bool {
		t.Helper()
		r, err := st.KeptReply(ctx, "alice", "k", at, day)
		if err != nil {
			t.Fatal(err)
		}
		return r != nil
	}
	if kept(now) {
		t.Fatal("a key never used has a reply")
	}
	if _, began, err := st.BeginIdempotent(ctx, "alice", "k", "h1", now, day, 2*time.Minute); err != nil || !began {
		t.Fatalf("begin: %v %v", began, err)
	}
	if kept(now) {
		t.Fatal("a request under way has a reply")
	}
	if err := st.FinishIdempotent(ctx, "alice", "k", 201, map[string][]string{"Location": {"/x/1"}}, []byte(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	r, err := st.KeptReply(ctx, "alice", "k", now.Add(time.Hour), day)
	if err != nil || r == nil || r.Status != 201 || r.RequestHash != "h1" || string(r.Body) != `{"id":1}` || r.Header["Location"][0] != "/x/1" {
		t.Fatalf("the reply: %+v %v", r, err)
	}
	if r, err := st.KeptReply(ctx, "bob", "k", now, day); err != nil || r != nil {
		t.Fatalf("another actor's key: %+v %v", r, err)
	}
	if kept(now.Add(day)) {
		t.Fatal("a reply past the expiry is kept")
	}
}
