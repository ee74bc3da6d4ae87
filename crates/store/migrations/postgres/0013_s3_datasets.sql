-- Object-storage datasets (issue 26): an S3 bucket or prefix the hub mounts on its host, its endpoint,
-- region and access key, and its secret key sealed by the server (AES-256-GCM, never the plain text);
-- and whether workloads mount a dataset read-only (object storage may be registered read-write).
ALTER TABLE datasets ADD COLUMN s3_url TEXT;
ALTER TABLE datasets ADD COLUMN s3_endpoint TEXT;
ALTER TABLE datasets ADD COLUMN s3_region TEXT;
ALTER TABLE datasets ADD COLUMN s3_access_key TEXT;
ALTER TABLE datasets ADD COLUMN s3_secret TEXT;
ALTER TABLE datasets ADD COLUMN read_only BOOLEAN NOT NULL DEFAULT TRUE;
