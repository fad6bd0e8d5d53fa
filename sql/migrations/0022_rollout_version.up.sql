-- A rollout's version (issue 42): counts its moves, the server's and the admins', so
-- that an admin's move made against a rollout that has moved since (If-Match) is
-- refused. Its ETag is the task's version and this one.
ALTER TABLE task_rollout ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
