-- Lists that scale: keyset pages of workloads ordered by (created_at, id), filtered by owner, state or
-- queue, each served by an index that ends in the sort key; and the per-owner counts that the
-- submission limits check.
DROP INDEX workloads_state;
CREATE INDEX workloads_owner_created ON workloads (owner, created_at, id);
CREATE INDEX workloads_state_created ON workloads (state, created_at, id);
CREATE INDEX workloads_owner_state_created ON workloads (owner, state, created_at, id);
CREATE INDEX workloads_queue_created ON workloads (queue, created_at, id);
