-- Batch fetch (seed 004's hold-N): a client may hold up to max_in_flight open
-- dispatches at once. Each open dispatch takes one of its user's numbered slots; the
-- unique key (open_uid, open_slot) makes "at most max_in_flight open dispatches per
-- user" a database invariant, as uq_open_uid made "at most one". A fetch without max
-- uses slot 1 only, so a client that never batches keeps seed 001's one open task.
CREATE TABLE client_setting (
  uid           VARCHAR(64) NOT NULL,
  max_in_flight INT         NOT NULL,
  updated_at    DATETIME(6) NOT NULL,
  PRIMARY KEY (uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE dispatch
  ADD COLUMN open_slot TINYINT NOT NULL DEFAULT 1 AFTER open_uid,
  DROP KEY uq_open_uid,
  ADD UNIQUE KEY uq_open_slot (open_uid, open_slot);
