-- Back to one open dispatch per user: open dispatches in slots above 1 are parked (as
-- a paused task's are), and the user's fetches hand them out again one at a time.
UPDATE dispatch SET waiting_uid = open_uid, open_uid = NULL WHERE open_uid IS NOT NULL AND open_slot > 1;
ALTER TABLE dispatch
  DROP KEY uq_open_slot,
  ADD UNIQUE KEY uq_open_uid (open_uid),
  DROP COLUMN open_slot;
DROP TABLE client_setting;
