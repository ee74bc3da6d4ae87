-- Homes with quotas and team folders (issue 11). A user's own home quota in bytes (NULL: the configured
-- default; 0: none). A workload keeps the team folders it mounts (queue, host path, group id) as JSON.
ALTER TABLE users ADD COLUMN home_quota BIGINT;
ALTER TABLE workloads ADD COLUMN teams TEXT NOT NULL DEFAULT '[]';
