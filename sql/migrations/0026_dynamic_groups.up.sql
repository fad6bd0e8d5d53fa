-- Dynamic groups: a group whose members are the clients whose latest agent report
-- matches its rule (a label selector, a semantic-version constraint on the agent's
-- version). The server writes a dynamic group's group_member rows when the rule is set
-- and when a fetch reports an agent that changes what it matches; a claim reads them as
-- a hand-kept group's.
ALTER TABLE member_group
  ADD COLUMN dynamic       TINYINT(1)    NOT NULL DEFAULT 0,
  ADD COLUMN selector      VARCHAR(1024) NULL COMMENT 'a Kubernetes label selector; NULL: any labels',
  ADD COLUMN agent_version VARCHAR(255)  NULL COMMENT 'a semantic-version constraint; NULL: any version',
  ADD KEY idx_dynamic (dynamic);

-- One row that orders the rules' changes against the reports: a change of a rule takes
-- it for update, a report's matching in share mode, so neither misses the other (a
-- group becoming dynamic included) and the cap on dynamic groups is counted alone.
CREATE TABLE dynamic_rules (
  id TINYINT NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT INTO dynamic_rules (id) VALUES (1);
