-- Every write an admin makes to a task, template or client setting counts up its
-- version; the API shows it as the ETag that If-Match names, so that two admins
-- editing one record never silently lose an edit.
ALTER TABLE task_once ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE task_rotate ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE task_params_template ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
ALTER TABLE client_setting ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
