ALTER TABLE dispatch DROP COLUMN checkpoint;
