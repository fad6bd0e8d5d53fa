package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// Artifacts: the records of software artifacts, whose bytes live in a blob backend
// (package artifact writes them there before it writes the record here).

const selectArtifact = `SELECT id, filename, size, sha1, md5, sha256, backend, object_key, created_at FROM artifact`

func scanArtifact(row rowScanner) (taskd.Artifact, error) {
	var a taskd.Artifact
	err := row.Scan(&a.ID, &a.Filename, &a.Size, &a.Hashes.SHA1, &a.Hashes.MD5, &a.Hashes.SHA256, &a.Backend, &a.Key, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}

// CreateArtifact records a, whose bytes are in its backend already, audited
// (artifact.create); it returns a with its id.
func (s *Store) CreateArtifact(ctx context.Context, actor string, a taskd.Artifact) (taskd.Artifact, error) {
	err := s.inTxOnce(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO artifact (filename, size, sha1, md5, sha256, backend, object_key, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, a.Filename, a.Size, a.Hashes.SHA1, a.Hashes.MD5, a.Hashes.SHA256, a.Backend, a.Key, a.CreatedAt)
		if err != nil {
			return err
		}
		if a.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "artifact.create", taskd.ArtifactTarget(a.ID), nil, a, a.CreatedAt)
	})
	return a, mysqlErr("create artifact", err)
}

// GetArtifact returns artifact id.
func (s *Store) GetArtifact(ctx context.Context, id int64) (taskd.Artifact, error) {
	a, err := scanArtifact(s.db.QueryRowContext(ctx, selectArtifact+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, artifactNotFound(id)
	}
	return a, mysqlErr("get artifact", err)
}

func artifactNotFound(id int64) error {
	return taskd.Errorf(taskd.CodeNotFound, "artifact %d not found", id)
}

// ListArtifacts returns up to limit artifacts, newest first, with ids below before (0:
// from the newest).
func (s *Store) ListArtifacts(ctx context.Context, before int64, limit int) ([]taskd.Artifact, error) {
	q, args := selectArtifact, []any{}
	if before > 0 {
		q += " WHERE id < ?"
		args = append(args, before)
	}
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY id DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, mysqlErr("list artifacts", err)
	}
	defer rows.Close()
	out := []taskd.Artifact{}
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, mysqlErr("list artifacts", err)
		}
		out = append(out, a)
	}
	return out, mysqlErr("list artifacts", rows.Err())
}

// maxUsersNamed bounds the tasks an artifact-in-use conflict names.
const maxUsersNamed = 20

// DeleteArtifact deletes artifact id's record, audited (artifact.delete), and returns
// it (the caller deletes the bytes). An artifact that a task not deleted names in its
// params (a DDI task's {"chunks": [{"artifacts": [{"artifact_id": id}]}]}) is not
// deleted: a conflict naming the tasks.
func (s *Store) DeleteArtifact(ctx context.Context, actor string, id int64, now time.Time) (taskd.Artifact, error) {
	var a taskd.Artifact
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		a, err = scanArtifact(tx.QueryRowContext(ctx, selectArtifact+" WHERE id = ? FOR UPDATE", id))
		if errors.Is(err, sql.ErrNoRows) {
			return artifactNotFound(id)
		}
		if err != nil {
			return err
		}
		users, err := artifactUsers(ctx, tx, id)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			named := strings.Join(users, ", ")
			if len(users) == maxUsersNamed {
				named += " and maybe more"
			}
			return &taskd.Error{Code: taskd.CodeConflict, Details: map[string]any{"tasks": users},
				Message: "artifact " + strconv.FormatInt(id, 10) + " is in use by task(s) " + named +
					"; delete them, or edit their params, first"}
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM artifact WHERE id = ?", id); err != nil {
			return err
		}
		return audit(ctx, tx, actor, "artifact.delete", taskd.ArtifactTarget(id), a, nil, now)
	})
	return a, mysqlErr("delete artifact", err)
}

// artifactUsers lists the tasks, once and rotate, not deleted, whose params name
// artifact id in a chunk's artifacts (as a number, or as a string of one), at most
// maxUsersNamed of them. JSON_EXTRACT with wildcards and JSON_CONTAINS are MySQL 8's and
// MariaDB 10.11's alike; the LIKE passes over the tasks that name no artifact before
// any JSON is parsed, and CASE keeps a value that is not JSON (none should be) from
// failing the statement on MySQL.
func artifactUsers(ctx context.Context, tx *sql.Tx, id int64) ([]string, error) {
	n := strconv.FormatInt(id, 10)
	var users []string
	for _, k := range []taskd.Kind{taskd.KindOnce, taskd.KindRotate} {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM `+taskTable(k)+`
			WHERE status <> ? AND params LIKE ? AND CASE WHEN JSON_VALID(params) THEN
				JSON_CONTAINS(JSON_EXTRACT(params, '$.chunks[*].artifacts[*].artifact_id'), ?) OR
				JSON_CONTAINS(JSON_EXTRACT(params, '$.chunks[*].artifacts[*].artifact_id'), ?) ELSE 0 END
			ORDER BY id LIMIT ?`,
			taskd.StatusDeleted, `%"artifact\_id"%`, n, `"`+n+`"`, maxUsersNamed-len(users))
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var tid int64
			if err := rows.Scan(&tid); err != nil {
				rows.Close()
				return nil, err
			}
			users = append(users, taskd.TaskKey{Kind: k, ID: tid}.String())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(users) >= maxUsersNamed {
			break
		}
	}
	return users, nil
}
