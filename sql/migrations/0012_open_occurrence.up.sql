-- A user holds an occurrence open at most once, whatever its slots: with several open
-- slots (batch fetch), two claims of one until_exhausted occurrence for one user (it
-- has no once_per_user hold row) could otherwise both see it not open and both insert.
-- open_uid is NULL on every record that is not open, so the key binds open ones only.
ALTER TABLE dispatch ADD UNIQUE KEY uq_open_occurrence (open_uid, task_kind, task_id, due_at);
