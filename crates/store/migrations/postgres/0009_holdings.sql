-- PostgreSQL flavour of sqlite/0009_holdings.sql (timestamps are BIGINT unix milliseconds).
-- Accounting (issue 10). A workload's current or last holding of resources (`Workload::apply` opens one
-- when it enters starting/running, closes it when it leaves), and every holding ever made, written in the
-- same transaction as the workload's state. Holdings outlive their workload (no foreign key): usage of a
-- deleted workload or account stays counted. GPU models are remembered per GPU as the engine names them,
-- so usage by model survives a GPU leaving the inventory.
ALTER TABLE workloads ADD COLUMN held_since BIGINT;
ALTER TABLE workloads ADD COLUMN held_until BIGINT;

CREATE TABLE holdings (
    workload_id TEXT   NOT NULL,
    since       BIGINT NOT NULL,
    until       BIGINT,
    owner       TEXT   NOT NULL,
    workload    TEXT   NOT NULL,
    queue       TEXT   NOT NULL,
    gpus        TEXT   NOT NULL,
    gpu_milli   BIGINT NOT NULL,
    cpu_milli   BIGINT NOT NULL,
    memory      BIGINT NOT NULL,
    PRIMARY KEY (workload_id, since)
);
CREATE INDEX holdings_since ON holdings (since);
CREATE INDEX holdings_owner ON holdings (owner, since);

CREATE TABLE gpu_models (
    gpu   TEXT PRIMARY KEY,
    model TEXT NOT NULL
);
