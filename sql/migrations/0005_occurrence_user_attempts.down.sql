DELETE FROM occurrence_user WHERE released = 1;
ALTER TABLE occurrence_user DROP COLUMN released, DROP COLUMN attempts;
