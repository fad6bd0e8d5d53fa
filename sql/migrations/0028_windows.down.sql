-- Tasks with windows are claimed at any time again.
ALTER TABLE task_params_template DROP COLUMN windows;
ALTER TABLE task_rotate DROP COLUMN windows;
ALTER TABLE task_once DROP COLUMN windows;
