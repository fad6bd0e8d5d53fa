ALTER TABLE dispatch DROP COLUMN final;
