ALTER TABLE dispatch
  ADD KEY idx_uid_time (uid, dispatched_at),
  ADD KEY idx_time (dispatched_at),
  ADD KEY idx_task_time (task_kind, task_id, dispatched_at),
  ADD KEY idx_state_time (state, dispatched_at),
  ADD KEY idx_finished (finished_at),
  ADD KEY idx_redo (last_redo_at),
  ADD KEY idx_retried (retried_at),
  ADD KEY idx_cancelled (cancelled_at),
  DROP KEY idx_uid,
  DROP KEY idx_changed,
  DROP COLUMN changed_at;
