-- Rollouts (issue 30): a task's quota released in phases. The declaration is the
-- task's (JSON, NULL: none); its state one row per rolled-out task, read in share mode
-- by every claim of the task (the phase's cap) and locked by every move. A snapshot
-- rollout keeps the group's members at its start. Each dispatch of a rolled-out task
-- carries the phase it was claimed in, which the gate counts by.
ALTER TABLE task_once ADD COLUMN rollout TEXT NULL;
ALTER TABLE task_rotate ADD COLUMN rollout TEXT NULL;

CREATE TABLE task_rollout (
  task_kind        TINYINT      NOT NULL,
  task_id          BIGINT       NOT NULL,
  state            VARCHAR(16)  NOT NULL,
  phase            INT          NOT NULL,
  phase_started_at DATETIME(6)  NOT NULL,
  bake_until       DATETIME(6)  NULL,
  gate_failed      BOOLEAN      NOT NULL DEFAULT FALSE,
  started_at       DATETIME(6)  NOT NULL,
  updated_at       DATETIME(6)  NOT NULL,
  PRIMARY KEY (task_kind, task_id),
  KEY idx_state (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE rollout_member (
  task_kind TINYINT     NOT NULL,
  task_id   BIGINT      NOT NULL,
  uid       VARCHAR(64) NOT NULL,
  PRIMARY KEY (task_kind, task_id, uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE dispatch ADD COLUMN rollout_phase SMALLINT NULL;
