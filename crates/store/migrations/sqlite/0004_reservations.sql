-- Bookings of GPUs for a team queue during a window (unix milliseconds); the scheduler keeps them free
-- for that queue. Made by admins through the API, next to those of the configuration file.
CREATE TABLE reservations (
    id         TEXT    PRIMARY KEY,
    queue      TEXT    NOT NULL,
    gpus       INTEGER NOT NULL,
    model      TEXT,
    start_ms   INTEGER NOT NULL,
    end_ms     INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
