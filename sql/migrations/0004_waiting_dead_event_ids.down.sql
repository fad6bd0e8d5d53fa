ALTER TABLE event_outbox MODIFY event_id CHAR(36) NOT NULL;
UPDATE dispatch SET open_uid = waiting_uid, waiting_uid = NULL WHERE state = 2;
ALTER TABLE dispatch MODIFY state TINYINT NOT NULL COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried';
ALTER TABLE dispatch
  DROP KEY idx_occurrence_uid,
  ADD KEY idx_occurrence (task_kind, task_id, due_at),
  DROP KEY idx_waiting,
  DROP COLUMN waiting_uid;
