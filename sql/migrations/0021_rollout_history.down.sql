ALTER TABLE task_rollout DROP COLUMN history;
