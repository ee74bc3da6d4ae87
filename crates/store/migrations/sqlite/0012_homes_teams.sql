-- Homes with quotas, team folders, sign-in sources and personal images (issue 11). A user's own home quota in bytes (NULL: the configured
-- default; 0: none). A workload keeps the team folders it mounts (queue, host path, group id) as JSON.
ALTER TABLE users ADD COLUMN home_quota BIGINT;
-- Sign-in sources (issue 11): where an account comes from (local, ldap, oidc) and its GID (NULL: its
-- UID; an LDAP account's gidNumber otherwise).
ALTER TABLE users ADD COLUMN source TEXT NOT NULL DEFAULT 'local';
ALTER TABLE users ADD COLUMN gid BIGINT;
ALTER TABLE workloads ADD COLUMN teams TEXT NOT NULL DEFAULT '[]';

-- Personal images: workspaces saved by their owners (gpuhub save), run by name, theirs alone.
CREATE TABLE personal_images (
    owner      TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    reference  TEXT   NOT NULL,
    size_bytes BIGINT NOT NULL,
    workload   TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (owner, name)
);

-- A dataset may be an NFS export the engine mounts itself (server:/export) instead of a directory.
ALTER TABLE datasets ADD COLUMN nfs TEXT;
