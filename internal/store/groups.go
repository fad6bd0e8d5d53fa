package store

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Every change of a group's members takes its turn on the group's row (lockGroup),
// then reads and writes the members without locking reads, in key order and in
// multi-row statements of memberChunk rows.

// memberChunk is the most members one statement adds or removes.
const memberChunk = 500

// lockGroup locks gid's row, creating it if gid has none: an upsert on the primary
// key, which takes a record lock and no gap lock, found or not. It reports whether gid
// is dynamic.
func lockGroup(ctx context.Context, tx *sql.Tx, gid string, now time.Time) (dynamic bool, err error) {
	if _, err := tx.ExecContext(ctx, "INSERT INTO member_group (gid, created_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE gid = gid", gid, now); err != nil {
		return false, err
	}
	err = tx.QueryRowContext(ctx, "SELECT dynamic FROM member_group WHERE gid = ?", gid).Scan(&dynamic)
	return dynamic, err
}

// lockKeptGroup is lockGroup for a change of members by hand: a dynamic group's
// members are the server's to write (conflict).
func lockKeptGroup(ctx context.Context, tx *sql.Tx, gid string, now time.Time) error {
	dynamic, err := lockGroup(ctx, tx, gid, now)
	if err == nil && dynamic {
		err = taskd.Errorf(taskd.CodeConflict, "group %s is dynamic: its members are the clients its selector and agent_version match; change its rule instead", gid)
	}
	return err
}

// writeMembers inserts (or, with remove, deletes) uids of gid, sorted, memberChunk at a
// time.
func writeMembers(ctx context.Context, tx *sql.Tx, gid string, uids []string, remove bool, now time.Time) error {
	for chunk := range slices.Chunk(uids, memberChunk) {
		var err error
		if remove {
			_, err = tx.ExecContext(ctx, "DELETE FROM group_member WHERE gid = ? AND uid IN ("+marks(len(chunk))+")",
				append([]any{gid}, anys(chunk)...)...)
		} else {
			args := make([]any, 0, 3*len(chunk))
			for _, u := range chunk {
				args = append(args, gid, u, now)
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO group_member (gid, uid, created_at) VALUES "+tuples(len(chunk), 3), args...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sortedSet is uids sorted, without repeats. Ids compare as the id columns' collation
// does, without regard to case ("Alice" is "alice"): of ids that differ only in case,
// the first given stays.
func sortedSet(uids []string) []string {
	seen := make(map[string]bool, len(uids))
	out := make([]string, 0, len(uids))
	for _, u := range uids {
		if k := strings.ToLower(u); !seen[k] {
			seen[k] = true
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return out
}

// AddMembers adds uids to gid and returns those that were not members yet, sorted.
func (s *Store) AddMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error) {
	want := sortedSet(uids)
	var added []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockKeptGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		have := make(map[string]bool)
		for chunk := range slices.Chunk(want, memberChunk) {
			rows, err := tx.QueryContext(ctx, "SELECT uid FROM group_member WHERE gid = ? AND uid IN ("+marks(len(chunk))+")",
				append([]any{gid}, anys(chunk)...)...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var u string
				if err := rows.Scan(&u); err != nil {
					rows.Close()
					return err
				}
				have[strings.ToLower(u)] = true
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		added = slices.DeleteFunc(slices.Clone(want), func(u string) bool { return have[strings.ToLower(u)] })
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, added, false, now); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, userTargets(added)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.add_members", "group:"+gid, nil, map[string]any{"added": added}, now)
	})
	return added, mysqlErr("add members", err)
}

// RemoveMember removes uid from gid; it reports whether uid was a member.
func (s *Store) RemoveMember(ctx context.Context, actor, gid, uid string, now time.Time) (bool, error) {
	var removed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockKeptGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "DELETE FROM group_member WHERE gid = ? AND uid = ?", gid, uid)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		if removed = n > 0; !removed {
			return nil
		}
		if err := noteHeapChanges(ctx, tx, now, taskd.UserExecutor(uid)); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.remove_member", "group:"+gid, map[string]string{"uid": uid}, nil, now)
	})
	return removed, mysqlErr("remove member", err)
}

// ReplaceMembers makes uids the members of gid and returns every uid whose membership
// changed (added or removed), sorted.
func (s *Store) ReplaceMembers(ctx context.Context, actor, gid string, uids []string, now time.Time) ([]string, error) {
	after := sortedSet(uids)
	var changed []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockKeptGroup(ctx, tx, gid, now); err != nil {
			return err
		}
		current, err := members(ctx, tx, gid)
		if err != nil {
			return err
		}
		want := make(map[string]bool, len(after))
		for _, u := range after {
			want[strings.ToLower(u)] = true
		}
		have := make(map[string]bool, len(current))
		var gone, fresh []string
		for _, u := range current {
			have[strings.ToLower(u)] = true
			if !want[strings.ToLower(u)] {
				gone = append(gone, u)
			}
		}
		for _, u := range after {
			if !have[strings.ToLower(u)] {
				fresh = append(fresh, u)
			}
		}
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, gone, true, now); err != nil {
			return err
		}
		if err := writeMembers(ctx, tx, gid, fresh, false, now); err != nil {
			return err
		}
		changed = sortedSet(append(gone, fresh...))
		if err := noteHeapChanges(ctx, tx, now, userTargets(changed)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.replace_members", "group:"+gid,
			map[string]any{"uids": current}, map[string]any{"uids": after}, now)
	})
	return changed, mysqlErr("replace members", err)
}

