-- The history of the monitor's samples (issue 10). Each series is named once (`sample_members`: a member of
-- a workload, with its owner; `sample_gpus`: a GPU on a node), and every sample refers to it by number, so
-- a row is a handful of integers. `tier` 0 holds raw samples, 1 the means of 1-minute buckets, 2 the means
-- of 1-hour buckets; a bucket's `ts` is its start (unix ms). Figures are integers: CPU in millicores,
-- utilisation in 0.1 %, power in mW, temperature in 0.1 °C, sizes in bytes; NULL where it was not measured.
-- A mean's `samples` is how many raw samples it stands for (NULL: a raw sample, one), so that means of
-- means, and a step that spans two tiers, weigh each raw sample alike.
-- Samples are clustered by series, tier and time (a member's history is one range); `*_tier_ts` finds the
-- oldest samples of a tier, for thinning out. Series of deleted workloads are forgotten once they have no
-- sample left; no foreign keys, like holdings: history outlives its workload until it ages out.
CREATE TABLE sample_members (
    id          INTEGER PRIMARY KEY,
    workload_id TEXT    NOT NULL,
    member      INTEGER NOT NULL,
    owner       TEXT    NOT NULL,
    UNIQUE (workload_id, member)
);

CREATE TABLE member_samples (
    series       INTEGER NOT NULL,
    tier         INTEGER NOT NULL,
    ts           INTEGER NOT NULL,
    cpu_milli    INTEGER,
    memory_used  INTEGER,
    memory_limit INTEGER,
    gpu_util     INTEGER,
    gpu_memory   INTEGER,
    samples      INTEGER,
    PRIMARY KEY (series, tier, ts)
) WITHOUT ROWID;
CREATE INDEX member_samples_tier_ts ON member_samples (tier, ts);

CREATE TABLE sample_gpus (
    id   INTEGER PRIMARY KEY,
    uuid TEXT    NOT NULL,
    node TEXT    NOT NULL,
    UNIQUE (uuid, node)
);

CREATE TABLE gpu_samples (
    series       INTEGER NOT NULL,
    tier         INTEGER NOT NULL,
    ts           INTEGER NOT NULL,
    utilization  INTEGER,
    memory_used  INTEGER,
    memory_total INTEGER,
    power_mw     INTEGER,
    temperature  INTEGER,
    samples      INTEGER,
    PRIMARY KEY (series, tier, ts)
) WITHOUT ROWID;
CREATE INDEX gpu_samples_tier_ts ON gpu_samples (tier, ts);
