//! Domain types of gpuhub: users, resource quantities, workloads and their state machine, node
//! inventory, and the simple admission rule. The HTTP API's request/response shapes live in
//! `gpuhub-api`, over this crate.
//!
//! This crate does no I/O, reads no clock, spawns nothing and knows no HTTP: time and identifiers are
//! arguments. With the `openapi` feature (off by default) the types that API responses carry derive
//! their OpenAPI schemas.

pub mod admission;
pub mod catalog;
pub mod dataset;
pub mod edit;
pub mod env;
pub mod error;
pub mod histogram;
pub mod image;
pub mod lifecycle;
pub mod member;
pub mod metrics;
pub mod names;
pub mod node;
pub mod parse;
pub mod pull;
pub mod quantity;
pub mod queue;
pub mod reservation;
pub mod service;
pub mod state;
pub mod stop;
pub mod team;
pub mod usage;
pub mod user;
pub mod workload;

pub use error::CoreError;
pub use quantity::{Bytes, CpuMilli, Seconds};
