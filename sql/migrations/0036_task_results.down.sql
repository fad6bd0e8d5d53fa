DROP TABLE result_sequence;
ALTER TABLE dispatch DROP KEY idx_results, DROP COLUMN result_seq;
