ALTER TABLE client DROP KEY idx_keys_at, DROP COLUMN keys_at;
