-- Audit log of admin changes: who (token name), what, before and after, when.
CREATE TABLE audit_log (
  id          BIGINT       NOT NULL AUTO_INCREMENT,
  at          DATETIME(6)  NOT NULL,
  actor       VARCHAR(128) NOT NULL,
  action      VARCHAR(64)  NOT NULL,
  target      VARCHAR(200) NOT NULL,
  before_json LONGTEXT     NULL,
  after_json  LONGTEXT     NULL,
  PRIMARY KEY (id),
  KEY idx_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Events and stats read completions, expiries and redos by time.
ALTER TABLE dispatch ADD KEY idx_finished (finished_at), ADD KEY idx_redo (last_redo_at);
