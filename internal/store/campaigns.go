package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Campaigns (seed 000). MySQL holds each campaign's settings and state, the uids of a
// uid-list campaign, and its progress as last synced from Redis, where the live window
// is (package queue).

const selectCampaign = `SELECT id, name, template_id, params, executor, items, total, rate_per_second,
	window_size, max_failures, per_seconds, lease_seconds, max_attempts, retry_backoff, state, reason, epoch, salt,
	done_offset, done, failed, in_flight, finished_above, created_at, updated_at, started_at, finished_at, windows
	FROM campaign`

type rowScanner interface{ Scan(dest ...any) error }

func scanCampaign(row rowScanner) (taskd.Campaign, error) {
	var c taskd.Campaign
	var params string
	var maxFailures, perSeconds sql.NullInt64
	var finished, windows sql.NullString
	err := row.Scan(&c.ID, &c.Name, &c.TemplateID, &params, &c.Executor, &c.Items, &c.Total, &c.RatePerSecond,
		&c.Window, &maxFailures, &perSeconds, &c.LeaseSeconds, &c.MaxAttempts, &c.RetryBackoffSeconds, &c.State,
		&c.Reason, &c.Epoch, &c.Salt, &c.Offset, &c.Done, &c.Failed, &c.InFlight, &finished, &c.CreatedAt, &c.UpdatedAt,
		&c.StartedAt, &c.FinishedAt, &windows)
	if err != nil {
		return c, err
	}
	if c.Windows, err = taskd.ParseWindows(windows.String); err != nil {
		return c, err
	}
	c.Params = json.RawMessage(params)
	if maxFailures.Valid {
		c.ErrorBudget = &taskd.ErrorBudget{MaxFailures: int(maxFailures.Int64), PerSeconds: int(perSeconds.Int64)}
	}
	if finished.Valid && finished.String != "" {
		if err := json.Unmarshal([]byte(finished.String), &c.FinishedAbove); err != nil {
			return c, err
		}
	}
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	for _, t := range []*time.Time{c.StartedAt, c.FinishedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return c, nil
}

// CreateCampaign stores a new campaign, in state created, with its uids (nil for a
// count campaign, or one whose uids are uploaded later), audited (campaign.create).
func (s *Store) CreateCampaign(ctx context.Context, actor string, c taskd.Campaign, uids []string, now time.Time) (taskd.Campaign, error) {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, "SELECT 1 FROM task_params_template WHERE id = ? AND status = 1 LOCK IN SHARE MODE", c.TemplateID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeInvalid, "template_id: template %d does not exist", c.TemplateID)
		}
		if err != nil {
			return err
		}
		var maxFailures, perSeconds any
		if c.ErrorBudget != nil {
			maxFailures, perSeconds = c.ErrorBudget.MaxFailures, c.ErrorBudget.PerSeconds
		}
		c.State, c.CreatedAt, c.UpdatedAt = taskd.CampaignCreated, now, now
		res, err := tx.ExecContext(ctx, `INSERT INTO campaign (name, template_id, params, executor, items, total,
			rate_per_second, window_size, max_failures, per_seconds, lease_seconds, max_attempts, retry_backoff,
			state, salt, created_at, updated_at, windows) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.Name, c.TemplateID, string(c.Params), c.Executor, c.Items, c.Total, c.RatePerSecond, c.Window,
			maxFailures, perSeconds, c.LeaseSeconds, c.MaxAttempts, c.RetryBackoffSeconds, c.State, c.Salt, now, now,
			windowsArg(c.Windows))
		if err != nil {
			return err
		}
		if c.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		if len(uids) > 0 {
			i := 0
			if _, err := insertCampaignUIDs(ctx, tx, c.ID, 0, func() (string, bool, error) {
				if i == len(uids) {
					return "", false, nil
				}
				i++
				return uids[i-1], true, nil
			}); err != nil {
				return err
			}
		}
		return audit(ctx, tx, actor, "campaign.create", campaignTarget(c.ID), nil, c, now)
	})
	return c, mysqlErr("create campaign", err)
}

func campaignTarget(id int64) string { return taskd.CampaignTaskID(id) }

// uidBatch is how many uids one INSERT of an upload writes.
const uidBatch = 500

// insertCampaignUIDs appends the uids next yields to campaign id's list from index
// from, a batch per statement; it returns how many it wrote.
func insertCampaignUIDs(ctx context.Context, tx *sql.Tx, id, from int64, next func() (string, bool, error)) (int64, error) {
	args := make([]any, 0, 3*uidBatch)
	n := int64(0)
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO campaign_item (campaign_id, idx, uid) VALUES "+tuples(len(args)/3, 3), args...)
		args = args[:0]
		return err
	}
	for {
		uid, ok, err := next()
		if err != nil {
			return n, err
		}
		if !ok {
			return n, flush()
		}
		args = append(args, id, from+n, uid)
		n++
		if n > taskd.MaxCampaignItems-from {
			return n, taskd.Errorf(taskd.CodeInvalid, "items: a campaign holds at most %d items", int64(taskd.MaxCampaignItems))
		}
		if len(args) == 3*uidBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
}

// AddCampaignUIDs appends the uids next yields to a uid-list campaign that is still
// created, in one transaction (an upload that fails part-way adds nothing), audited
// (campaign.items). It returns the campaign with its new total.
func (s *Store) AddCampaignUIDs(ctx context.Context, actor string, id int64, next func() (string, bool, error), now time.Time) (taskd.Campaign, error) {
	var c taskd.Campaign
	// Once: the body is read as it goes, and a retry would write only its rest.
	err := s.inTxOnce(ctx, func(tx *sql.Tx) error {
		var err error
		if c, err = lockCampaign(ctx, tx, id); err != nil {
			return err
		}
		switch {
		case c.Items != taskd.ItemsUIDs:
			return taskd.Errorf(taskd.CodeConflict, "campaign %d has numbered items (count); only a uid-list campaign takes uploads", id)
		case c.State != taskd.CampaignCreated:
			return taskd.Errorf(taskd.CodeConflict, "campaign %d is %s; items are uploaded before the start", id, c.State)
		}
		added, err := insertCampaignUIDs(ctx, tx, id, c.Total, next)
		if err != nil {
			return err
		}
		before := c.Total
		c.Total += added
		c.UpdatedAt = now
		if _, err := tx.ExecContext(ctx, "UPDATE campaign SET total = ?, updated_at = ? WHERE id = ?", c.Total, now, id); err != nil {
			return err
		}
		type items struct {
			Total int64 `json:"total"`
		}
		return audit(ctx, tx, actor, "campaign.items", campaignTarget(id), items{before}, items{c.Total}, now)
	})
	return c, mysqlErr("add campaign uids", err)
}

func lockCampaign(ctx context.Context, tx *sql.Tx, id int64) (taskd.Campaign, error) {
	c, err := scanCampaign(tx.QueryRowContext(ctx, selectCampaign+" WHERE id = ? FOR UPDATE", id))
	if errors.Is(err, sql.ErrNoRows) {
		return c, taskd.Errorf(taskd.CodeNotFound, "campaign %d not found", id)
	}
	return c, err
}

// GetCampaign returns campaign id as last synced.
func (s *Store) GetCampaign(ctx context.Context, id int64) (taskd.Campaign, error) {
	c, err := scanCampaign(s.db.QueryRowContext(ctx, selectCampaign+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return c, taskd.Errorf(taskd.CodeNotFound, "campaign %d not found", id)
	}
	return c, mysqlErr("get campaign", err)
}

// ListCampaigns returns up to limit campaigns in the given states (any, for none),
// newest first, with ids below before (0: from the newest).
func (s *Store) ListCampaigns(ctx context.Context, states []taskd.CampaignState, before int64, limit int) ([]taskd.Campaign, error) {
	var where []string
	var args []any
	if len(states) > 0 {
		where = append(where, "state IN ("+marks(len(states))+")")
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	if before > 0 {
		where = append(where, "id < ?")
		args = append(args, before)
	}
	q := selectCampaign
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, mysqlErr("list campaigns", err)
	}
	defer rows.Close()
	out := []taskd.Campaign{}
	for rows.Next() {
		c, err := scanCampaign(rows)
		if err != nil {
			return nil, mysqlErr("list campaigns", err)
		}
		out = append(out, c)
	}
	return out, mysqlErr("list campaigns", rows.Err())
}

// CampaignUIDs returns the uids of items from..to-1 of a uid-list campaign, by index.
func (s *Store) CampaignUIDs(ctx context.Context, id, from, to int64) (map[int64]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT idx, uid FROM campaign_item WHERE campaign_id = ? AND idx >= ? AND idx < ?", id, from, to)
	if err != nil {
		return nil, mysqlErr("campaign uids", err)
	}
	defer rows.Close()
	out := make(map[int64]string, to-from)
	for rows.Next() {
		var idx int64
		var uid string
		if err := rows.Scan(&idx, &uid); err != nil {
			return nil, mysqlErr("campaign uids", err)
		}
		out[idx] = uid
	}
	return out, mysqlErr("campaign uids", rows.Err())
}

// MoveCampaign makes an admin's move of campaign id, audited (campaign.<move>). live is
// the campaign's window as Redis has it (nil when Redis has none): a state Redis
// reached on its own at the campaign's epoch (paused by the error budget, finished) is
// the state the move starts from, and the version ifMatch must match is taken there.
// The move bumps the epoch; the caller then takes the new state to Redis.
func (s *Store) MoveCampaign(ctx context.Context, actor string, id int64, move taskd.CampaignMove, live *taskd.CampaignProgress, ifMatch taskd.IfMatch, now time.Time) (taskd.Campaign, error) {
	var after taskd.Campaign
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c, err := lockCampaign(ctx, tx, id)
		if err != nil {
			return err
		}
		if live != nil && live.Epoch == c.Epoch {
			was := c
			applyProgress(&c, *live, now)
			if c.State != was.State { // paused by the error budget, or finished, unsynced yet
				if err := audit(ctx, tx, "system", "campaign."+string(c.State), campaignTarget(id), auditedCampaign(was), auditedCampaign(c), now); err != nil {
					return err
				}
			}
		}
		if err := ifMatch.Check(campaignTarget(id), c.Version()); err != nil {
			return err
		}
		before := c
		to, err := move.Apply(c.State)
		if err != nil {
			return err
		}
		after = c
		after.State, after.Reason, after.Epoch, after.UpdatedAt = to, "", c.Epoch+1, now
		if move == taskd.MoveStart && after.StartedAt == nil {
			after.StartedAt = &now
		}
		if move == taskd.MoveStart && after.Total == 0 {
			return taskd.Errorf(taskd.CodeConflict, "campaign %d has no items; upload them first", id)
		}
		if err := writeCampaign(ctx, tx, after); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "campaign."+string(move), campaignTarget(id), auditedCampaign(before), auditedCampaign(after), now)
	})
	return after, mysqlErr("move campaign", err)
}

// auditedCampaign is what the audit log keeps of a campaign's move.
func auditedCampaign(c taskd.Campaign) any {
	return struct {
		State  taskd.CampaignState `json:"state"`
		Reason string              `json:"reason,omitempty"`
		Offset int64               `json:"offset"`
		Done   int64               `json:"done"`
		Failed int64               `json:"failed"`
	}{c.State, c.Reason, c.Offset, c.Done, c.Failed}
}

// applyProgress takes p, the live window at c's epoch, into c: its numbers (never
// backwards), and the state Redis reached on its own: paused by the error budget (from
// running), finished (from any state).
func applyProgress(c *taskd.Campaign, p taskd.CampaignProgress, now time.Time) {
	if p.Offset >= c.Offset && p.Done >= c.Done {
		c.Offset, c.Done, c.Failed, c.InFlight, c.FinishedAbove = p.Offset, p.Done, p.Failed, p.InFlight, p.Finished
	}
	switch {
	case p.State == taskd.CampaignFinished && c.State != taskd.CampaignFinished:
		// every item finished: from running, or paused or stopping with the last ones
		// in flight
		c.State, c.Reason, c.FinishedAt = taskd.CampaignFinished, "", &now
	case p.State == taskd.CampaignPaused && c.State == taskd.CampaignRunning:
		c.State, c.Reason = p.State, p.Reason
	}
}

func writeCampaign(ctx context.Context, tx *sql.Tx, c taskd.Campaign) error {
	finished, err := json.Marshal(c.FinishedAbove)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE campaign SET state = ?, reason = ?, epoch = ?, done_offset = ?, done = ?,
		failed = ?, in_flight = ?, finished_above = ?, updated_at = ?, started_at = ?, finished_at = ? WHERE id = ?`,
		c.State, c.Reason, c.Epoch, c.Offset, c.Done, c.Failed, c.InFlight, string(finished), c.UpdatedAt,
		c.StartedAt, c.FinishedAt, c.ID)
	return err
}

