//! The gpuhub scheduler: a pure crate (no I/O, no async, no clock, no global randomness) that decides
//! which workloads start where, which are preempted, and why the others wait.
//!
//! # The server-facing call
//!
//! ```
//! use gpuhub_sched::*;
//! let cluster = Cluster { nodes: vec![Node {
//!     name: "local".into(), cpu_milli: 16_000, memory: 64 << 30, labels: Default::default(),
//!     gpus: (0..2).map(|i| Gpu { uuid: format!("GPU-{i}"), index: i, model: "H200".into(), memory: 141 << 30, single_user: false }).collect(),
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
//! # What one pass does
//!
//! - **Order**: priority (high first), then workloads that stay within their queue's guarantee, then
//!   the queue's weighted dominant share of (decayed usage + what it holds), then submit time, then id.
//!   Shares are updated as the pass starts work. Inside a queue too, a later workload that fits within
//!   the guarantee goes before earlier ones (of the same priority) that do not, so a team below its
//!   guarantee is never held back by its own oversized workloads.
//! - **Limits**: a queue never holds more than its guarantee plus its borrowing limit, a user never more
//!   than the queue's per-user limit (milli-GPU, milli-CPU, bytes; whole and fractional GPUs add up).
//! - **Gangs** (`members > 1`) are placed all-or-nothing on a copy of the cluster.
//! - **Backfill**: a blocked workload whose start can be estimated from run-time limits gets a reserved
//!   start (up to [`Config::reservation_depth`] of them); a later workload starts only if, whenever it
//!   would still run at a reserved time, the reserved workload still fits then.
//! - **Bookings** ([`Reservation`]): free GPUs are held for the booking queue during its window against
//!   every workload whose run would overlap it.
//! - **Preemption**: a lower priority yields to a higher one (same queue, or a queue that borrows); a
//!   queue within its guarantee reclaims from queues that borrow. Victims are chosen node by node: room
//!   for each member is freed on the node where that is cheapest (lowest priority, fewest victims whose
//!   queue would drop below its guarantee, fewest victims, least work lost), and workloads already
//!   stopping no longer count as borrowed. Victims get [`Preemption::grace_ms`]; the preemptor keeps a
//!   reserved start meanwhile.
//! - **Placement** by [`Policy`]: `bestfit`, `spread`, `random`, `fgd` (the FGD paper), `fgd+` (the
//!   FGD benchmark winner: fragmentation that also counts GPU capacity the node's CPUs and memory
//!   cannot feed, plus GPU-model contention) and `auto` (the default: `fgd+` while GPU shares or
//!   model-restricted tasks make fragmentation possible, `spread` on whole GPUs).
//!
//! The building blocks are public for the simulator: [`State`] (the compact cluster), [`Placer`] (the
//! placement policies) and [`frag`] (expected fragmentation against the task-size distribution).

pub mod backlog;
mod book;
pub mod config;
pub mod explain;
pub mod expr;
mod fasthash;
pub mod frag;
mod held;
pub mod model;
pub mod plan;
pub mod policy;
mod preempt;
pub mod queue;
pub mod state;

pub use backlog::{Backlog, decide_backlog};
pub use config::{Backfill, Config, Preemption, Reservation};
pub use explain::{Explanation, Reason};
pub use model::{
    Cluster, Decisions, Gpu, GpuRequest, GpuShare, Node, Pending, Placement, Preempt, Request, Running, Start, WHOLE,
};
pub use plan::{decide, schedule};
pub use policy::{Placer, Policy, UnknownPolicy};
pub use queue::{QueueSpec, Quota, Usage};
pub use state::{Choice, Shape, State};
