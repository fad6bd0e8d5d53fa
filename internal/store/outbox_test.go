package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

func outboxEvents(n int, at time.Time) []taskd.Event {
	evs := make([]taskd.Event, n)
	for i := range evs {
		evs[i] = taskd.Event{
			EventID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			Type:    taskd.EventDispatch,
			UID:     fmt.Sprintf("u%d", i%7),
			TaskID:  "once:1",
			Kind:    "once",
			At:      at.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return evs
}

func TestOutboxAppendReadDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.Store(t)
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	evs := outboxEvents(1200, at) // more than one insert chunk
	if err := s.AppendOutbox(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	b, err := s.OutboxBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 1200 || !b.Oldest.Equal(at) {
		t.Fatalf("backlog %+v, want 1200 rows, oldest %v", b, at)
	}

	lease, err := s.TryLeaseOutbox(ctx)
	if err != nil || lease == nil {
		t.Fatalf("lease: %v %v", lease, err)
	}
	defer lease.Release(ctx)
	rows, err := lease.ReadOutbox(ctx, 700)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 700 {
		t.Fatalf("read %d rows, want 700", len(rows))
	}
	for i, r := range rows {
		if i > 0 && r.ID <= rows[i-1].ID {
			t.Fatalf("rows not in id order at %d", i)
		}
		var ev taskd.Event
		if err := json.Unmarshal(r.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.EventID != evs[i].EventID || r.EventID != ev.EventID || r.UID != evs[i].UID {
			t.Fatalf("row %d: %+v / %+v, want %+v", i, r, ev, evs[i])
		}
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	if err := lease.DeleteOutbox(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if err := lease.DeleteOutbox(ctx, ids); err != nil { // already gone: fine
		t.Fatal(err)
	}
	rest, err := lease.ReadOutbox(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 500 || rest[0].EventID != evs[700].EventID {
		t.Fatalf("after delete: %d rows, first %v", len(rest), rest[0].EventID)
	}
	b, err = s.OutboxBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 500 || !b.Oldest.Equal(evs[700].At) {
		t.Fatalf("backlog %+v, want 500 rows, oldest %v", b, evs[700].At)
	}
}

func TestOutboxLeaseIsExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	open := func() *store.Store {
		s, err := store.Open(ctx, dsn, store.OpenOptions{MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()

	la, err := a.TryLeaseOutbox(ctx)
	if err != nil || la == nil {
		t.Fatalf("first lease: %v %v", la, err)
	}
	if lb, err := b.TryLeaseOutbox(ctx); err != nil || lb != nil {
		t.Fatalf("second process got the lease while the first holds it: %v %v", lb, err)
	}
	if lb, err := a.TryLeaseOutbox(ctx); err != nil || lb != nil {
		t.Fatalf("a second lease in the same process: %v %v", lb, err)
	}
	// Another database on the same server is another outbox.
	other := testenv.Store(t)
	if lo, err := other.TryLeaseOutbox(ctx); err != nil || lo == nil {
		t.Fatalf("lease on another database: %v %v", lo, err)
	} else {
		lo.Release(ctx)
	}

	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLeaseOutbox(ctx)
	if err != nil || lb == nil {
		t.Fatalf("lease after release: %v %v", lb, err)
	}
	defer lb.Release(ctx)
	if _, err := lb.ReadOutbox(ctx, 10); err != nil {
		t.Fatal(err)
	}
}

func TestOutboxLeaseLostWithConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.Store(t)
	l, err := s.TryLeaseOutbox(ctx)
	if err != nil || l == nil {
		t.Fatalf("lease: %v %v", l, err)
	}
	var holder int64
	if err := s.DB().QueryRowContext(ctx,
		"SELECT IS_USED_LOCK(CONCAT('taskd_relay_', SHA1(DATABASE())))").Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, fmt.Sprintf("KILL %d", holder)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadOutbox(ctx, 10); err == nil {
		t.Fatal("read on a killed lease connection succeeded")
	}
	l.Release(ctx)
	// The server freed the lock with the connection: someone else may take over.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l2, err := s.TryLeaseOutbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l2 != nil {
			l2.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never freed after its connection was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
