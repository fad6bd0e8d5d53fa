package store

import (
	"context"
	"database/sql"
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
// key, which takes a record lock and no gap lock, found or not.
func lockGroup(ctx context.Context, tx *sql.Tx, gid string, now time.Time) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO member_group (gid, created_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE gid = gid", gid, now)
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
		if err := lockGroup(ctx, tx, gid, now); err != nil {
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
		if err := lockGroup(ctx, tx, gid, now); err != nil {
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
		if err := lockGroup(ctx, tx, gid, now); err != nil {
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
