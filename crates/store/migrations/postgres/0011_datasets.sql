-- PostgreSQL flavour of sqlite/0011_datasets.sql.
-- Datasets (issue 11): directories admins register by name, mounted read-only at /datasets/<name>. A
-- workload keeps the datasets it mounts, with their paths at submission, as JSON.
CREATE TABLE datasets (
    name        TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT ''
);
ALTER TABLE workloads ADD COLUMN datasets TEXT NOT NULL DEFAULT '[]';

-- Each workload's states in order (the portal's and the API's history of a workload).
CREATE TABLE workload_states (
    seq         BIGSERIAL PRIMARY KEY,
    workload_id TEXT   NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    at          BIGINT NOT NULL,
    state       TEXT   NOT NULL,
    message     TEXT
);
CREATE INDEX workload_states_workload ON workload_states (workload_id, seq);
