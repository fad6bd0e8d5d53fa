-- Parameter templates: a named JSON Schema that task params must satisfy.
CREATE TABLE task_params_template (
  id          BIGINT      NOT NULL AUTO_INCREMENT,
  name        VARCHAR(128) NOT NULL,
  schema_json LONGTEXT    NOT NULL,
  status      TINYINT     NOT NULL DEFAULT 1 COMMENT '1 active, 3 deleted',
  created_at  DATETIME(6) NOT NULL,
  updated_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One-time tasks. The fetch query is executor IN (...) AND start_time in a range, so
-- executor (an equality) leads the index and start_time (a range) follows, as seed 001
-- explains.
CREATE TABLE task_once (
  id             BIGINT       NOT NULL AUTO_INCREMENT,
  executor       VARCHAR(80)  NOT NULL,
  start_time     DATETIME     NOT NULL,
  template_id    BIGINT       NOT NULL,
  params         LONGTEXT     NOT NULL,
  dispatch_times INT          NOT NULL DEFAULT 1 COMMENT '-1 unlimited',
  mode           TINYINT      NOT NULL DEFAULT 1 COMMENT '1 once_per_user, 2 until_exhausted',
  priority       TINYINT      NOT NULL DEFAULT 5,
  status         TINYINT      NOT NULL DEFAULT 1 COMMENT '1 active, 2 paused, 3 deleted',
  lease_seconds  INT          NOT NULL DEFAULT 0 COMMENT '0 never expires',
  max_attempts   INT          NOT NULL DEFAULT 1,
  retry_backoff_seconds INT   NOT NULL DEFAULT 0,
  created_at     DATETIME(6)  NOT NULL,
  updated_at     DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  KEY idx_executor_start (executor, start_time),
  KEY idx_template (template_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Rotating tasks: occurrences at start_time + k * space_minutes, until end_time.
CREATE TABLE task_rotate (
  id             BIGINT       NOT NULL AUTO_INCREMENT,
  executor       VARCHAR(80)  NOT NULL,
  start_time     DATETIME     NOT NULL,
  space_minutes  INT          NOT NULL,
  end_time       DATETIME     NULL,
  template_id    BIGINT       NOT NULL,
  params         LONGTEXT     NOT NULL,
  dispatch_times INT          NOT NULL DEFAULT 1,
  mode           TINYINT      NOT NULL DEFAULT 1,
  priority       TINYINT      NOT NULL DEFAULT 5,
  status         TINYINT      NOT NULL DEFAULT 1,
  lease_seconds  INT          NOT NULL DEFAULT 0,
  max_attempts   INT          NOT NULL DEFAULT 1,
  retry_backoff_seconds INT   NOT NULL DEFAULT 0,
  created_at     DATETIME(6)  NOT NULL,
  updated_at     DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  KEY idx_executor_start (executor, start_time),
  KEY idx_template (template_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Group membership, looked up both ways.
CREATE TABLE group_member (
  gid        VARCHAR(64) NOT NULL,
  uid        VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (gid, uid),
  KEY idx_uid (uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Client keys, stored as SHA-256 of the secret (the secret itself is never stored).
CREATE TABLE client_key (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  uid        VARCHAR(64) NOT NULL,
  key_hash   CHAR(64)    NOT NULL,
  created_at DATETIME(6) NOT NULL,
  revoked_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_hash (key_hash),
  KEY idx_uid (uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Dispatch records, open and finished. open_uid is the uid while the dispatch is open
-- (or waiting for a retry) and NULL after: its unique key makes "at most one open
-- dispatch per user" a database invariant, whatever races between server processes.
CREATE TABLE dispatch (
  log_id           CHAR(36)    NOT NULL,
  uid              VARCHAR(64) NOT NULL,
  open_uid         VARCHAR(64) NULL,
  task_kind        TINYINT     NOT NULL,
  task_id          BIGINT      NOT NULL,
  due_at           DATETIME    NOT NULL,
  mode             TINYINT     NOT NULL,
  attempt          INT         NOT NULL DEFAULT 1,
  state            TINYINT     NOT NULL COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried',
  result           TINYINT     NULL COMMENT '1 success, 2 failure',
  detail           LONGTEXT    NULL,
  template_id      BIGINT      NOT NULL,
  params           LONGTEXT    NOT NULL,
  max_attempts     INT         NOT NULL DEFAULT 1,
  retry_backoff_seconds INT    NOT NULL DEFAULT 0,
  lease_seconds    INT         NOT NULL DEFAULT 0,
  dispatched_at    DATETIME(6) NOT NULL,
  lease_expires_at DATETIME(6) NULL,
  retry_at         DATETIME(6) NULL,
  finished_at      DATETIME(6) NULL,
  redo_count       INT         NOT NULL DEFAULT 0,
  last_redo_at     DATETIME(6) NULL,
  PRIMARY KEY (log_id),
  UNIQUE KEY uq_open_uid (open_uid),
  KEY idx_uid_time (uid, dispatched_at),
  KEY idx_occurrence (task_kind, task_id, due_at),
  KEY idx_time (dispatched_at),
  KEY idx_lease (state, lease_expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Per-user cursor and exclude set: the due time of the last completed occurrence and
-- the keys completed at exactly that time.
CREATE TABLE user_state (
  uid          VARCHAR(64) NOT NULL,
  cursor_at    DATETIME    NOT NULL,
  exclude_keys TEXT        NOT NULL,
  updated_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Quota claims: how many slots of one occurrence are taken (live or completed).
CREATE TABLE occurrence_claim (
  task_kind TINYINT  NOT NULL,
  task_id   BIGINT   NOT NULL,
  due_at    DATETIME NOT NULL,
  claimed   INT      NOT NULL,
  PRIMARY KEY (task_kind, task_id, due_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- once_per_user claims: one row per (occurrence, user); the key forbids a second.
CREATE TABLE occurrence_user (
  task_kind TINYINT     NOT NULL,
  task_id   BIGINT      NOT NULL,
  due_at    DATETIME    NOT NULL,
  uid       VARCHAR(64) NOT NULL,
  PRIMARY KEY (task_kind, task_id, due_at, uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Event outbox, written in the same transaction as the state change and drained to
-- Kafka in id order by the relay. Only written while a relay is configured.
CREATE TABLE event_outbox (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  event_id   CHAR(36)    NOT NULL,
  uid        VARCHAR(64) NOT NULL,
  payload    LONGTEXT    NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
