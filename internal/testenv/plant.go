package testenv

import (
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/uuid"
)

// PlantQuotaViolation inserts dispatch records, straight into the database, for an
// occurrence of a once_per_user task with a limited quota that the run dispatched: one
// more for the same user, and quota-1 for made-up users. The occurrence is then over
// its quota, its user holds it twice and the task's claimed counter no longer agrees.
// The load tester's checker must find it; it returns the task id.
func PlantQuotaViolation(t testing.TB, db *sql.DB) (taskID string) {
	t.Helper()
	var logID string
	var kind, id int64
	var quota int
	err := db.QueryRow(`SELECT d.log_id, d.task_kind, d.task_id, t.dispatch_times FROM dispatch d
		JOIN (SELECT 1 AS kind, id, dispatch_times, mode FROM task_once
		      UNION ALL SELECT 2, id, dispatch_times, mode FROM task_rotate) t
		  ON t.kind = d.task_kind AND t.id = d.task_id
		WHERE t.dispatch_times > 0 AND t.mode = 1 AND d.attempt = 1 AND d.state <> 4
		ORDER BY t.dispatch_times, d.log_id LIMIT 1`).Scan(&logID, &kind, &id, &quota)
	if err != nil {
		t.Fatalf("find a dispatched occurrence with a quota to plant on: %v", err)
	}
	for i := 0; i < quota; i++ {
		uid := "uid" // i == 0: the same user again
		if i > 0 {
			uid = fmt.Sprintf("'planted-%d'", i)
		}
		_, err = db.Exec(`INSERT INTO dispatch (log_id, uid, task_kind, task_id, due_at, mode, attempt, state, result,
			template_id, params, dispatched_at, finished_at)
			SELECT ?, `+uid+`, task_kind, task_id, due_at, mode, 1, 3, 1, template_id, params, NOW(6), NOW(6)
			FROM dispatch WHERE log_id = ?`, uuid.Must(uuid.NewV7()).String(), logID) // an id of now, as the server makes them
		if err != nil {
			t.Fatalf("plant: %v", err)
		}
	}
	return map[int64]string{1: "once:", 2: "rotate:"}[kind] + strconv.FormatInt(id, 10)
}
