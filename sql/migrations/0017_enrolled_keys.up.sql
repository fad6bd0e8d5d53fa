-- A key an agent enrolled for itself and a key an admin issued are capped apart:
-- enrolling again revokes the oldest enrolled key of the uid, never an admin's (which
-- only an admin revokes). Live keys the audit log shows were enrolled are marked so;
-- every other key from before counts as admin-issued.
ALTER TABLE client_key ADD COLUMN enrolled BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE client_key k JOIN audit_log a
  ON a.action = 'client_key.create' AND a.actor = 'enroll' AND a.target = CONCAT('user:', k.uid)
  AND k.id = CAST(JSON_UNQUOTE(JSON_EXTRACT(a.after_json, '$.key_id')) AS UNSIGNED)
SET k.enrolled = TRUE
WHERE k.revoked_at IS NULL;
