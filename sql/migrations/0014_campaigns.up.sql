-- Campaigns (seed 000): a batch of items worked by the executor's agents at a set rate.
-- Progress is a sliding window kept in Redis and synced here at an interval: the offset
-- below which every item is finished, and the finished items above it (at most the
-- window, as a JSON list). epoch counts the admin's moves (see taskd.Campaign); salt
-- keys the tags that make its items' log ids unforgeable.
CREATE TABLE campaign (
  id              BIGINT       NOT NULL AUTO_INCREMENT,
  name            VARCHAR(200) NOT NULL,
  template_id     BIGINT       NOT NULL,
  params          MEDIUMTEXT   NOT NULL,
  executor        VARCHAR(68)  NOT NULL,
  items           VARCHAR(8)   NOT NULL,
  total           BIGINT       NOT NULL,
  rate_per_second DOUBLE       NOT NULL,
  window_size     INT          NOT NULL,
  max_failures    INT          NULL,
  per_seconds     INT          NULL,
  lease_seconds   INT          NOT NULL,
  max_attempts    INT          NOT NULL,
  retry_backoff   INT          NOT NULL,
  state           VARCHAR(10)  NOT NULL,
  reason          VARCHAR(500) NOT NULL DEFAULT '',
  epoch           BIGINT       NOT NULL DEFAULT 0,
  salt            CHAR(32)     NOT NULL,
  done_offset     BIGINT       NOT NULL DEFAULT 0,
  done            BIGINT       NOT NULL DEFAULT 0,
  failed          BIGINT       NOT NULL DEFAULT 0,
  in_flight       BIGINT       NOT NULL DEFAULT 0,
  finished_above  MEDIUMTEXT   NULL,
  created_at      DATETIME(6)  NOT NULL,
  updated_at      DATETIME(6)  NOT NULL,
  started_at      DATETIME(6)  NULL,
  finished_at     DATETIME(6)  NULL,
  PRIMARY KEY (id),
  KEY idx_state (state, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The uids of a uid-list campaign, by item index (read a chunk at a time).
CREATE TABLE campaign_item (
  campaign_id BIGINT      NOT NULL,
  idx         BIGINT      NOT NULL,
  uid         VARCHAR(64) NOT NULL,
  PRIMARY KEY (campaign_id, idx)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
