-- Software artifacts: files the DDI endpoint hands devices (firmware images, bundles).
-- The bytes live in a blob backend, written and made durable before this row is: a
-- directory ("dir") or an S3 bucket ("s3"); object_key is the name there. The hashes
-- are lowercase hex of the bytes as received.
CREATE TABLE artifact (
  id         BIGINT       NOT NULL AUTO_INCREMENT,
  filename   VARCHAR(255) NOT NULL,
  size       BIGINT       NOT NULL,
  sha1       CHAR(40)     NOT NULL,
  md5        CHAR(32)     NOT NULL,
  sha256     CHAR(64)     NOT NULL,
  backend    VARCHAR(8)   NOT NULL COMMENT 'dir or s3',
  object_key VARCHAR(255) NOT NULL,
  created_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_object (backend, object_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
