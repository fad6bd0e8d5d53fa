-- A template's result schema (issue 30): a success whose detail does not validate
-- counts as a failure. A dispatch claimed while its template had one is judged at its
-- complete (judged), and a refused result keeps why (reason).
ALTER TABLE task_params_template ADD COLUMN result_schema LONGTEXT NULL;
ALTER TABLE dispatch ADD COLUMN judged BOOLEAN NOT NULL DEFAULT FALSE, ADD COLUMN reason VARCHAR(512) NULL;
