package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// Every admin change that invalidates heaps notes what it invalidates, at its time, in
// its own transaction: the executor of a task created, edited (old and new) or
// deleted, and each user whose membership changed. The changes are listed in order,
// paged, and pruned by time.
func TestHeapChangesAreNoted(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tpl, err := st.CreateTemplate(ctx, "admin", taskd.Template{Name: "t", Schema: []byte(`{}`)}, at(0))
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.CreateTask(ctx, "admin", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "uid_a",
		StartTime: t0, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}, at(1))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = st.ReplaceTask(ctx, "admin", "task.replace", task.Key, nil, func(cur taskd.Task) (taskd.Task, error) {
		cur.Executor = "gid_g"
		return cur, nil
	}, at(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddMembers(ctx, "admin", "g", []string{"b", "c", "b"}, at(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReplaceMembers(ctx, "admin", "g", []string{"c", "d"}, at(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RemoveMember(ctx, "admin", "g", "c", at(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteTask(ctx, "admin", task.Key, nil, at(6)); err != nil {
		t.Fatal(err)
	}
	// A refused change notes nothing.
	if _, err := st.DeleteTask(ctx, "admin", task.Key, nil, at(7)); taskd.ErrorCode(err) != taskd.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
	want := "[gid_g@2 uid_a@2 uid_b@3 uid_c@3 uid_b@4 uid_d@4 uid_c@5 gid_g@6]"
	got := func(cs []taskd.HeapChange) string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = fmt.Sprintf("%s@%d", c.Target, int(c.At.Sub(t0)/time.Second))
		}
		return fmt.Sprint(out)
	}
	all, err := st.HeapChanges(ctx, at(2), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got(all) != want {
		t.Fatalf("changes from t0+2s\n got %s\nwant %s", got(all), want)
	}
	// Paging: after the third, the rest.
	rest, err := st.HeapChanges(ctx, all[2].At, all[2].ID, 100)
	if err != nil || len(rest) != len(all)-3 || rest[0].ID != all[3].ID {
		t.Fatalf("changes after the third: %s %v", got(rest), err)
	}
	// The creation at t0+1s is older than the cutoff at t0+2s: pruned, and only it.
	if n, err := st.PruneHeapChanges(ctx, at(2), 100); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	left, err := st.HeapChanges(ctx, t0.Add(-time.Hour), 0, 100)
	if err != nil || got(left) != want {
		t.Fatalf("changes after the prune: %s %v", got(left), err)
	}
}