// SyncCampaign takes campaign id's live window p into MySQL, when p is at the
// campaign's epoch (a move made since is newer than what Redis has), and ends a
// stopping campaign with nothing in flight (stopped, a new epoch). It returns the
// campaign as it now is: the caller takes a newer epoch to Redis.
func (s *Store) SyncCampaign(ctx context.Context, id int64, p taskd.CampaignProgress, now time.Time) (taskd.Campaign, error) {
	var c taskd.Campaign
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if c, err = lockCampaign(ctx, tx, id); err != nil {
			return err
		}
		if p.Epoch != c.Epoch {
			return nil
		}
		was := c
		applyProgress(&c, p, now)
		if c.State == taskd.CampaignStopping && p.InFlight == 0 {
			c.State, c.Epoch = taskd.CampaignStopped, c.Epoch+1
		}
		if c.State == was.State && c.Offset == was.Offset && c.Done == was.Done && c.Failed == was.Failed &&
			c.InFlight == was.InFlight && len(c.FinishedAbove) == len(was.FinishedAbove) {
			return nil // nothing moved: no write
		}
		c.UpdatedAt = now
		if err := writeCampaign(ctx, tx, c); err != nil {
			return err
		}
		if c.State != was.State {
			action := "campaign." + string(c.State)
			return audit(ctx, tx, "system", action, campaignTarget(id), auditedCampaign(was), auditedCampaign(c), now)
		}
		return nil
	})
	return c, mysqlErr("sync campaign", err)
}
