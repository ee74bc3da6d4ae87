//! The controller's scenarios, end to end over the recording fake engine, a SQLite file store and a
//! manual clock: a restart of the hub with runs alive in the engine, preemption, reconciliation with
//! what the engine has, the reclaim of idle GPUs, run-time limits by the clock, and a service on an
//! engine that rolls and restarts it itself.

use gpuhub_testkit::controller as kit;

mod idle;
mod limits;
mod preemption;
mod reconcile;
mod restart;
mod services;
