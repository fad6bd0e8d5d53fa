DROP TABLE IF EXISTS audit_log;
ALTER TABLE dispatch DROP KEY idx_finished, DROP KEY idx_redo;
