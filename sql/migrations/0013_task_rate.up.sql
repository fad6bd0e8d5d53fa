-- dispatch_rate_per_minute (a task's own or its template's): how many of the task's
-- occurrences were claimed in the current minute. One row per rate-bound task, rewritten
-- when a new minute starts (a fixed window): read FOR UPDATE and written by the claim
-- transaction, so the bound is exact across server instances.
CREATE TABLE task_rate (
  task_kind  TINYINT  NOT NULL,
  task_id    BIGINT   NOT NULL,
  window_at  DATETIME NOT NULL,
  dispatched INT      NOT NULL,
  PRIMARY KEY (task_kind, task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
