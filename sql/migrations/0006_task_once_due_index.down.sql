ALTER TABLE task_once DROP KEY idx_status_start;
