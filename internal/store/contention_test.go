package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// A meeting makes the first two transactions that reach its point wait there for
// each other, so that both have read and neither has written: the interleaving that
// breeds deadlocks, forced instead of hoped for. A transaction that the other's locks
// hold up before the point (they take turns, as they should) never arrives; the first
// then goes on alone after a while. Later arrivals (a retry) pass.
type meeting struct {
	point   string
	mu      sync.Mutex
	arrived int
	both    chan struct{}
}

func newMeeting(point string) *meeting { return &meeting{point: point, both: make(chan struct{})} }

func (m *meeting) hook(ctx context.Context, point string) {
	if point != m.point {
		return
	}
	m.mu.Lock()
	m.arrived++
	n := m.arrived
	if n == 2 {
		close(m.both)
	}
	m.mu.Unlock()
	if n > 2 {
		return
	}
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-m.both:
	case <-t.C:
	case <-ctx.Done():
	}
}

// contentionStore opens a store on a fresh database whose transactions meet at point,
// and counts the transactions the database rolled back for meeting another.
func contentionStore(t *testing.T, point string) (*store.Store, *atomic.Int64) {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.MySQLDSN(t), store.OpenOptions{MaxConns: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var contended atomic.Int64
	st.ObserveContention(func(reason string, retried bool) { contended.Add(1) })
	st.Interleave(newMeeting(point).hook)
	return st, &contended
}

// both runs a and b at once and fails t on an error of either.
func both(t *testing.T, a, b func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, f := range []func(context.Context) error{a, b} {
		go func() { errs <- f(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

var contentionAt = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// Writes that concurrent requests make every day never roll each other back: each
// case forces two of them to interleave between their read and their write, and no
// transaction may meet a deadlock or a lock wait (the retries would hide one from the
// caller, not from this count).
func TestConcurrentWritesNeverContend(t *testing.T) {
	t.Parallel()
	key := func(st *store.Store, uid string, n int) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := st.CreateClientKey(ctx, "enroll", uid, fmt.Sprintf("%064x", n), 2, contentionAt)
			return err
		}
	}
	add := func(st *store.Store, gid string, uids ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := st.AddMembers(ctx, "admin", gid, uids, contentionAt)
			return err
		}
	}
	replace := func(st *store.Store, gid string, uids ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := st.ReplaceMembers(ctx, "admin", gid, uids, contentionAt)
			return err
		}
	}
	cases := []struct {
		name  string
		point string
		setup func(t *testing.T, st *store.Store)
		run   func(t *testing.T, st *store.Store)
		check func(t *testing.T, st *store.Store)
	}{{
		// The enrolling fleet of the issue: new uids, no key rows yet.
		name:  "keys of new uids",
		point: "client_key.create",
		run:   func(t *testing.T, st *store.Store) { both(t, key(st, "1001", 1), key(st, "1002", 2)) },
	}, {
		// Uids with keys, each enrolling again past its cap: both revoke.
		name:  "keys of uids with keys",
		point: "client_key.create",
		setup: func(t *testing.T, st *store.Store) {
			for i, uid := range []string{"1001", "1002", "1001", "1002"} {
				if err := key(st, uid, 100+i)(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		},
		run: func(t *testing.T, st *store.Store) { both(t, key(st, "1001", 1), key(st, "1002", 2)) },
		check: func(t *testing.T, st *store.Store) {
			for _, uid := range []string{"1001", "1002"} {
				if live := liveKeys(t, st, uid); live != 2 {
					t.Errorf("uid %s has %d live keys, want the cap of 2", uid, live)
				}
			}
		},
	}, {
		// Two issues for one uid take turns, and the cap holds exactly.
		name:  "keys of one uid",
		point: "client_key.create",
		setup: func(t *testing.T, st *store.Store) {
			if err := key(st, "1001", 100)(context.Background()); err != nil {
				t.Fatal(err)
			}
		},
		run: func(t *testing.T, st *store.Store) { both(t, key(st, "1001", 1), key(st, "1001", 2)) },
		check: func(t *testing.T, st *store.Store) {
			if live := liveKeys(t, st, "1001"); live != 2 {
				t.Errorf("%d live keys, want the cap of 2", live)
			}
		},
	}, {
		name:  "members of one group in crossing orders",
		point: "group_member.write",
		run: func(t *testing.T, st *store.Store) {
			both(t, add(st, "ops", "a", "b", "c"), add(st, "ops", "c", "b", "a", "d"))
		},
		check: func(t *testing.T, st *store.Store) { wantMembers(t, st, "ops", "a", "b", "c", "d") },
	}, {
		name:  "members of two groups",
		point: "group_member.write",
		setup: func(t *testing.T, st *store.Store) {
			if err := add(st, "g1", "m")(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := add(st, "g2", "m")(context.Background()); err != nil {
				t.Fatal(err)
			}
		},
		run: func(t *testing.T, st *store.Store) {
			both(t, add(st, "g1", "a", "m", "z"), add(st, "g2", "a", "m", "z"))
		},
	}, {
		name:  "a replace beside an add",
		point: "group_member.write",
		setup: func(t *testing.T, st *store.Store) {
			if err := add(st, "ops", "a", "b")(context.Background()); err != nil {
				t.Fatal(err)
			}
		},
		run: func(t *testing.T, st *store.Store) { both(t, replace(st, "ops", "b", "c"), add(st, "ops", "a", "d")) },
	}, {
		name:  "tasks created at once",
		point: "task.create",
		run: func(t *testing.T, st *store.Store) {
			tpl, err := st.CreateTemplate(context.Background(), "admin", taskd.Template{Name: "t", Schema: []byte(`{}`)}, contentionAt)
			if err != nil {
				t.Fatal(err)
			}
			create := func(executor string) func(context.Context) error {
				return func(ctx context.Context) error {
					_, err := st.CreateTask(ctx, "admin", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: executor,
						StartTime: contentionAt, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: 1,
						Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive}, contentionAt)
					return err
				}
			}
			both(t, create("gid_ops"), create("gid_ops"))
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, contended := contentionStore(t, c.point)
			if c.setup != nil {
				st.Interleave(nil)
				c.setup(t, st)
				st.Interleave(newMeeting(c.point).hook)
			}
			c.run(t, st)
			if n := contended.Load(); n > 0 {
				t.Errorf("%d transactions were rolled back for meeting another (deadlock or lock wait)", n)
			}
			if c.check != nil {
				c.check(t, st)
			}
		})
	}
}

func liveKeys(t *testing.T, st *store.Store, uid string) int {
	t.Helper()
	h, _, err := st.ClientKeyHashes(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

func wantMembers(t *testing.T, st *store.Store, gid string, want ...string) {
	t.Helper()
	got, err := st.Members(context.Background(), gid)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("members of %s: %v, want %v", gid, got, want)
	}
}

// A deadlock is run again inside the store: both transactions of a forced deadlock
// commit, and the retry is counted.
func TestDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	st, _ := contentionStore(t, "none")
	var mu sync.Mutex
	var seen []string
	st.ObserveContention(func(reason string, retried bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprint(reason, " retried=", retried))
	})
	ctx := context.Background()
	if _, err := st.DB().ExecContext(ctx, "INSERT INTO client (uid, created_at) VALUES ('a', NOW()), ('b', NOW())"); err != nil {
		t.Fatal(err)
	}
	m := newMeeting("locked one")
	crossed := func(first, second string) func(context.Context) error {
		return func(ctx context.Context) error {
			return st.InTx(ctx, func(tx *sql.Tx) error {
				for i, uid := range []string{first, second} {
					if _, err := tx.ExecContext(ctx, "UPDATE client SET created_at = NOW(6) WHERE uid = ?", uid); err != nil {
						return err
					}
					if i == 0 {
						m.hook(ctx, "locked one")
					}
				}
				return nil
			})
		}
	}
	both(t, crossed("a", "b"), crossed("b", "a"))
	if fmt.Sprint(seen) != "[deadlock retried=true]" {
		t.Errorf("contention observed: %v, want one deadlock, retried", seen)
	}
}

// A transaction that keeps meeting a lock is given up after its tries, counted so,
// and the caller sees unavailable (503 with Retry-After), never the database's error.
func TestLockWaitGivesUpUnavailable(t *testing.T) {
	t.Parallel()
	st, _ := contentionStore(t, "none")
	var seen []string
	st.ObserveContention(func(reason string, retried bool) { seen = append(seen, fmt.Sprint(reason, " retried=", retried)) })
	st.SetMaxTries(2)
	ctx := context.Background()
	if _, err := st.DB().ExecContext(ctx, "INSERT INTO client (uid, created_at) VALUES ('a', NOW())"); err != nil {
		t.Fatal(err)
	}
	holder, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT uid FROM client WHERE uid = 'a' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = st.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE client SET created_at = NOW(6) WHERE uid = 'a'")
		return err
	})
	if code := taskd.ErrorCode(store.MySQLErr("update", err)); code != taskd.CodeUnavailable {
		t.Errorf("a lock wait past the tries: %v (code %s), want unavailable", err, code)
	}
	if fmt.Sprint(seen) != "[lock_wait retried=true lock_wait retried=false]" {
		t.Errorf("contention observed: %v, want a lock wait retried, then given up", seen)
	}
}

