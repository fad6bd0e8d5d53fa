-- Multi-stage tasks (seed 004's setTask): a dispatch is one attempt at one stage; the
-- complete of a stage that names the next one leaves the record staged (state 8),
-- waiting beside the user's slot (waiting_uid) until retry_at, with the next stage and
-- its context, which the next dispatch of the occurrence to the user takes up.
ALTER TABLE dispatch
  ADD COLUMN stage VARCHAR(64) NULL AFTER checkpoint,
  ADD COLUMN context MEDIUMTEXT NULL AFTER stage,
  ADD COLUMN next_stage VARCHAR(64) NULL AFTER context,
  ADD COLUMN next_context MEDIUMTEXT NULL AFTER next_stage,
  MODIFY state TINYINT NOT NULL
    COMMENT '1 open, 2 retry_wait, 3 done, 4 expired, 5 retried, 6 dead, 7 cancelled, 8 staged';
