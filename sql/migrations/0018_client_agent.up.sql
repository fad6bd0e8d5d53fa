-- What each uid's agent last reported on fetch, and when the uid last polled. Nodes
-- keep polls in memory and write them here in batches (never a write per poll);
-- last_seen only moves forward.
CREATE TABLE client_agent (
  uid        VARCHAR(64)  NOT NULL,
  last_seen  DATETIME(6)  NOT NULL,
  version    VARCHAR(64)  NULL COMMENT 'NULL: no agent object reported yet',
  hostname   VARCHAR(255) NULL,
  labels     TEXT         NULL COMMENT 'JSON object of string pairs',
  PRIMARY KEY (uid),
  KEY idx_last_seen (last_seen),
  KEY idx_version (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
