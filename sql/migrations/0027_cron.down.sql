-- Cron tasks cannot be expressed as periods: they are deleted with the columns.
UPDATE task_rotate SET status = 3 WHERE cron IS NOT NULL;
ALTER TABLE task_rotate DROP COLUMN time_zone, DROP COLUMN cron;
