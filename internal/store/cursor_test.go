package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// A complete moves the user's cursor and exclude set in one statement: an occurrence
// after the cursor moves it and starts the set afresh (empty for until_exhausted, which
// stays on offer), one at the cursor joins the set once, one before it changes nothing.
func TestCompleteMovesCursorAndExcludeSet(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tpl, err := st.CreateTemplate(ctx, "test", taskd.Template{Name: "t", Schema: []byte(`{}`)}, at)
	if err != nil {
		t.Fatal(err)
	}
	task := func(start time.Time, mode taskd.Mode) taskd.Occurrence {
		t.Helper()
		created, err := st.CreateTask(ctx, "test", taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "uid_1",
			StartTime: start, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: taskd.Unlimited, Mode: mode,
			Priority: 5, Status: taskd.StatusActive}, at)
		if err != nil {
			t.Fatal(err)
		}
		return taskd.Occurrence{Task: created.Key, DueAt: start}
	}
	done := func(occ taskd.Occurrence) {
		t.Helper()
		outcome, d, err := st.Claim(ctx, "1", occ, at, taskd.Single)
		if err != nil || outcome != taskd.Claimed {
			t.Fatalf("claim %s: %v, %v", occ, outcome, err)
		}
		if outcome, _, err := st.Complete(ctx, "1", d.LogID, taskd.ResultSuccess, nil, at); err != nil || outcome != taskd.Completed {
			t.Fatalf("complete %s: %v, %v", occ, outcome, err)
		}
	}
	want := func(step string, cursor time.Time, exclude ...taskd.Occurrence) {
		t.Helper()
		var got time.Time
		var raw string
		if err := st.DB().QueryRowContext(ctx, "SELECT cursor_at, exclude_keys FROM user_state WHERE uid = '1'").
			Scan(&got, &raw); err != nil {
			t.Fatal(err)
		}
		var keys []string
		if err := json.Unmarshal([]byte(raw), &keys); err != nil {
			t.Fatalf("%s: exclude_keys %q: %v", step, raw, err)
		}
		var wantKeys []string
		for _, o := range exclude {
			wantKeys = append(wantKeys, o.String())
		}
		slices.Sort(keys)
		slices.Sort(wantKeys)
		if !got.Equal(cursor) || !slices.Equal(keys, wantKeys) {
			t.Fatalf("%s: cursor %v, exclude %v; want %v, %v", step, got, keys, cursor, wantKeys)
		}
	}
	a, b := task(at, taskd.ModeOncePerUser), task(at, taskd.ModeOncePerUser)
	older := task(at.Add(-time.Minute), taskd.ModeOncePerUser)
	later := task(at.Add(time.Minute), taskd.ModeOncePerUser)
	exhaust := task(at.Add(time.Minute), taskd.ModeUntilExhausted)

	done(a)
	want("first complete", at, a)
	done(b)
	want("a tie joins the set", at, a, b)
	done(older)
	want("an older occurrence changes nothing", at, a, b)
	done(exhaust)
	want("until_exhausted moves the cursor, excludes nothing", at.Add(time.Minute))
	done(exhaust) // again: it stays on offer while quota lasts
	want("until_exhausted again", at.Add(time.Minute))
	done(later)
	want("once_per_user at the cursor joins", at.Add(time.Minute), later)
}
