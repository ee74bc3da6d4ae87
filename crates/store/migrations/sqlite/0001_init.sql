-- gpuhub schema, SQLite flavour. Timestamps are unix milliseconds; JSON columns are TEXT.
-- Only INTEGER and TEXT column types: the sqlx Any driver cannot map other SQLite declared types.

CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    username      TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
    uid           INTEGER NOT NULL UNIQUE,
    disabled      INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    created_at    INTEGER NOT NULL
);

-- Monotonic counters that must survive deletes (the last UID handed out).
CREATE TABLE counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);

CREATE TABLE tokens (
    hash       TEXT    PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL CHECK (kind IN ('api', 'session')),
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX tokens_user_id ON tokens (user_id);

CREATE TABLE workloads (
    id           TEXT    PRIMARY KEY,
    name         TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    image        TEXT    NOT NULL,
    command      TEXT    NOT NULL,
    env          TEXT    NOT NULL,
    cpu_milli    INTEGER NOT NULL,
    memory       INTEGER NOT NULL,
    gpu_count    INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    state        TEXT    NOT NULL,
    gpus         TEXT    NOT NULL,
    container_id TEXT,
    exit_code    INTEGER,
    message      TEXT,
    created_at   INTEGER NOT NULL,
    queued_at    INTEGER NOT NULL,
    started_at   INTEGER,
    finished_at  INTEGER,
    UNIQUE (owner, name)
);
CREATE INDEX workloads_state ON workloads (state);
CREATE INDEX workloads_created ON workloads (created_at, id);

CREATE TABLE images (
    name        TEXT PRIMARY KEY,
    image       TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT ''
);

CREATE TABLE ssh_keys (
    fingerprint TEXT    PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    public_key  TEXT    NOT NULL,
    comment     TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL
);
CREATE INDEX ssh_keys_user_id ON ssh_keys (user_id);

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
