//! The scheduler's configuration: placement policy, queues, reservations, backfill and preemption.

use crate::policy::Policy;
use crate::queue::{QueueSpec, Usage};
use serde::{Deserialize, Serialize};

/// How the queue is served when the workload at its head cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backfill {
    /// Strict FIFO (within the priority-and-fair-share order): nothing behind a blocked workload starts.
    Off,
    /// Later workloads start when they do not delay the reserved start of those ahead (using run-time
    /// limits); a blocked workload whose start cannot be estimated reserves nothing.
    #[default]
    On,
}

/// Preemption settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemption {
    /// Whether the scheduler preempts at all.
    pub enabled: bool,
    /// How long a victim may run after it is told to stop.
    pub grace_ms: i64,
}

impl Default for Preemption {
    fn default() -> Self {
        Preemption { enabled: true, grace_ms: 30_000 }
    }
}

/// A booking of GPUs for a time window: the scheduler keeps them free for the queue that booked them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Reservation id.
    pub id: String,
    /// The queue that may use the booked GPUs.
    pub queue: String,
    /// Number of whole GPUs.
    pub gpus: u32,
    /// GPU model; none: any.
    #[serde(default)]
    pub model: Option<String>,
    /// Window start.
    pub start_ms: i64,
    /// Window end.
    pub end_ms: i64,
}

/// Everything the scheduler needs besides the cluster and the workloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Placement policy.
    #[serde(default)]
    pub policy: Policy,
    /// Teams' queues; workloads naming another queue get an open one (no guarantee, no limit).
    #[serde(default)]
    pub queues: Vec<QueueSpec>,
    /// Decayed usage per queue, kept by the caller (see [`Usage::advance`]).
    #[serde(default)]
    pub usage: Usage,
    /// GPU bookings.
    #[serde(default)]
    pub reservations: Vec<Reservation>,
    /// Backfill or strict FIFO.
    #[serde(default)]
    pub backfill: Backfill,
    /// Preemption.
    #[serde(default)]
    pub preemption: Preemption,
    /// How many blocked workloads get a reserved start that later ones must not delay.
    #[serde(default = "depth")]
    pub reservation_depth: usize,
    /// Seed for the random policy.
    #[serde(default)]
    pub seed: u64,
}

fn depth() -> usize {
    16
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::default(),
            queues: Vec::new(),
            usage: Usage::default(),
            reservations: Vec::new(),
            backfill: Backfill::default(),
            preemption: Preemption::default(),
            reservation_depth: depth(),
            seed: 0,
        }
    }
}
