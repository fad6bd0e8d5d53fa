-- The artifact rows go; their bytes stay in the backend (a directory or a bucket).
DROP TABLE artifact;
