-- A campaign's maintenance windows: its items are handed out only while one is open.
ALTER TABLE campaign ADD COLUMN windows TEXT NULL COMMENT 'JSON [{cron, minutes, time_zone}]; NULL: any time';
