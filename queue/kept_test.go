package queue

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// The copy of the open dispatch kept with the hint lives exactly as long as the hint
// names that dispatch and nothing may have ended it: SetOpen keeps it, OpenCopy reads
// it only for the dispatch the hint names, and every write that may follow the
// dispatch's end drops it (a hint cleared or forgotten, a complete's peek or key check,
// an invalidation, the heap-change feed, which also drops the hint).
func TestTheKeptCopyLivesWithItsHint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kept := []byte(`{"log_id":"L1"}`)
	set := func(uid string) string {
		t.Helper()
		if err := e.c.SetOpen(e.ctx, uid, "L1", kept, nil); err != nil {
			t.Fatal(err)
		}
		got, err := e.c.OpenCopy(e.ctx, uid, "L1")
		if err != nil || string(got) != string(kept) {
			t.Fatalf("copy after SetOpen: %q %v, want %s", got, err, kept)
		}
		return e.keys.User(uid)
	}
	gone := func(what, uid string, wantOpen string) {
		t.Helper()
		h := e.hgetall(e.keys.User(uid))
		if _, ok := h["openc"]; ok {
			t.Errorf("%s: the copy is still there: %v", what, h)
		}
		if h["open"] != wantOpen {
			t.Errorf("%s: open = %q, want %q", what, h["open"], wantOpen)
		}
	}

	set("u1")
	if got, err := e.c.OpenCopy(e.ctx, "u1", "L2"); err != nil || got != nil {
		t.Errorf("copy for a dispatch the hint does not name: %q %v, want none", got, err)
	}
	if err := e.c.SetOpen(e.ctx, "u1", "L2", nil, nil); err != nil {
		t.Fatal(err)
	}
	gone("a hint set to another dispatch without a copy", "u1", "L2")

	set("u2")
	if err := e.c.ClearOpen(e.ctx, "u2", schedule.OpenIs("L1")); err != nil {
		t.Fatal(err)
	}
	gone("ClearOpen", "u2", openNone)

	set("u3")
	if err := e.c.ForgetOpen(e.ctx, "u3"); err != nil {
		t.Fatal(err)
	}
	gone("ForgetOpen", "u3", "")

	set("u4")
	if err := e.rdb.SAdd(e.ctx, e.keys.ClientKeys("u4"), "-", "h4").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.VerifyCompleting(e.ctx, "u4", "h9", "L1"); err == nil {
		t.Fatal("a wrong key passed")
	}
	if h := e.hgetall(e.keys.User("u4")); h["openc"] == "" {
		t.Errorf("a wrong key's check dropped the copy: %v", h)
	}
	if _, err := e.c.VerifyCompleting(e.ctx, "u4", "h4", "L9"); err != nil {
		t.Fatal(err)
	}
	if h := e.hgetall(e.keys.User("u4")); h["openc"] == "" {
		t.Errorf("a complete of another dispatch dropped the copy: %v", h)
	}
	if dropped, err := e.c.VerifyCompleting(e.ctx, "u4", "h4", "L1"); err != nil || !dropped {
		t.Fatalf("VerifyCompleting: dropped %v, %v", dropped, err)
	}
	gone("VerifyCompleting", "u4", "L1")

	set("u5")
	if _, _, err := e.c.PeekCompleting(e.ctx, "u5", "", "L1", e.now, testMaxDue); err != nil {
		t.Fatal(err)
	}
	gone("PeekCompleting", "u5", "L1")

	set("u6")
	if err := e.c.InvalidateUser(e.ctx, "u6"); err != nil {
		t.Fatal(err)
	}
	gone("InvalidateUser", "u6", "L1")

	set("u7")
	if err := e.c.heapsChangedAt(e.ctx, []taskd.HeapChange{{ID: 1, Target: "uid_u7", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	gone("the heap-change feed", "u7", "")
}

// A hint and copy of a dispatch written after its complete dropped the copy (a redo on
// another node that read MySQL before the complete committed, and told Redis after)
// keep the hint but not the copy: the complete left the log id as a tombstone.
func TestALateCopyOfACompletedDispatchIsNotKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.rdb.SAdd(e.ctx, e.keys.ClientKeys("u1"), "-", "h1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetOpen(e.ctx, "u1", "L1", []byte(`{"log_id":"L1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if dropped, err := e.c.VerifyCompleting(e.ctx, "u1", "h1", "L1"); err != nil || !dropped {
		t.Fatalf("VerifyCompleting: dropped %v, %v", dropped, err)
	}
	if err := e.c.SetOpen(e.ctx, "u1", "L1", []byte(`{"log_id":"L1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.OpenCopy(e.ctx, "u1", "L1"); got != nil {
		t.Fatalf("a copy of the completed L1 written after its complete was kept: %s", got)
	}
	if err := e.c.SetOpen(e.ctx, "u1", "L2", []byte(`{"log_id":"L2"}`), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.OpenCopy(e.ctx, "u1", "L2"); string(got) != `{"log_id":"L2"}` {
		t.Fatalf("the next dispatch's copy: %q", got)
	}
	// The tombstone is left by a complete riding on a fetch too.
	if _, dropped, err := e.c.PeekCompleting(e.ctx, "u1", "h1", "L2", e.now, testMaxDue); err != nil || !dropped {
		t.Fatalf("PeekCompleting: dropped %v, %v", dropped, err)
	}
	if err := e.c.SetOpen(e.ctx, "u1", "L2", []byte(`{"log_id":"L2"}`), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.OpenCopy(e.ctx, "u1", "L2"); got != nil {
		t.Fatalf("a copy of the completed L2 written after its complete was kept: %s", got)
	}
}

// A node that found Redis away pings it (every primary, on a cluster) each second and
// ends the mode at the first answer; the polls meanwhile are served from MySQL.
func TestTheProbeEndsTheAwayMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if !e.c.markAway(e.ctx, refused, time.Now()) || !e.c.Away() {
		t.Fatal("a refused connection did not make Redis away")
	}
	e.l.hashes = []string{"h1"}
	if _, err := e.c.Peek(e.ctx, "u1", "h1", e.now); err != nil {
		t.Fatalf("a poll while away: %v", err)
	}
	if _, _, n := e.l.counts(); n != 1 {
		t.Fatalf("a poll while away read %d key sets from MySQL, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.c.Away() {
		if time.Now().After(deadline) {
			t.Fatal("Redis answers, and the node still finds it away after 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The first complete after a user's key set left Redis (a key change, or KeyTTL) checks
// the key in MySQL, and still drops the copy and leaves the tombstone.
func TestACompleteWithoutACachedKeySetDropsTheCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.l.hashes = []string{"h8"}
	if err := e.c.SetOpen(e.ctx, "u8", "L1", []byte(`{"log_id":"L1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if dropped, err := e.c.VerifyCompleting(e.ctx, "u8", "h8", "L1"); err != nil || !dropped {
		t.Fatalf("VerifyCompleting with the key set to load: dropped %v, %v", dropped, err)
	}
	if _, _, n := e.l.counts(); n != 1 {
		t.Fatalf("%d key set reads, want 1", n)
	}
	if err := e.c.SetOpen(e.ctx, "u8", "L1", []byte(`{"log_id":"L1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.OpenCopy(e.ctx, "u8", "L1"); got != nil {
		t.Fatalf("a copy of the completed L1 written after its complete was kept: %s", got)
	}
}
