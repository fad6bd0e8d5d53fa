package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// Writes tell a change from none by the rows they changed. A DSN with
// clientFoundRows=true would count matched rows instead; the store must ignore that
// option, and the quota must hold whatever the DSN says.
func TestClaimRespectsQuotaWhateverTheDSN(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	ctx := context.Background()
	st, err := store.Open(ctx, dsn+sep+"clientFoundRows=true", store.OpenOptions{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	joinGroupG(t, st)
	tpl, err := st.CreateTemplate(ctx, "test", taskd.Template{Name: "t", Schema: []byte(`{}`)}, now)
	if err != nil {
		t.Fatal(err)
	}
	task, err := st.CreateTask(ctx, "test", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_g",
		StartTime: now, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser,
		Priority: 5, Status: taskd.StatusActive}, now)
	if err != nil {
		t.Fatal(err)
	}
	occ := taskd.Occurrence{Task: task.Key, DueAt: now}
	var mu sync.Mutex
	claimed := 0
	var wg sync.WaitGroup
	for _, uid := range []string{"a", "b", "c", "d"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, _, err := st.Claim(ctx, uid, occ, now, taskd.Single)
			if err != nil {
				t.Error(err)
			}
			if outcome == taskd.Claimed {
				mu.Lock()
				claimed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if claimed != 1 {
		t.Fatalf("quota 1: %d claims succeeded", claimed)
	}
}
