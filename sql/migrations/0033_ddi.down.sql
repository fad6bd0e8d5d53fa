DROP TABLE ddi_action;
ALTER TABLE task_params_template DROP COLUMN ddi;
