-- What each admin change invalidated in the heap cache (a user's heap: uid_<id>; every
-- member's, through the group's generation: gid_<id>), noted in the change's own
-- transaction. Every node reads the changes of the last 30 s each second and applies
-- again, in Redis, each invalidation that is missing (the admin process died between
-- its commit and its invalidation, or a Redis failover lost it), so a heap need not be
-- rebuilt often to bound how long a lost invalidation leaves it stale. Rows are needed
-- for a minute; the retention janitor deletes them after heapChangeRetention.
CREATE TABLE heap_change (
  id     BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  target VARCHAR(80)     NOT NULL COMMENT 'uid_<id> or gid_<id>, as a task''s executor',
  at     DATETIME(6)     NOT NULL COMMENT 'the change''s time (its writer''s clock)',
  PRIMARY KEY (id),
  KEY idx_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
