-- The dispatch lists (GET /v1/dispatches, GET /v1/admin/dispatches) page newest first by
-- (dispatched_at, log_id). A user's records are read through idx_uid_time and the
-- unfiltered list through idx_time (both end in dispatched_at, and InnoDB appends the
-- primary key, log_id, to every secondary key); a task's records and the records in one
-- state need keys of their own, or a list of a busy task or of the few dead records
-- would sort or scan the whole table. Two keys, each written once per dispatch (the
-- state key again when its state changes).
--
-- An admin's interventions leave their own marks on the record, so that its history
-- stays as it was and the events API derives their events as it does the others (each
-- time indexed for the events API's ranges; NULL on almost every record):
-- retried_at: an admin sent this dead record's occurrence back to its user (the record
--   stays dead; the next attempt, numbered afresh, is a new record);
-- cancelled_at: the record was ended for good (a task deleted, or an admin's cancel);
--   records cancelled before this migration take their finish time;
-- resumed: the record was made from a waiting one (a retry, a next stage, an admin's
--   retry) rather than claimed from the user's heap.
ALTER TABLE dispatch
  ADD COLUMN retried_at   DATETIME(6) NULL,
  ADD COLUMN cancelled_at DATETIME(6) NULL,
  ADD COLUMN resumed      TINYINT     NOT NULL DEFAULT 0,
  ADD KEY idx_task_time (task_kind, task_id, dispatched_at),
  ADD KEY idx_state_time (state, dispatched_at),
  ADD KEY idx_retried (retried_at),
  ADD KEY idx_cancelled (cancelled_at);

UPDATE dispatch SET cancelled_at = finished_at WHERE state = 7;
