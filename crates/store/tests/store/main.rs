//! Integration tests of gpuhub-store against real databases: every test body runs once on a fresh
//! SQLite file and once on a fresh PostgreSQL database (see `store/common.rs` for how to reach it).

#[macro_use]
mod common;
mod counts;
mod datasets;
mod history;
mod holdings;
mod images_keys;
mod open;
mod pages;
mod queues;
mod samples;
mod tokens;
mod users;
mod workloads;
