ALTER TABLE client_setting DROP COLUMN version;
ALTER TABLE task_params_template DROP COLUMN version;
ALTER TABLE task_rotate DROP COLUMN version;
ALTER TABLE task_once DROP COLUMN version;
