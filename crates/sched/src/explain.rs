//! Why a pending workload is not running: the constraint or limit that holds it, its position in the
//! queue order, and when it is expected to start.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The kind of obstacle, for programs; [`Explanation::message`] has the details for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not enough free resources now.
    Resources,
    /// Its queue (or its user inside the queue) is at a limit.
    QueueLimit,
    /// It could start, but only by delaying the reserved start of a workload ahead of it.
    Backfill,
    /// Strict FIFO: a workload ahead of it waits.
    HeadOfLine,
    /// The GPUs it could use are reserved for a time window.
    Reservation,
    /// Preempted workloads are being stopped to make room for it.
    Preempting,
    /// No node could ever hold it (or a gang member), even empty.
    Unschedulable,
    /// Its resource expression does not parse or does not evaluate.
    InvalidConstraint,
}

impl Reason {
    /// A short lowercase tag (`resources`, `queue-limit`…), for `gpuhub ps`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resources => "resources",
            Self::QueueLimit => "queue-limit",
            Self::Backfill => "backfill",
            Self::HeadOfLine => "head-of-line",
            Self::Reservation => "reservation",
            Self::Preempting => "preempting",
            Self::Unschedulable => "unschedulable",
            Self::InvalidConstraint => "invalid-constraint",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one pending workload waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// Workload id.
    pub id: String,
    /// The obstacle.
    pub reason: Reason,
    /// One line for people, e.g. `waiting for 2 GPUs (1 free on the best node)`.
    pub message: String,
    /// 1-based position in the scheduling order among pending workloads.
    pub position: u32,
    /// When it is expected to start, if the run-time limits of what runs allow an estimate.
    pub estimated_start_ms: Option<i64>,
}

impl Explanation {
    /// A short reason for a table column: the message cut to `width` characters.
    pub fn short(&self, width: usize) -> String {
        if self.message.chars().count() <= width {
            return self.message.clone();
        }
        let mut s: String = self.message.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}
