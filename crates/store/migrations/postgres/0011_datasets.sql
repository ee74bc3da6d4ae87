-- PostgreSQL flavour of sqlite/0011_datasets.sql.
-- Datasets (issue 11): directories admins register by name, mounted read-only at /datasets/<name>. A
-- workload keeps the datasets it mounts, with their paths at submission, as JSON.
CREATE TABLE datasets (
    name        TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT ''
);
ALTER TABLE workloads ADD COLUMN datasets TEXT NOT NULL DEFAULT '[]';
