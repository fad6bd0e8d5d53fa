-- Lossy by necessity: outbox events with derived ids are dropped (they do not fit a
-- UUID column), parked and expired-waiting records stop waiting, and dead or cancelled
-- records stay as they are (the old code reads them as finished).
DELETE FROM event_outbox WHERE CHAR_LENGTH(event_id) > 36;
ALTER TABLE event_outbox MODIFY event_id CHAR(36) NOT NULL;
UPDATE dispatch d LEFT JOIN dispatch o ON o.open_uid = d.waiting_uid
  SET d.open_uid = d.waiting_uid WHERE d.state = 2 AND o.log_id IS NULL;
ALTER TABLE dispatch MODIFY state TINYINT NOT NULL COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried';
ALTER TABLE dispatch
  DROP KEY idx_occurrence_uid,
  ADD KEY idx_occurrence (task_kind, task_id, due_at),
  DROP KEY idx_waiting,
  DROP COLUMN waiting_uid;
