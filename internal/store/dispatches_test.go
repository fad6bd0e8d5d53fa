package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// plantDispatches inserts n finished records: 40 users, 30 tasks of each kind, mostly
// done, some dead, expired or open, one a second from at (in groups of three sharing a
// time, so that pages split ties), and returns their log ids.
func plantDispatches(t *testing.T, db *sql.DB, n int, at time.Time) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += 500 {
		var rows []string
		var args []any
		for i := start; i < min(start+500, n); i++ {
			state := taskd.StateDone
			switch {
			case i%50 == 0:
				state = taskd.StateDead
			case i%23 == 0:
				state = taskd.StateExpired
			case i%97 == 0:
				state = taskd.StateOpen
			}
			dispatched := at.Add(time.Duration(i/3) * time.Second)
			id := store.NewLogID(dispatched)
			ids = append(ids, id)
			rows = append(rows, "(?, ?, ?, ?, ?, 1, 1, ?, 1, '{}', ?)")
			args = append(args, id, fmt.Sprintf("u%d", i%40), 1+i%2, 1+i%30, at.Truncate(time.Hour), state, dispatched)
		}
		if _, err := db.Exec(`INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state,
			template_id, params, dispatched_at) VALUES `+strings.Join(rows, ", "), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("ANALYZE TABLE dispatch"); err != nil {
		t.Fatal(err)
	}
	return ids
}

// Every filter the dispatch lists take is served by a key whose order is the page's:
// no plan scans the table (type ALL) or sorts (filesort), with or without a cursor or a
// time range. The plans are logged (go test -v -run TestDispatchListPlans).
func TestDispatchListPlans(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	plantDispatches(t, st.DB(), 3000, at)
	cursor := &taskd.DispatchCursor{DispatchedAt: at.Add(500 * time.Second), LogID: "0192f5c4-0000-7000-8000-000000000000"}
	for mask := 0; mask < 8; mask++ {
		var f taskd.DispatchFilter
		var name []string
		if mask&1 != 0 {
			f.UID, name = "u7", append(name, "uid")
		}
		if mask&2 != 0 {
			f.Task, name = taskd.TaskKey{Kind: taskd.KindRotate, ID: 8}, append(name, "task_id")
		}
		if mask&4 != 0 {
			f.State, name = taskd.StateDead, append(name, "state")
		}
		if len(name) == 0 {
			name = []string{"no filter"}
		}
		for _, variant := range []struct {
			name     string
			from, to time.Time
			after    *taskd.DispatchCursor
		}{
			{"", time.Unix(0, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), nil},
			{" from/to", at.Add(100 * time.Second), at.Add(900 * time.Second), nil},
			{" cursor", time.Unix(0, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), cursor},
		} {
			f.From, f.To = variant.from, variant.to
			q, args := store.DispatchListQuery(f, variant.after, 101)
			plan := explain(t, st.DB(), q, args)
			t.Logf("%s%s:\n%s", strings.Join(name, "+"), variant.name, plan)
			for _, row := range plan {
				if row["table"] == "dispatch" && (row["type"] == "ALL" || row["key"] == "NULL" || strings.Contains(row["Extra"], "filesort")) {
					t.Errorf("%s%s: a scan or a sort: %v", strings.Join(name, "+"), variant.name, row)
				}
			}
		}
	}
}

// planRows is an EXPLAIN's rows, each by column name ("NULL" for null).
type planRows []map[string]string

func (p planRows) String() string {
	var b strings.Builder
	for _, row := range p {
		fmt.Fprintf(&b, "  type=%s key=%s key_len=%s ref=%s rows=%s Extra=%s possible_keys=%s\n",
			row["type"], row["key"], row["key_len"], row["ref"], row["rows"], row["Extra"], row["possible_keys"])
	}
	return b.String()
}

func explain(t *testing.T, db *sql.DB, q string, args []any) planRows {
	t.Helper()
	rows, err := db.Query("EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out planRows
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = "NULL"
			if vals[i].Valid {
				row[c] = vals[i].String
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Paging through a list gives every matching record once, newest first, ties on the
// dispatch time broken by log id, whatever the page size.
func TestDispatchListPagesWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	plantDispatches(t, st.DB(), 300, at)
	for _, f := range []taskd.DispatchFilter{
		{},
		{UID: "u3"},
		{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 5}},
		{State: taskd.StateDone, From: at.Add(10 * time.Second), To: at.Add(70 * time.Second)},
		{UID: "u10", State: taskd.StateDead},
	} {
		all, err := st.ListDispatches(ctx, f, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) == 0 {
			t.Fatalf("%+v: nothing listed", f)
		}
		if !slices.IsSortedFunc(all, func(a, b taskd.DispatchRecord) int {
			if c := b.DispatchedAt.Compare(a.DispatchedAt); c != 0 {
				return c
			}
			return strings.Compare(b.LogID, a.LogID)
		}) {
			t.Fatalf("%+v: not newest first", f)
		}
		for _, size := range []int{1, 2, 7} {
			var paged []taskd.DispatchRecord
			var after *taskd.DispatchCursor
			for {
				page, err := st.ListDispatches(ctx, f, after, size)
				if err != nil {
					t.Fatal(err)
				}
				paged = append(paged, page...)
				if len(page) < size {
					break
				}
				last := page[len(page)-1]
				// Through the encoded form, as a client has it.
				if after, err = taskd.ParseDispatchCursor(taskd.DispatchCursor{DispatchedAt: last.DispatchedAt, LogID: last.LogID}.Encode()); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.EqualFunc(paged, all, func(a, b taskd.DispatchRecord) bool { return a.LogID == b.LogID }) {
				t.Fatalf("%+v, pages of %d: %d records, want the %d of one page in the same order", f, size, len(paged), len(all))
			}
		}
	}
}
