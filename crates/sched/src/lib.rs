//! The gpuhub scheduler: a pure crate (no I/O, no async, no clock, no global randomness) that decides
//! which workloads start where, which are preempted, and why the others wait.
//!
//! # The server-facing call
//!
//! ```
//! use gpuhub_sched::*;
//! let cluster = Cluster { nodes: vec![Node {
//!     name: "local".into(), cpu_milli: 16_000, memory: 64 << 30, labels: Default::default(),
//!     gpus: (0..2).map(|i| Gpu { uuid: format!("GPU-{i}"), index: i, model: "H200".into(), memory: 141 << 30 }).collect(),
//! }]};
//! let pending = vec![Pending {
//!     id: "w1".into(), queue: String::new(), user: "ann".into(), priority: 0, submit_ms: 0,
//!     request: Request { cpu_milli: 2000, memory: 8 << 30, gpu: GpuRequest::Whole { count: 1 }, ..Default::default() },
//!     members: 1, runtime_limit_ms: None,
//! }];
//! let d = schedule(&cluster, &[], &pending, &Config::default(), 1_000);
//! assert_eq!(d.starts[0].placements[0].gpus[0].uuid, "GPU-0");
//! ```
//!
//! [`schedule`] is stateless: the caller passes the cluster, what runs, what waits, the [`Config`]
//! (policy, queues, decayed [`Usage`] it keeps, reservations) and the time, and gets [`Decisions`]:
//! starts (a placement per gang member), preemptions (with a grace period) and an [`Explanation`] for
//! every workload left pending. The same input always gives the same decisions.
//!
//! With one node, whole GPUs and no queues this is priority-then-submit-time admission: every workload
//! that fits starts, in that order; with run-time limits a blocked workload also gets a reserved start
//! that later ones may not delay (backfill).
//!
//! The building blocks are public for the simulator: [`State`] (the compact cluster), [`Placer`] (the
//! placement policies) and [`frag`] (expected fragmentation against the task-size distribution).

mod backfill;
mod book;
pub mod config;
pub mod explain;
pub mod expr;
pub mod frag;
pub mod model;
pub mod plan;
pub mod policy;
mod preempt;
pub mod queue;
pub mod state;

pub use config::{Backfill, Config, Preemption, Reservation};
pub use explain::{Explanation, Reason};
pub use model::{
    Cluster, Decisions, Gpu, GpuRequest, GpuShare, Node, Pending, Placement, Preempt, Request, Running, Start, WHOLE,
};
pub use plan::schedule;
pub use policy::{Placer, Policy, UnknownPolicy};
pub use queue::{QueueSpec, Quota, Usage};
pub use state::{Choice, Shape, State};
