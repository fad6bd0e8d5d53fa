package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// CompleteStage completes the stage of uid's open dispatch logID with success and hands
// the occurrence on to stage next, with context, after delay: the record is staged and
// waits beside the user's slot (the quota slot kept, the cursor unmoved) until the
// user's heap offers the next stage, which Resume dispatches. next must be one of the
// stages of the dispatch's template (400 otherwise). Outcomes as Complete's, StageDone
// for Completed.
func (s *Store) CompleteStage(ctx context.Context, uid, logID string, detail json.RawMessage, next string,
	context json.RawMessage, delay time.Duration, now time.Time) (taskd.CompleteOutcome, *taskd.Dispatch, error) {
	return s.completeAlone(ctx, "complete stage", uid, logID, now, func(tx *sql.Tx, d *taskd.Dispatch) (taskd.CompleteOutcome, error) {
		stages, err := templateStages(ctx, tx, d.TemplateID)
		if err != nil {
			return 0, err
		}
		if !slices.Contains(stages, next) {
			if len(stages) == 0 {
				return 0, taskd.Errorf(taskd.CodeInvalid, "next_stage: template %d has no stages", d.TemplateID)
			}
			return 0, taskd.Errorf(taskd.CodeInvalid, "next_stage: %q is not a stage of template %d (%s)",
				next, d.TemplateID, strings.Join(stages, ", "))
		}
		return taskd.StageDone, s.stageOn(ctx, tx, d, detail, next, context, delay, now)
	})
}

// stageOn records d's stage as completed and hands the occurrence on to stage next.
func (s *Store) stageOn(ctx context.Context, tx *sql.Tx, d *taskd.Dispatch, detail json.RawMessage, next string,
	context json.RawMessage, delay time.Duration, now time.Time) error {
	d.FinishStage(next, context, delay, now)
	if _, err := tx.ExecContext(ctx, `UPDATE dispatch SET state = ?, result = ?, finished_at = ?, detail = ?,
		retry_at = ?, open_uid = NULL, waiting_uid = uid, next_stage = ?, next_context = ? WHERE log_id = ?`,
		d.State, d.Result, now, nullJSON(detail), *d.RetryAt, next, nullJSON(context), d.LogID); err != nil {
		return err
	}
	return s.emit(ctx, tx, d, taskd.EventComplete, now)
}

// templateStages reads a template's stages (none for a template gone).
func templateStages(ctx context.Context, tx *sql.Tx, id int64) ([]string, error) {
	var raw *string
	if err := tx.QueryRowContext(ctx, "SELECT stages FROM task_params_template WHERE id = ?", id).
		Scan(&raw); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return parseStages(raw)
}

// followingStage is the stage after stage in stages ("" when stage is the last, or
// not listed any more).
func followingStage(stages []string, stage string) string {
	if i := slices.Index(stages, stage); i >= 0 && i+1 < len(stages) {
		return stages[i+1]
	}
	return ""
}
