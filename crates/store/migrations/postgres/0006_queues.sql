-- Team queues: guarantee, limits, weight, members and priority classes as the JSON of
-- gpuhub_core::queue::QueueDef. Seeded from the configuration file on first start, then edited by
-- admins through the API (the database wins over the file from then on).
CREATE TABLE queues (
    name       TEXT   PRIMARY KEY,
    settings   TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
