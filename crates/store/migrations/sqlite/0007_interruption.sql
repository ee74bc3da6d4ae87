-- Why a workload's last run was interrupted or ended from outside (a stop, a preemption, its run-time
-- limit, an engine failure, a disabled owner): the JSON of gpuhub_core::stop::StopReason; NULL: none.
ALTER TABLE workloads ADD COLUMN interruption TEXT;
