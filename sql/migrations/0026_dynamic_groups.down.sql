-- Dynamic groups' members stay as members kept by hand.
DROP TABLE dynamic_rules;
ALTER TABLE member_group DROP KEY idx_dynamic, DROP COLUMN agent_version, DROP COLUMN selector, DROP COLUMN dynamic;
