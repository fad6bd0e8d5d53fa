package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// The fleet: when each uid last polled and which agent it reported (client_agent),
// the clients and groups lists, and dispatch outcomes by agent version.

// sightingsPerStatement bounds one upsert of sightings.
const sightingsPerStatement = 500

// SaveSightings writes a batch of polls: each uid's last_seen moves forward to its
// sighting's time (never back: another node may have written a later one), and a
// sighting with an agent replaces the uid's agent. Rows are written in uid order, so
// that two nodes' batches do not deadlock.
func (s *Store) SaveSightings(ctx context.Context, batch []taskd.Sighting) error {
	batch = slices.Clone(batch)
	slices.SortFunc(batch, func(a, b taskd.Sighting) int { return strings.Compare(a.UID, b.UID) })
	for len(batch) > 0 {
		n := min(len(batch), sightingsPerStatement)
		part := batch[:n]
		batch = batch[n:]
		var q strings.Builder
		q.WriteString("INSERT INTO client_agent (uid, last_seen, version, hostname, labels) VALUES ")
		args := make([]any, 0, 5*len(part))
		for i, sg := range part {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?, ?, ?)")
			args = append(args, sg.UID, sg.At.UTC())
			if sg.Agent == nil {
				args = append(args, nil, nil, nil)
			} else {
				args = append(args, sg.Agent.Version, sg.Agent.Hostname, sg.Agent.LabelsJSON())
			}
		}
		// A row that exists keeps the agent it has: a report is written when it is made,
		// by the fetch that carried it (SyncAgentGroups); a batch may carry an older one,
		// from a node that saw it first.
		q.WriteString(` ON DUPLICATE KEY UPDATE
			last_seen = GREATEST(last_seen, VALUES(last_seen))`)
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q.String(), args...)
			return err
		})
		if err != nil {
			return mysqlErr("save sightings", err)
		}
	}
	return nil
}

