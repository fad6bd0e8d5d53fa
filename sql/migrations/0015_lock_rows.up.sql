-- Rows that writers of one client's keys, or of one group's members, lock first (an
-- upsert on the primary key: a record lock, never a gap lock), so that those writers
-- take turns and writers of different clients or groups never meet. Before them, the
-- first statement of a key issue locked the uid's key rows, which a new uid does not
-- have, and concurrent enrolls of new uids deadlocked on each other's fresh rows;
-- members added one by one to one group deadlocked when two lists crossed.

-- One row per client uid that ever had a key (or, later, settings).
CREATE TABLE client (
  uid        VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (uid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT INTO client (uid, created_at)
  SELECT uid, MIN(created_at) FROM client_key GROUP BY uid;

-- One row per group that ever had members.
CREATE TABLE member_group (
  gid        VARCHAR(64) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (gid)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT INTO member_group (gid, created_at)
  SELECT gid, MIN(created_at) FROM group_member GROUP BY gid;
