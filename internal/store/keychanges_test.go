package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/testenv"
)

// Key changes are listed in order, and a uid's change times only rise, even when the
// node noting a later change has a clock behind the one that noted the earlier: a
// cached key set noting the time of the keys it holds is then older than any change
// made after it was loaded.
func TestKeyChangesRise(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if _, err := st.CreateClientKey(ctx, "admin", "a", "h1", 5, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateClientKey(ctx, "admin", "b", "h2", 5, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// A node whose clock is an hour behind revokes a's keys.
	if _, err := st.RevokeClientKeys(ctx, "admin", "a", t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	changes, err := st.KeyChanges(ctx, t0.Add(-2*time.Hour), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || changes[0].UID != "a" || !changes[0].At.After(t0) || changes[1].UID != "b" {
		t.Fatalf("changes: %+v, want a just after t0, then b at t0+1s", changes)
	}
	hashes, at, err := st.ClientKeyHashes(ctx, "a")
	if err != nil || len(hashes) != 0 || !at.Equal(changes[0].At) {
		t.Fatalf("a's keys: %v, noted at %s (%v), want none, noted at %s", hashes, at, err, changes[0].At)
	}
	// Paging: after a, only b.
	rest, err := st.KeyChanges(ctx, changes[0].At, changes[0].UID, 10)
	if err != nil || len(rest) != 1 || rest[0].UID != "b" {
		t.Fatalf("changes after a: %+v %v", rest, err)
	}
}
