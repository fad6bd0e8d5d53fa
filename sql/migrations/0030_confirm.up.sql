-- Confirmed success (issue 44): a task or template may set confirm_seconds (NULL: not
-- set, inherited), and a success of a dispatch claimed with it counts only once its
-- user fetches again by confirm_by. The dispatch keeps the value it was claimed with
-- (confirm_seconds, 0: none) and, while unconfirmed (state 9), its deadline. The sweep
-- finds the lapsed ones through idx_lease's leading state column: unconfirmed records
-- are few (each only until its user's next fetch), so no key of their own is needed.
ALTER TABLE task_params_template ADD COLUMN confirm_seconds INT NULL;
ALTER TABLE task_once ADD COLUMN confirm_seconds INT NULL;
ALTER TABLE task_rotate ADD COLUMN confirm_seconds INT NULL;
ALTER TABLE dispatch
  ADD COLUMN confirm_seconds INT NOT NULL DEFAULT 0,
  ADD COLUMN confirm_by DATETIME(6) NULL COMMENT 'an unconfirmed success''s deadline';