// ListClients lists the clients f selects in uid order, after uid after, up to limit,
// and whether there are more. A client is a uid with a client key (live or revoked),
// settings, or a recorded poll. f.Matches, a rule over reports, is applied as the rows
// are read, in pages of clientsRead: a rare match may read the whole fleet.
func (s *Store) ListClients(ctx context.Context, f taskd.ClientFilter, after string, limit int) ([]taskd.Client, bool, error) {
	var out []taskd.Client
	for {
		n := limit + 1
		if f.Matches != nil {
			n = max(n, clientsRead)
		}
		page, err := s.readClients(ctx, f, after, n)
		if err != nil {
			return nil, false, err
		}
		for _, c := range page {
			if f.Matches == nil || c.Agent != nil && f.Matches(*c.Agent) {
				out = append(out, c)
			}
		}
		if len(out) > limit || len(page) < n {
			break
		}
		after = page[len(page)-1].UID
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// clientsRead is how many clients a filtered list reads at a time.
const clientsRead = 500

// readClients reads up to n clients f's SQL conditions select, after uid after.
func (s *Store) readClients(ctx context.Context, f taskd.ClientFilter, after string, n int) ([]taskd.Client, error) {
	var where []string
	var args []any
	// The cursor is pushed into each source, so a page reads from the cursor on.
	args = append(args, after, after, after)
	if f.Group != "" {
		where = append(where, "EXISTS (SELECT 1 FROM group_member m WHERE m.gid = ? AND m.uid = u.uid)")
		args = append(args, f.Group)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		// Keys are checked (taskd.CheckLabelKey): no quote can close the path.
		where = append(where, "JSON_UNQUOTE(JSON_EXTRACT(a.labels, ?)) = ?")
		args = append(args, `$."`+k+`"`, f.Labels[k])
	}
	if f.SeenBefore != nil {
		where = append(where, "(a.last_seen IS NULL OR a.last_seen < ?)")
		args = append(args, f.SeenBefore.UTC())
	}
	if f.SeenAfter != nil {
		where = append(where, "a.last_seen >= ?")
		args = append(args, f.SeenAfter.UTC())
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, n)
	rows, err := s.db.QueryContext(ctx, `SELECT u.uid, a.last_seen, a.version, a.hostname, a.labels,
		(SELECT COUNT(*) FROM client_key k WHERE k.uid = u.uid AND k.revoked_at IS NULL),
		(SELECT COUNT(*) FROM dispatch d WHERE d.open_uid = u.uid),
		COALESCE(c.max_in_flight, ?)
		FROM (SELECT uid FROM client_key WHERE uid > ? UNION SELECT uid FROM client_setting WHERE uid > ?
			UNION SELECT uid FROM client_agent WHERE uid > ?) u
		LEFT JOIN client_agent a ON a.uid = u.uid
		LEFT JOIN client_setting c ON c.uid = u.uid`+cond+`
		ORDER BY u.uid LIMIT ?`, append([]any{taskd.DefaultMaxInFlight}, args...)...)
	if err != nil {
		return nil, mysqlErr("list clients", err)
	}
	defer rows.Close()
	var out []taskd.Client
	for rows.Next() {
		var c taskd.Client
		var seen sql.NullTime
		var version, host, labels sql.NullString
		if err := rows.Scan(&c.UID, &seen, &version, &host, &labels, &c.Keys, &c.Open, &c.MaxInFlight); err != nil {
			return nil, mysqlErr("list clients", err)
		}
		if c.LastSeen, c.Agent, err = agentOf(seen, version, host, labels); err != nil {
			return nil, fmt.Errorf("client %s: %w", c.UID, err)
		}
		out = append(out, c)
	}
	return out, mysqlErr("list clients", rows.Err())
}

// agentOf reads a client_agent row's columns (all NULL: no row).
func agentOf(seen sql.NullTime, version, host, labels sql.NullString) (*time.Time, *taskd.AgentInfo, error) {
	var at *time.Time
	if seen.Valid {
		t := seen.Time.UTC()
		at = &t
	}
	if !version.Valid {
		return at, nil, nil
	}
	a := &taskd.AgentInfo{Version: version.String, Hostname: host.String, Labels: map[string]string{}}
	if labels.Valid {
		if err := json.Unmarshal([]byte(labels.String), &a.Labels); err != nil {
			return nil, nil, fmt.Errorf("labels: %w", err)
		}
	}
	return at, a, nil
}

// ListGroups lists the groups in gid order, after gid after, up to limit, and whether
// there are more: every group with a member, and every group an active or paused task
// targets (with 0 members if it has none).
func (s *Store) ListGroups(ctx context.Context, after string, limit int) ([]taskd.GroupSummary, bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT g.gid,
		(SELECT COUNT(*) FROM group_member m WHERE m.gid = g.gid),
		(SELECT COUNT(*) FROM task_once t WHERE t.executor = CONCAT('gid_', g.gid) AND t.status IN (1, 2)) +
		(SELECT COUNT(*) FROM task_rotate t WHERE t.executor = CONCAT('gid_', g.gid) AND t.status IN (1, 2)),
		COALESCE(r.dynamic, 0), COALESCE(r.selector, ''), COALESCE(r.agent_version, '')
		FROM (SELECT gid FROM group_member WHERE gid > ?
			UNION SELECT gid FROM member_group WHERE dynamic AND gid > ?
			UNION SELECT SUBSTRING(executor, 5) FROM task_once WHERE executor LIKE 'gid\_%' AND status IN (1, 2) AND SUBSTRING(executor, 5) > ?
			UNION SELECT SUBSTRING(executor, 5) FROM task_rotate WHERE executor LIKE 'gid\_%' AND status IN (1, 2) AND SUBSTRING(executor, 5) > ?) g
		LEFT JOIN member_group r ON r.gid = g.gid
		ORDER BY g.gid LIMIT ?`, after, after, after, after, limit+1)
	if err != nil {
		return nil, false, mysqlErr("list groups", err)
	}
	defer rows.Close()
	var out []taskd.GroupSummary
	for rows.Next() {
		var g taskd.GroupSummary
		if err := rows.Scan(&g.GID, &g.Members, &g.Tasks, &g.Dynamic, &g.Selector, &g.AgentVersion); err != nil {
			return nil, false, mysqlErr("list groups", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, false, mysqlErr("list groups", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// VersionStats counts, per agent version the uids report now, the dispatches made and
// the completions, failures and expiries that happened in [from, to), and how many
// uids report that version. A dispatch counts under its uid's current version: after
// an upgrade, the dispatches of the hour before show under the new version.
func (s *Store) VersionStats(ctx context.Context, from, to time.Time) ([]taskd.VersionStats, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT COALESCE(a.version, ''), COUNT(DISTINCT d.uid),
		COUNT(CASE WHEN d.dispatched_at >= ? AND d.dispatched_at < ? THEN 1 END),
		COUNT(CASE WHEN d.result = 1 AND d.finished_at >= ? AND d.finished_at < ? THEN 1 END),
		COUNT(CASE WHEN d.result = 2 AND d.finished_at >= ? AND d.finished_at < ? THEN 1 END),
		COUNT(CASE WHEN (d.state = 4 OR (d.state = 6 AND d.result IS NULL)) AND d.finished_at >= ? AND d.finished_at < ? THEN 1 END)
		FROM dispatch d LEFT JOIN client_agent a ON a.uid = d.uid
		WHERE `+inWindow("d")+`
		GROUP BY COALESCE(a.version, '') ORDER BY 1`,
		append([]any{from, to, from, to, from, to, from, to}, windowArgs(from, to)...)...)
	if err != nil {
		return nil, mysqlErr("version stats", err)
	}
	defer rows.Close()
	out := []taskd.VersionStats{}
	for rows.Next() {
		var v taskd.VersionStats
		if err := rows.Scan(&v.Version, &v.Clients, &v.Dispatched, &v.Completed, &v.Failed, &v.Expired); err != nil {
			return nil, mysqlErr("version stats", err)
		}
		out = append(out, v)
	}
	return out, mysqlErr("version stats", rows.Err())
}
