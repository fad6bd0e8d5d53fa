-- A dead record an admin retried and whose next attempt has not started stops waiting.
UPDATE dispatch SET waiting_uid = NULL WHERE state = 6 AND waiting_uid IS NOT NULL;
ALTER TABLE dispatch
  DROP KEY idx_task_time,
  DROP KEY idx_state_time,
  DROP KEY idx_retried,
  DROP KEY idx_cancelled,
  DROP COLUMN retried_at,
  DROP COLUMN cancelled_at,
  DROP COLUMN resumed;
