-- Campaigns hand out their items at any time again.
ALTER TABLE campaign DROP COLUMN windows;
