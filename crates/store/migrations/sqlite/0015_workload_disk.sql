-- A workload's cap on what each member writes outside its mounts (security review 2, N1): the bytes it asked
-- for (or its queue's max_disk below container_disk); NULL: the admin's container_disk.
ALTER TABLE workloads ADD COLUMN disk_bytes INTEGER;
