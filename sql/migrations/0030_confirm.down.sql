ALTER TABLE dispatch DROP COLUMN confirm_by, DROP COLUMN confirm_seconds;
ALTER TABLE task_rotate DROP COLUMN confirm_seconds;
ALTER TABLE task_once DROP COLUMN confirm_seconds;
ALTER TABLE task_params_template DROP COLUMN confirm_seconds;
