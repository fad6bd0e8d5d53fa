-- Maintenance windows: a task is claimed only while one is open. A task's own windows
-- (JSON, NULL: its template's), and a template's, the default of its tasks.
ALTER TABLE task_once ADD COLUMN windows TEXT NULL COMMENT 'JSON [{cron, minutes, time_zone}]; NULL: the template''s';
ALTER TABLE task_rotate ADD COLUMN windows TEXT NULL COMMENT 'JSON [{cron, minutes, time_zone}]; NULL: the template''s';
ALTER TABLE task_params_template ADD COLUMN windows TEXT NULL COMMENT 'JSON [{cron, minutes, time_zone}]; NULL: none';
