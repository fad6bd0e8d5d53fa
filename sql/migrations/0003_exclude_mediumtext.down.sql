ALTER TABLE user_state MODIFY exclude_keys TEXT NOT NULL;