func members(ctx context.Context, q querier, gid string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT uid FROM group_member WHERE gid = ? ORDER BY uid", gid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	uids := []string{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, err
		}
		uids = append(uids, u)
	}
	return uids, rows.Err()
}

// Members returns the uids in gid.
func (s *Store) Members(ctx context.Context, gid string) ([]string, error) {
	uids, err := members(ctx, s.db, gid)
	return uids, mysqlErr("members", err)
}

// Dynamic groups. A change of a rule (SetGroupRule, DeleteGroup) takes the one row of
// dynamic_rules for update and then writes the members every stored report matches; a
// fetch whose report differs from the stored one (SyncAgentGroups) takes that row in
// share mode while it stores the report and writes the uid's memberships. So the two
// never miss each other, a group becoming dynamic included: a rule set after a
// report's commit reads the report, and a report after a rule's commit is matched
// against the rule.

// lockRules takes the rules' lock: for update to change a rule, in share mode to match
// a report.
func lockRules(ctx context.Context, tx *sql.Tx, update bool) error {
	mode := "LOCK IN SHARE MODE"
	if update {
		mode = "FOR UPDATE"
	}
	var id int
	return tx.QueryRowContext(ctx, "SELECT id FROM dynamic_rules WHERE id = 1 "+mode).Scan(&id)
}

// SetGroupRule makes gid dynamic with rule, or changes its rule, and makes its members
// the clients whose stored report matches (matches says). It returns the group and
// every uid whose membership changed, sorted. A group kept by hand that has members is
// a conflict (an admin's members are not dropped silently); so is a dynamic group
// beyond taskd.MaxDynamicGroups. It reads every stored report and holds the rules'
// lock while it writes: reports that arrive meanwhile wait for it.
func (s *Store) SetGroupRule(ctx context.Context, actor, gid string, rule taskd.DynamicGroup,
	matches func(taskd.AgentInfo) bool, now time.Time) (taskd.Group, []string, error) {
	g := taskd.Group{GID: gid, Dynamic: true, Selector: rule.Selector, AgentVersion: rule.AgentVersion}
	var changed []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockRules(ctx, tx, true); err != nil {
			return err
		}
		dynamic, err := lockGroup(ctx, tx, gid, now)
		if err != nil {
			return err
		}
		current, err := members(ctx, tx, gid)
		if err != nil {
			return err
		}
		var before taskd.DynamicGroup
		if dynamic {
			var sel, ver sql.NullString
			if err := tx.QueryRowContext(ctx, "SELECT selector, agent_version FROM member_group WHERE gid = ?", gid).Scan(&sel, &ver); err != nil {
				return err
			}
			before = taskd.DynamicGroup{Selector: sel.String, AgentVersion: ver.String}
		} else {
			if len(current) > 0 {
				return taskd.Errorf(taskd.CodeConflict, "group %s has %d members kept by hand: remove them before giving it a rule", gid, len(current))
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM member_group WHERE dynamic").Scan(&n); err != nil {
				return err
			}
			if n >= taskd.MaxDynamicGroups {
				return taskd.Errorf(taskd.CodeConflict, "at most %d dynamic groups", taskd.MaxDynamicGroups)
			}
		}
		if _, err := tx.ExecContext(ctx, "UPDATE member_group SET dynamic = 1, selector = ?, agent_version = ? WHERE gid = ?",
			nullString(rule.Selector), nullString(rule.AgentVersion), gid); err != nil {
			return err
		}
		matched, err := matchingClients(ctx, tx, matches)
		if err != nil {
			return err
		}
		var gone, fresh []string
		changed, gone, fresh = diffMembers(current, matched)
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, gone, true, now); err != nil {
			return err
		}
		if err := writeMembers(ctx, tx, gid, fresh, false, now); err != nil {
			return err
		}
		g.Members = len(matched)
		if err := noteHeapChanges(ctx, tx, now, userTargets(changed)...); err != nil {
			return err
		}
		var old any
		if dynamic {
			old = before
		}
		return audit(ctx, tx, actor, "group.set_rule", "group:"+gid, old, rule, now)
	})
	return g, changed, mysqlErr("set group rule", err)
}

