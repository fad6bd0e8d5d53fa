-- A final failure (issue 44): a complete with "retry": false ends its occurrence for
-- its user at once, whatever attempts are left. The record keeps that it died so
-- (final), which its complete and dead events say.
ALTER TABLE dispatch ADD COLUMN final TINYINT(1) NOT NULL DEFAULT 0;
