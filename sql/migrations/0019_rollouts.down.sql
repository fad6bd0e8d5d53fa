ALTER TABLE dispatch DROP COLUMN rollout_phase;
DROP TABLE rollout_member;
DROP TABLE task_rollout;
ALTER TABLE task_rotate DROP COLUMN rollout;
ALTER TABLE task_once DROP COLUMN rollout;
