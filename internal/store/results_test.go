package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// A task's results are numbered in the order they became visible, not in the order of
// their finish times: a complete that finished first but committed last (on another
// node, say) comes after the results already read, and is not skipped by a reader
// whose cursor is past it. An unconfirmed success is no result until it settles; a
// failure waiting for its retry is one, and keeps its number when it is retried.
func TestResultsAreNumberedAsTheyCommit(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ctx := context.Background()
	occ := f.task(taskd.Unlimited, taskd.ModeOncePerUser, func(t *taskd.Task) { t.Own.MaxAttempts = new(2) })
	logs := map[string]string{}
	for _, r := range f.claims(claimOf("a", occ), claimOf("b", occ), claimOf("c", occ)) {
		if r.Outcome != taskd.Claimed {
			t.Fatalf("claim: %v", r.Outcome)
		}
		logs[r.D.UID] = r.D.LogID
	}
	task := occ.Task
	number := func(want int) {
		t.Helper()
		if n, err := st.NumberResults(ctx, task, 100); err != nil || n != want {
			t.Fatalf("numbered %d (%v), want %d", n, err, want)
		}
	}
	read := func(after int64, want ...string) []taskd.NumberedRecord {
		t.Helper()
		got, err := st.ResultsAfter(ctx, task, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		var uids []string
		for i, r := range got {
			uids = append(uids, r.Record.UID)
			if r.Seq != after+int64(i)+1 {
				t.Errorf("result %d after %d is numbered %d", i, after, r.Seq)
			}
		}
		if fmt.Sprint(uids) != fmt.Sprint(want) {
			t.Fatalf("results after %d: %v, want %v", after, uids, want)
		}
		return got
	}
	mark := func() taskd.ResultsMark {
		t.Helper()
		m, err := st.ResultsMarks(ctx, []taskd.TaskKey{task})
		if err != nil {
			t.Fatal(err)
		}
		return m[task]
	}
	number(0)
	read(0)
	if m := mark(); m.Seq != 0 || m.Pending || m.Status != taskd.StatusActive {
		t.Fatalf("mark before any result: %+v", m)
	}

	// b finishes later than a will, but commits first.
	if o, _, err := st.Complete(ctx, "b", logs["b"], taskd.ResultSuccess, nil, batchAt.Add(2*time.Second)); err != nil || o != taskd.Completed {
		t.Fatalf("b: %v %v", o, err)
	}
	if m := mark(); !m.Pending {
		t.Fatalf("mark with b finished: %+v, want pending", m)
	}
	number(1)
	read(0, "b")
	if m := mark(); m.Seq != 1 || m.Pending {
		t.Fatalf("mark with b numbered: %+v", m)
	}
	if o, _, err := st.Complete(ctx, "a", logs["a"], taskd.ResultFailure, nil, batchAt.Add(time.Second)); err != nil || o != taskd.RetryScheduled {
		t.Fatalf("a: %v %v", o, err)
	}
	number(1)
	got := read(1, "a")
	if a := got[0].Record; a.State != "retry_wait" || !a.FinishedAt.Before(batchAt.Add(2*time.Second)) {
		t.Errorf("a's result: %+v", a)
	}
	read(0, "b", "a")
	read(2)

	// a's retry takes its record out of retry_wait: it stays the second result.
	if _, err := st.DB().Exec("UPDATE dispatch SET state = ?, waiting_uid = NULL WHERE log_id = ?", taskd.StateRetried, logs["a"]); err != nil {
		t.Fatal(err)
	}
	number(0)
	if got := read(1, "a"); got[0].Record.State != "failed" {
		t.Errorf("a after its retry: %+v", got[0].Record)
	}
	// An unconfirmed success is no result yet.
	if _, err := st.DB().Exec("UPDATE dispatch SET state = ?, finished_at = ?, open_uid = NULL WHERE log_id = ?",
		taskd.StateUnconfirmed, batchAt.Add(3*time.Second), logs["c"]); err != nil {
		t.Fatal(err)
	}
	number(0)
	if m := mark(); m.Pending || m.Seq != 2 {
		t.Fatalf("mark with an unconfirmed success: %+v", m)
	}
	if _, err := st.DB().Exec("UPDATE dispatch SET state = ?, result = ? WHERE log_id = ?", taskd.StateDone, taskd.ResultSuccess, logs["c"]); err != nil {
		t.Fatal(err)
	}
	number(1)
	read(2, "c")
}

// Readers numbering and paging at once, on several connections as on several nodes,
// while completes commit: each reader sees every result once, in one order, the same
// for all of them.
func TestResultsReadersAgree(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ctx := context.Background()
	occ := f.task(taskd.Unlimited, taskd.ModeOncePerUser, nil)
	const users = 40
	var claims []string
	for i := range users {
		claims = append(claims, fmt.Sprint(i))
	}
	logs := map[string]string{}
	for _, uid := range claims {
		r := f.claims(claimOf(uid, occ))[0]
		if r.Outcome != taskd.Claimed {
			t.Fatalf("claim %s: %v", uid, r.Outcome)
		}
		logs[uid] = r.D.LogID
	}
	const readers = 4
	seen := make([][]taskd.NumberedRecord, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			var after int64
			for deadline := time.Now().Add(time.Minute); len(seen[i]) < users && time.Now().Before(deadline); {
				if _, err := st.NumberResults(ctx, occ.Task, 7); err != nil {
					t.Error(err)
					return
				}
				got, err := st.ResultsAfter(ctx, occ.Task, after, 5)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) > 0 {
					after = got[len(got)-1].Seq
				}
				seen[i] = append(seen[i], got...)
			}
		})
	}
	for j, uid := range claims {
		wg.Go(func() {
			// Finish times in the reverse of the order of the completes.
			if o, _, err := st.Complete(ctx, uid, logs[uid], taskd.ResultSuccess, nil, batchAt.Add(time.Duration(users-j)*time.Second)); err != nil || o != taskd.Completed {
				t.Errorf("complete %s: %v %v", uid, o, err)
			}
		})
	}
	wg.Wait()
	for i, got := range seen {
		if len(got) != users {
			t.Fatalf("reader %d saw %d results, want %d", i, len(got), users)
		}
		uids := map[string]bool{}
		for j, r := range got {
			if r.Seq != int64(j)+1 || r.Record.LogID != seen[0][j].Record.LogID {
				t.Fatalf("reader %d's result %d: #%d %s, reader 0's: #%d %s", i, j, r.Seq, r.Record.LogID, seen[0][j].Seq, seen[0][j].Record.LogID)
			}
			uids[r.Record.UID] = true
		}
		if len(uids) != users {
			t.Fatalf("reader %d saw %d users", i, len(uids))
		}
	}
}
