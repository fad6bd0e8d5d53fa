-- The admin overview counts the once tasks due around now: by status and start time,
-- not a scan of every task. Only admin edits write task_once, so the index costs little.
ALTER TABLE task_once ADD KEY idx_status_start (status, start_time);
