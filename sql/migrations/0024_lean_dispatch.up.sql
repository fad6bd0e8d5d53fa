-- A dispatch record keeps only the keys its own path needs and two that serve every
-- report: each dispatch and complete wrote fourteen index entries, nine of them for
-- the admin lists, events and stats alone.
--
-- What the dropped keys served, and what serves it now:
-- - by dispatch time (idx_time, idx_task_time, idx_state_time): the primary key. A log
--   id is a UUIDv7 carrying its record's dispatch time to the microsecond, so the
--   key's order is the dispatch order, and a time range is a range of ids.
-- - by user (idx_uid_time): idx_uid, that is (uid, log_id), in the same order.
-- - by the time of a later event (idx_finished, idx_redo, idx_retried, idx_cancelled):
--   idx_changed, on the latest of those times. A record with an event at t changed at
--   t or later, so the events of [from, to) are among the records changed since from.
ALTER TABLE dispatch
  ADD COLUMN changed_at DATETIME(6) AS (NULLIF(GREATEST(
      COALESCE(finished_at, '1000-01-01'), COALESCE(last_redo_at, '1000-01-01'),
      COALESCE(retried_at, '1000-01-01'), COALESCE(cancelled_at, '1000-01-01')), '1000-01-01')) STORED
    COMMENT 'the latest finish, redo, retry or cancel; NULL: none yet',
  ADD KEY idx_uid (uid),
  ADD KEY idx_changed (changed_at),
  DROP KEY idx_uid_time,
  DROP KEY idx_time,
  DROP KEY idx_task_time,
  DROP KEY idx_state_time,
  DROP KEY idx_finished,
  DROP KEY idx_redo,
  DROP KEY idx_retried,
  DROP KEY idx_cancelled;
