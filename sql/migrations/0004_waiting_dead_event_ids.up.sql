-- A dispatch waiting to come back to its user without blocking the user's other tasks:
-- a failed attempt waiting out its retry backoff, or an open dispatch of a paused task.
-- The user's heap is built with these (waiting_uid = uid), so no poll asks MySQL.
ALTER TABLE dispatch
  ADD COLUMN waiting_uid VARCHAR(64) NULL AFTER open_uid,
  ADD KEY idx_waiting (waiting_uid),
  -- The claim reads what this user already did with an occurrence (attempts used, a
  -- dead or retry-waiting dispatch): the occurrence index gains uid, and still serves
  -- lookups by occurrence alone.
  DROP KEY idx_occurrence,
  ADD KEY idx_occurrence_uid (task_kind, task_id, due_at, uid);

-- States 6 (dead: attempts used up, slot kept) and 7 (cancelled: its task was deleted).
ALTER TABLE dispatch MODIFY state TINYINT NOT NULL
  COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried, 6 dead, 7 cancelled';

-- Retry-waiting dispatches no longer hold the user's one open slot.
UPDATE dispatch SET waiting_uid = open_uid, open_uid = NULL WHERE state = 2;

-- Event ids are derived from the log id and the event type (the same id in the admin
-- API, the outbox, Kafka and Elasticsearch): longer than a UUID.
ALTER TABLE event_outbox MODIFY event_id VARCHAR(80) NOT NULL;
