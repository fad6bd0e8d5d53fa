-- A staged record becomes done (its stage was completed with success).
UPDATE dispatch SET state = 3, waiting_uid = NULL WHERE state = 8;
ALTER TABLE dispatch DROP COLUMN stage, DROP COLUMN context, DROP COLUMN next_stage, DROP COLUMN next_context,
  MODIFY state TINYINT NOT NULL COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried, 6 dead, 7 cancelled';
