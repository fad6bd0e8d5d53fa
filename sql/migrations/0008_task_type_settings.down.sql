-- Back to stored values: what each task inherited becomes its own (the template's
-- defaults are dropped), what nothing set becomes the default.
UPDATE task_once t LEFT JOIN task_params_template p ON p.id = t.template_id SET
  t.lease_seconds = COALESCE(t.lease_seconds, p.lease_seconds, 0),
  t.max_attempts = COALESCE(t.max_attempts, p.max_attempts, IF(COALESCE(t.lease_seconds, p.lease_seconds, 0) > 0, 3, 1)),
  t.retry_backoff_seconds = COALESCE(t.retry_backoff_seconds, p.retry_backoff_seconds, 0);
UPDATE task_rotate t LEFT JOIN task_params_template p ON p.id = t.template_id SET
  t.lease_seconds = COALESCE(t.lease_seconds, p.lease_seconds, 0),
  t.max_attempts = COALESCE(t.max_attempts, p.max_attempts, IF(COALESCE(t.lease_seconds, p.lease_seconds, 0) > 0, 3, 1)),
  t.retry_backoff_seconds = COALESCE(t.retry_backoff_seconds, p.retry_backoff_seconds, 0);
ALTER TABLE dispatch DROP COLUMN retry_multiplier, DROP COLUMN retry_max_seconds;
ALTER TABLE task_once
  MODIFY lease_seconds INT NOT NULL DEFAULT 0,
  MODIFY max_attempts INT NOT NULL DEFAULT 1,
  MODIFY retry_backoff_seconds INT NOT NULL DEFAULT 0,
  DROP COLUMN retry_multiplier, DROP COLUMN retry_max_seconds, DROP COLUMN dispatch_rate_per_minute;
ALTER TABLE task_rotate
  MODIFY lease_seconds INT NOT NULL DEFAULT 0,
  MODIFY max_attempts INT NOT NULL DEFAULT 1,
  MODIFY retry_backoff_seconds INT NOT NULL DEFAULT 0,
  DROP COLUMN retry_multiplier, DROP COLUMN retry_max_seconds, DROP COLUMN dispatch_rate_per_minute;
ALTER TABLE task_params_template
  DROP COLUMN lease_seconds, DROP COLUMN max_attempts, DROP COLUMN retry_backoff_seconds,
  DROP COLUMN retry_multiplier, DROP COLUMN retry_max_seconds, DROP COLUMN dispatch_rate_per_minute,
  DROP COLUMN stages;
