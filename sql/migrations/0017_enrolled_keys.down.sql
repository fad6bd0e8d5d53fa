ALTER TABLE client_key DROP COLUMN enrolled;