// matchingClients are the uids whose stored report matches accepts, sorted.
func matchingClients(ctx context.Context, tx *sql.Tx, matches func(taskd.AgentInfo) bool) ([]string, error) {
	rows, err := tx.QueryContext(ctx, "SELECT uid, last_seen, version, hostname, labels FROM client_agent WHERE version IS NOT NULL ORDER BY uid")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var uid string
		var seen sql.NullTime
		var version, host, labels sql.NullString
		if err := rows.Scan(&uid, &seen, &version, &host, &labels); err != nil {
			return nil, err
		}
		_, a, err := agentOf(seen, version, host, labels)
		if err != nil {
			return nil, err
		}
		if a != nil && matches(*a) {
			out = append(out, uid)
		}
	}
	return out, rows.Err()
}

// diffMembers compares a group's members with the uids it should have: every uid whose
// membership changes (sorted), those to remove and those to add.
func diffMembers(current, want []string) (changed, gone, fresh []string) {
	wanted := make(map[string]bool, len(want))
	for _, u := range want {
		wanted[strings.ToLower(u)] = true
	}
	have := make(map[string]bool, len(current))
	for _, u := range current {
		have[strings.ToLower(u)] = true
		if !wanted[strings.ToLower(u)] {
			gone = append(gone, u)
		}
	}
	for _, u := range want {
		if !have[strings.ToLower(u)] {
			fresh = append(fresh, u)
		}
	}
	return sortedSet(append(slices.Clone(gone), fresh...)), gone, fresh
}

// Group reads gid: its rule when it is dynamic, and its member count. A gid that never
// had members nor a rule is not_found.
func (s *Store) Group(ctx context.Context, gid string) (taskd.Group, error) {
	g := taskd.Group{GID: gid}
	var sel, ver sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT g.gid, g.dynamic, g.selector, g.agent_version,
		(SELECT COUNT(*) FROM group_member m WHERE m.gid = g.gid) FROM member_group g WHERE g.gid = ?`, gid).
		Scan(&g.GID, &g.Dynamic, &sel, &ver, &g.Members)
	if errors.Is(err, sql.ErrNoRows) {
		return g, taskd.Errorf(taskd.CodeNotFound, "group %s not found", gid)
	}
	g.Selector, g.AgentVersion = sel.String, ver.String
	return g, mysqlErr("group", err)
}

// DeleteGroup removes gid's members and its rule, and returns the uids removed, sorted.
// A group that active or paused tasks target is a conflict: they would go to nobody.
func (s *Store) DeleteGroup(ctx context.Context, actor, gid string, now time.Time) ([]string, error) {
	var removed []string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockRules(ctx, tx, true); err != nil {
			return err
		}
		var dynamic bool
		err := tx.QueryRowContext(ctx, "SELECT dynamic FROM member_group WHERE gid = ? FOR UPDATE", gid).Scan(&dynamic)
		if errors.Is(err, sql.ErrNoRows) {
			return taskd.Errorf(taskd.CodeNotFound, "group %s not found", gid)
		}
		if err != nil {
			return err
		}
		var tasks int
		if err := tx.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM task_once WHERE executor = ? AND status IN (1, 2)) +
			(SELECT COUNT(*) FROM task_rotate WHERE executor = ? AND status IN (1, 2))`,
			taskd.GroupExecutor(gid), taskd.GroupExecutor(gid)).Scan(&tasks); err != nil {
			return err
		}
		if tasks > 0 {
			return taskd.Errorf(taskd.CodeConflict, "%d active or paused task(s) target group %s: delete them or give them another executor first", tasks, gid)
		}
		if removed, err = members(ctx, tx, gid); err != nil {
			return err
		}
		s.between(ctx, "group_member.write")
		if err := writeMembers(ctx, tx, gid, removed, true, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM member_group WHERE gid = ?", gid); err != nil {
			return err
		}
		if err := noteHeapChanges(ctx, tx, now, userTargets(removed)...); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "group.delete", "group:"+gid, map[string]any{"uids": removed, "dynamic": dynamic}, nil, now)
	})
	return sortedSet(removed), mysqlErr("delete group", err)
}

