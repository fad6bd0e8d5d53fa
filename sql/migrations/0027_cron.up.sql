-- Rotate tasks on a wall-clock schedule: a cron expression read in an IANA time zone,
-- instead of a period (space_minutes is 0 then).
ALTER TABLE task_rotate
  ADD COLUMN cron      VARCHAR(128) NULL COMMENT 'a five-field cron expression; NULL: every space_minutes',
  ADD COLUMN time_zone VARCHAR(64)  NULL COMMENT 'the IANA zone the cron is read in; NULL: UTC';
