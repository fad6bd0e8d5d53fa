-- A dispatch's latest checkpoint (POST /v1/progress), copied into the next dispatch of
-- the same occurrence to the same user (a retry, a re-take after expiry), so that it
-- survives anything Redis or a server process loses.
ALTER TABLE dispatch ADD COLUMN checkpoint MEDIUMTEXT NULL AFTER detail;