// SyncAgentGroups makes a the stored report of uid and uid a member of exactly the
// dynamic groups whose rule it matches (matches says). A report equal to the stored
// one changes nothing and costs one read; another is written in a transaction that
// holds the rules' lock in share mode. It reports whether a membership changed; the
// change is noted in the heap-change feed in the same transaction.
func (s *Store) SyncAgentGroups(ctx context.Context, uid string, a taskd.AgentInfo,
	matches func(taskd.DynamicGroup, taskd.AgentInfo) bool, now time.Time) (bool, error) {
	var seen sql.NullTime
	var version, host, labels sql.NullString
	err := s.db.QueryRowContext(ctx, "SELECT last_seen, version, hostname, labels FROM client_agent WHERE uid = ?", uid).
		Scan(&seen, &version, &host, &labels)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, mysqlErr("sync agent groups", err)
	}
	if _, stored, err := agentOf(seen, version, host, labels); err == nil && stored != nil && stored.Equal(a) {
		return false, nil
	}
	var changed bool
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if err := lockRules(ctx, tx, false); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT gid, selector, agent_version FROM member_group WHERE dynamic ORDER BY gid")
		if err != nil {
			return err
		}
		// By the group's gid in lower case (ids compare without case, as the columns do;
		// a member row may spell its gid otherwise), with the gid as the group has it.
		want, names := map[string]bool{}, map[string]string{}
		for rows.Next() {
			var gid string
			var sel, ver sql.NullString
			if err := rows.Scan(&gid, &sel, &ver); err != nil {
				rows.Close()
				return err
			}
			want[strings.ToLower(gid)], names[strings.ToLower(gid)] = matches(taskd.DynamicGroup{Selector: sel.String, AgentVersion: ver.String}, a), gid
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO client_agent (uid, last_seen, version, hostname, labels) VALUES (?, ?, ?, ?, ?)
			ON DUPLICATE KEY UPDATE version = VALUES(version), hostname = VALUES(hostname), labels = VALUES(labels),
			last_seen = GREATEST(last_seen, VALUES(last_seen))`, uid, now, a.Version, a.Hostname, a.LabelsJSON()); err != nil {
			return err
		}
		if len(want) == 0 {
			return nil
		}
		rows, err = tx.QueryContext(ctx, `SELECT g.gid FROM group_member m JOIN member_group g ON g.gid = m.gid AND g.dynamic
			WHERE m.uid = ?`, uid)
		if err != nil {
			return err
		}
		have := map[string]bool{}
		for rows.Next() {
			var gid string
			if err := rows.Scan(&gid); err != nil {
				rows.Close()
				return err
			}
			have[strings.ToLower(gid)] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, gid := range slices.Sorted(maps.Keys(want)) {
			if want[gid] == have[gid] {
				continue
			}
			if err := writeMembers(ctx, tx, names[gid], []string{uid}, !want[gid], now); err != nil {
				return err
			}
			changed = true
		}
		if !changed {
			return nil
		}
		return noteHeapChanges(ctx, tx, now, taskd.UserExecutor(uid))
	})
	return changed, mysqlErr("sync agent groups", err)
}
