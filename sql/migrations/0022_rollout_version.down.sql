ALTER TABLE task_rollout DROP COLUMN version;
