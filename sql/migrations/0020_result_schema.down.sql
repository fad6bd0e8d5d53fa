ALTER TABLE dispatch DROP COLUMN reason, DROP COLUMN judged;
ALTER TABLE task_params_template DROP COLUMN result_schema;
