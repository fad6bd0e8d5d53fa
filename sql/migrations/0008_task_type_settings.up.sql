-- Task-type settings (seed 004): a template gives its tasks defaults, a task may set
-- its own (NULL: inherit the template's, else the server's default), and stages for
-- multi-stage tasks.
ALTER TABLE task_params_template
  ADD COLUMN lease_seconds INT NULL,
  ADD COLUMN max_attempts INT NULL,
  ADD COLUMN retry_backoff_seconds INT NULL,
  ADD COLUMN retry_multiplier DOUBLE NULL,
  ADD COLUMN retry_max_seconds INT NULL,
  ADD COLUMN dispatch_rate_per_minute INT NULL,
  ADD COLUMN stages TEXT NULL COMMENT 'JSON list of stage names';

ALTER TABLE task_once
  MODIFY lease_seconds INT NULL DEFAULT NULL,
  MODIFY max_attempts INT NULL DEFAULT NULL,
  MODIFY retry_backoff_seconds INT NULL DEFAULT NULL,
  ADD COLUMN retry_multiplier DOUBLE NULL AFTER retry_backoff_seconds,
  ADD COLUMN retry_max_seconds INT NULL AFTER retry_multiplier,
  ADD COLUMN dispatch_rate_per_minute INT NULL AFTER retry_max_seconds;
ALTER TABLE task_rotate
  MODIFY lease_seconds INT NULL DEFAULT NULL,
  MODIFY max_attempts INT NULL DEFAULT NULL,
  MODIFY retry_backoff_seconds INT NULL DEFAULT NULL,
  ADD COLUMN retry_multiplier DOUBLE NULL AFTER retry_backoff_seconds,
  ADD COLUMN retry_max_seconds INT NULL AFTER retry_multiplier,
  ADD COLUMN dispatch_rate_per_minute INT NULL AFTER retry_max_seconds;

-- Values the server's defaults give anyway become inherited (the same effective value
-- while the template sets none): the API stored the defaults, it did not know whether
-- the admin wrote them. max_attempts first: its default depends on the lease.
UPDATE task_once SET max_attempts = NULL WHERE max_attempts = IF(lease_seconds > 0, 3, 1);
UPDATE task_once SET lease_seconds = NULL WHERE lease_seconds = 0;
UPDATE task_once SET retry_backoff_seconds = NULL WHERE retry_backoff_seconds = 0;
UPDATE task_rotate SET max_attempts = NULL WHERE max_attempts = IF(lease_seconds > 0, 3, 1);
UPDATE task_rotate SET lease_seconds = NULL WHERE lease_seconds = 0;
UPDATE task_rotate SET retry_backoff_seconds = NULL WHERE retry_backoff_seconds = 0;

-- A dispatch keeps the backoff's shape it was made with.
ALTER TABLE dispatch
  ADD COLUMN retry_multiplier DOUBLE NOT NULL DEFAULT 2 AFTER retry_backoff_seconds,
  ADD COLUMN retry_max_seconds INT NOT NULL DEFAULT 86400 AFTER retry_multiplier;
