-- A tie of thousands of occurrences at one due time must fit the exclude set.
ALTER TABLE user_state MODIFY exclude_keys MEDIUMTEXT NOT NULL;
