//! Domain types of gpuhub: users, resource quantities, workloads and their state machine, node
//! inventory, the request/response shapes of the HTTP API, and the simple admission rule.
//!
//! This crate does no I/O, reads no clock and spawns nothing: time and identifiers are arguments.

pub mod admission;
pub mod api;
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
pub mod quantity;
pub mod queue;
pub mod service;
pub mod state;
pub mod stop;
pub mod team;
pub mod usage;
pub mod user;
pub mod workload;

pub use error::CoreError;
pub use quantity::{Bytes, CpuMilli, Seconds};