// A template deleted while a task of it is being created: either the delete sees the
// task and refuses, or the create finds the template gone; never a live task of a
// deleted template. The delete is made inside the create, between its read of the
// template and its write of the task.
func TestTemplateDeletedDuringTaskCreate(t *testing.T) {
	t.Parallel()
	st, _ := contentionStore(t, "none")
	ctx := context.Background()
	tpl, err := st.CreateTemplate(ctx, "admin", taskd.Template{Name: "t", Schema: []byte(`{}`)}, contentionAt)
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	st.Interleave(func(_ context.Context, point string) {
		if point != "task.create" {
			return
		}
		go func() { deleted <- st.DeleteTemplate(ctx, "admin", tpl.ID, nil, contentionAt) }()
		// The delete either ends (it did not wait for this transaction) or waits for
		// it; a second is long enough to tell on any machine.
		select {
		case err := <-deleted:
			deleted <- err
		case <-time.After(time.Second):
		}
	})
	_, createErr := st.CreateTask(ctx, "admin", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_ops",
		StartTime: contentionAt, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: 1,
		Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive}, contentionAt)
	deleteErr := <-deleted
	if createErr == nil && deleteErr == nil {
		t.Fatal("the task was created and its template deleted: a live task of a deleted template")
	}
	if createErr != nil || taskd.ErrorCode(deleteErr) != taskd.CodeConflict {
		t.Fatalf("create: %v; delete: %v; want the create to win and the delete refused (conflict)", createErr, deleteErr)
	}
}
