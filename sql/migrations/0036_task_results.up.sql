-- A task's results (GET /v1/admin/tasks/{kind}/{id}/results, issue 39): its finished
-- dispatch records in the order they became visible, paged by a number. No column
-- orders "finished" as readers see it: finished_at is its writer's clock, taken before
-- the commit, and completes on two nodes commit out of its order, so a reader paging
-- by it would skip a record that committed late. So each finished record gets a
-- number, result_seq, after its commit, from the readers of the task's results: under
-- the lock of the task's counter row (result_sequence), a reader numbers the finished
-- records that have none (finished_at order), from the counter on, and commits. The
-- numberings of a task run one at a time, so every record numbered up to n was visible
-- before any numbered above n: a reader who has seen up to n misses nothing and sees
-- nothing twice by asking for the numbers above n, whatever order the completes
-- committed in.
--
-- What it costs: idx_results has an entry per record, and it moves when a record
-- finishes (finished_at is set) or is numbered; a complete does nothing else for it,
-- and a task nobody reads the results of is never numbered. finished_at in the key
-- lets a reader find the finished records still without a number among its task's
-- open ones without reading them.
ALTER TABLE dispatch
  ADD COLUMN result_seq BIGINT NULL COMMENT 'its number among its task''s results; NULL: not numbered (yet)',
  ADD KEY idx_results (task_kind, task_id, result_seq, finished_at);

CREATE TABLE result_sequence (
  task_kind TINYINT NOT NULL,
  task_id   BIGINT  NOT NULL,
  seq       BIGINT  NOT NULL COMMENT 'the last number given to a record of the task',
  PRIMARY KEY (task_kind, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
