package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/store"
)

// Requests caught in the middle of other requests' transactions: each test holds a row
// lock of its own to stop a transaction half way, and waits until MySQL says who waits.

// waitLockWaits waits until n statements of the test's database that mention table
// have run for more than 100 ms: here, statements waiting for a row lock the test
// holds. (Not INNODB_TRX: MariaDB refreshes it only when nobody read it for 0.1 s,
// which parallel tests polling it never allow.)
func (b *bundle) waitLockWaits(n int, table string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := b.count(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND COMMAND = 'Query' AND TIME_MS > 100 AND INFO LIKE ?`, "%"+table+"%")
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%d transactions wait for a lock on %s, want %d", got, table, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lock starts a transaction holding the rows query selects FOR UPDATE.
func (b *bundle) lock(query string, args ...any) interface{ Commit() error } {
	b.t.Helper()
	tx, err := b.store.DB().BeginTx(b.ctx, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(b.ctx, query+" FOR UPDATE", args...); err != nil {
		b.t.Fatal(err)
	}
	return tx
}

type fetched struct {
	res dispatch.FetchResult
	err error
}

func (b *bundle) fetchAsync(svc *dispatch.Service, ctx context.Context, a agent) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		res, err := svc.Fetch(ctx, a.uid, a.hash, 0)
		out <- fetched{res, err}
	}()
	return out
}

// A fetch of the user while the user's complete is in flight waits for it: here the
// complete (a failure on the last attempt) makes an until_exhausted occurrence dead for
// the user, and the fetch must not dispatch it again.
func TestFetchDuringTheUsersCompleteWaitsForIt(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_1", t0.Add(-time.Minute), quota(5), mode(taskd.ModeUntilExhausted))
	a := b.agent("1")
	first := b.mustGet(svc, a, key)

	// The complete stops at the user's cursor row, holding its record.
	if _, err := b.store.DB().ExecContext(b.ctx, `INSERT INTO user_state (uid, cursor_at, exclude_keys, updated_at)
		VALUES ('1', ?, '[]', ?)`, t0.Add(-2*time.Hour), t0); err != nil {
		t.Fatal(err)
	}
	cursor := b.lock("SELECT uid FROM user_state WHERE uid = '1'")
	completed := make(chan error, 1)
	go func() { completed <- svc.Complete(b.ctx, a.uid, a.hash, first.LogID, taskd.ResultFailure, nil) }()
	b.waitLockWaits(1, "user_state")
	got := b.fetchAsync(svc, b.ctx, a)
	b.waitLockWaits(1, "dispatch") // the fetch waits on the record the complete holds
	if err := cursor.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-completed; err != nil {
		t.Fatalf("complete: %v", err)
	}
	f := <-got
	if f.err != nil || f.res.Task != nil {
		t.Fatalf("fetch during the complete: %+v, %v; want no task (the occurrence is dead for the user)", f.res.Task, f.err)
	}
	if rec := b.record(first.LogID); rec.State != taskd.StateDead {
		t.Fatalf("record state %v, want dead", rec.State)
	}
	if n := b.count("SELECT COUNT(*) FROM dispatch WHERE uid = '1'"); n != 1 {
		t.Fatalf("%d dispatch records for user 1, want 1", n)
	}
}

// A complete that fails (here: it times out on a lock) leaves the dispatch open, and the
// next fetch hands it out again.
func TestAFailedCompleteLeavesTheDispatchToTheNextFetch(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	key := b.task("uid_1", t0.Add(-time.Minute))
	a := b.agent("1")
	first := b.mustGet(svc, a, key)

	held := b.lock("SELECT log_id FROM dispatch WHERE log_id = ?", first.LogID)
	ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
	err := svc.Complete(ctx, a.uid, a.hash, first.LogID, taskd.ResultSuccess, nil)
	cancel()
	wantCode(t, "complete while its record is locked", err, taskd.CodeUnavailable)
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	again := b.mustGet(svc, a, key)
	if again.LogID != first.LogID || !again.Redo {
		t.Fatalf("fetch after the failed complete: %+v, want a redo of %s", again, first.LogID)
	}
}

// A fetch whose caller gives up while its claim's batch waits still has its claim
// committed when the batch commits for the others; the user's next fetch finds that
// dispatch (the failed fetch left the open-dispatch hint unknown, not none).
func TestAFetchCutOffMidBatchFindsItsDispatchNext(t *testing.T) {
	t.Parallel()
	svc, b := setupWith(t, store.OpenOptions{MaxConns: 8, Lanes: 1})
	own := b.task("uid_u", t0.Add(-time.Minute))
	shared := b.task("gid_g", t0.Add(-time.Minute), quota(5))
	b.group("g", "v", "w", "z")
	u, v, w, z := b.agent("u"), b.agent("v"), b.agent("w"), b.agent("z")
	b.mustGet(svc, z, shared) // the occurrence's counter row exists

	// u's claim holds the only lane, so v's and w's claims queue for one batch.
	task := b.lock("SELECT id FROM task_once WHERE id = ?", own.ID)
	uDone := b.fetchAsync(svc, b.ctx, u)
	b.waitLockWaits(1, "task_once")
	vCtx, giveUp := context.WithCancel(b.ctx)
	defer giveUp()
	vDone := b.fetchAsync(svc, vCtx, v)
	wDone := b.fetchAsync(svc, b.ctx, w)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if claims, _ := b.store.Queued(); claims == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("v's and w's claims did not queue")
		}
	}
	// Their batch stops at the occurrence's counter; then v gives up.
	counter := b.lock("SELECT claimed FROM occurrence_claim WHERE task_id = ?", shared.ID)
	if err := task.Commit(); err != nil {
		t.Fatal(err)
	}
	b.waitLockWaits(1, "occurrence_claim")
	giveUp()
	if f := <-vDone; f.err == nil {
		t.Fatalf("v's fetch, given up: %+v, want an error", f.res.Task)
	}
	if err := counter.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []fetched{<-uDone, <-wDone} {
		if f.err != nil || f.res.Task == nil {
			t.Fatalf("u's or w's fetch: %+v, %v", f.res.Task, f.err)
		}
	}
	if n := b.count("SELECT COUNT(*) FROM dispatch WHERE open_uid = 'v'"); n != 1 {
		t.Fatalf("v has %d open dispatches, want the one its batch committed", n)
	}
	again := b.mustGet(svc, v, shared)
	if !again.Redo {
		t.Fatalf("v's next fetch: %+v, want its committed dispatch again", again)
	}
}
