-- Runs of one or more members (the engine interface): the engine's id of a workload's current or last run
-- (for Docker a container name or, for rows written before this migration, a container id; for Slurm a job
-- id), how many members it has, and each member's node, GPUs, state, exit code and engine id (JSON of
-- gpuhub_core::workload::Member).
ALTER TABLE workloads RENAME COLUMN container_id TO run_id;
ALTER TABLE workloads ADD COLUMN size INTEGER NOT NULL DEFAULT 1;
ALTER TABLE workloads ADD COLUMN members TEXT NOT NULL DEFAULT '[]';
