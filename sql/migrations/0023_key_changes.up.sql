-- When a client's keys last changed (a key issued, enrolled or revoked), set in the
-- transaction that changed them. Every node reads the recent changes each second and
-- drops the cached key sets they name, so a cached set can be trusted until a change
-- rather than for a short time: a poll reads no MySQL to recheck a key set, and a
-- revocation that could not reach Redis when it was made still reaches it within a
-- second of Redis answering again.
ALTER TABLE client
  ADD COLUMN keys_at DATETIME(6) NULL COMMENT 'the last change of the uid''s keys; NULL: none since this column came',
  ADD KEY idx_keys_at (keys_at);
