-- What a workload asks of the scheduler beyond CPUs, memory and whole GPUs: a share of one GPU
-- (milli-GPU and an optional amount of its memory), the team queue, a resource expression and a
-- run-time limit in seconds.
ALTER TABLE workloads ADD COLUMN gpu_milli INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workloads ADD COLUMN gpu_memory INTEGER;
ALTER TABLE workloads ADD COLUMN queue TEXT NOT NULL DEFAULT '';
ALTER TABLE workloads ADD COLUMN constraint_expr TEXT;
ALTER TABLE workloads ADD COLUMN runtime_limit_s INTEGER;
