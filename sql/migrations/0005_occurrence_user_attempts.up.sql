-- A once_per_user claim row now outlives an expiry that left attempts: released = 1
-- lets the user take the occurrence again, and attempts says how many it used, so the
-- claim learns a re-take's attempt number without a query on every claim.
ALTER TABLE occurrence_user
  ADD COLUMN attempts INT NOT NULL DEFAULT 0,
  ADD COLUMN released TINYINT NOT NULL DEFAULT 0;
