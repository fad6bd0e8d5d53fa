-- Idempotency-Key (the IETF httpapi draft) on the admin API's creates: per admin token
-- (its name) and key, the request's hash and, once it succeeded, its reply, kept 24 h.
-- A row without a status is a request under way.
CREATE TABLE idempotency_key (
  actor        VARCHAR(128) NOT NULL,
  idem_key     VARCHAR(255) NOT NULL,
  request_hash CHAR(64)     NOT NULL,
  status       SMALLINT     NULL,
  headers      TEXT         NULL,
  body         MEDIUMBLOB   NULL,
  created_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (actor, idem_key),
  KEY idx_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
