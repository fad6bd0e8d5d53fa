-- Rotate tasks catch up again; the missed events are gone.
DROP TABLE missed_occurrence;
ALTER TABLE task_rotate DROP COLUMN misfire;
