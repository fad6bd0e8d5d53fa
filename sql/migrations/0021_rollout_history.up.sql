-- A rollout's past phases (issue 30): each phase's end, the move that ended it and the
-- figures it was decided on, as a JSON array, for the console and the load tester's
-- check.
ALTER TABLE task_rollout ADD COLUMN history TEXT NULL;
