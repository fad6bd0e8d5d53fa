-- A rotate task's misfire policy (1 catch_up, 2 latest, 3 skip), and the occurrences
-- users never got because of it: one row per user and run of missed occurrences (its
-- missed event), keyed by the run's first occurrence.
ALTER TABLE task_rotate ADD COLUMN misfire TINYINT NOT NULL DEFAULT 1 COMMENT '1 catch_up, 2 latest, 3 skip';

CREATE TABLE missed_occurrence (
  task_kind   TINYINT     NOT NULL,
  task_id     BIGINT      NOT NULL,
  due_at      DATETIME    NOT NULL COMMENT 'the first occurrence of the run',
  uid         VARCHAR(64) NOT NULL,
  last_due_at DATETIME    NOT NULL,
  missed      INT         NOT NULL COMMENT 'how many occurrences the run holds',
  missed_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (task_kind, task_id, due_at, uid),
  KEY idx_missed_at (missed_at),
  KEY idx_uid (uid, missed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
