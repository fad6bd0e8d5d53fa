-- hawkBit DDI: a template marked ddi holds software deployments, offered to DDI
-- controllers only (and its tasks to no fetch agent). A dispatch of one is an action:
-- a number that fits a signed 32-bit integer (SWUpdate reads it with
-- json_object_get_int and writes it back with %d), given once for the server's life by
-- AUTO_INCREMENT. closed_at is when the device closed it (its final feedback, or its
-- acknowledgement of a cancel) or the server found its dispatch ended otherwise; an
-- action open on the controller is one without it.
ALTER TABLE task_params_template ADD COLUMN ddi TINYINT NOT NULL DEFAULT 0;

CREATE TABLE ddi_action (
  action_id   INT         NOT NULL AUTO_INCREMENT,
  log_id      CHAR(36)    NOT NULL,
  uid         VARCHAR(64) NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  closed_at   DATETIME(6) NULL,
  PRIMARY KEY (action_id),
  UNIQUE KEY uk_log_id (log_id),
  KEY idx_uid_closed (uid, closed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
