//! Faults the platform must survive: the container engine killed and restarted under running jobs
//! (`engine.rs` with live restore, `restart.rs` without), the PostgreSQL server unreachable for a while (`database.rs`), the data directory's
//! disk full (`disk.rs`).

use gpuhub_testkit as common;

mod database;
mod disk;
mod engine;
mod restart;
