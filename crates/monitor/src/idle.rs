//! The idle-GPU rule, pure: from each round's snapshot, the use seen through the hub and the time,
//! which workloads to warn and which to stop.
//!
//! A workload is idle while every member that holds GPUs shows their utilisation below the threshold
//! (a member without GPU figures makes it not judged at all) and nobody used it through the hub (app
//! requests, an open terminal or SSH session). Idle for `after` (its queue's, else the default), it is
//! warned and given `grace`; still idle then, it is stopped. Any use or any busy GPU clears it.
//! Jobs (unless `jobs`), exempt queues, and workloads an owner keeps are never warned or stopped.

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_core::workload::WorkloadKind;
use std::collections::{HashMap, HashSet};

/// The rule's settings (the server's `[idle]`).
#[derive(Debug, Clone, PartialEq)]
pub struct IdleRule {
    /// Utilisation below this, percent, is idle.
    pub threshold_pct: f64,
    /// Idle this long before the warning.
    pub after: TimeDelta,
    /// From the warning to the stop.
    pub grace: TimeDelta,
    /// Whether jobs are judged (workspaces always are).
    pub jobs: bool,
    /// Queues never judged (`default` is the default queue).
    pub exempt_queues: Vec<String>,
    /// Per queue, its own `after`.
    pub queue_after: HashMap<String, TimeDelta>,
}

/// Where an idle workload stands, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    /// Since when its GPUs and the hub saw no use.
    pub since: DateTime<Utc>,
    /// When its owner was warned, once they were.
    pub warned_at: Option<DateTime<Utc>>,
    /// When it will be stopped if still idle, once warned.
    pub stop_at: Option<DateTime<Utc>>,
    /// Whether its stop was asked for.
    pub stopping: bool,
}

/// What to do about a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdleAction {
    /// Tell its owner it is idle and when it will be stopped.
    Warn {
        /// The workload's id.
        workload_id: String,
        /// Idle since.
        since: DateTime<Utc>,
        /// Stopped then if still idle.
        stop_at: DateTime<Utc>,
    },
    /// Stop it: idle past the grace.
    Stop {
        /// The workload's id.
        workload_id: String,
        /// Idle since.
        since: DateTime<Utc>,
        /// The rule in words, for the stop's recorded reason.
        detail: String,
    },
}

/// What the tracker knows of a workload besides the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Job or workspace.
    pub kind: WorkloadKind,
    /// Last use through the hub (now while a session is open).
    pub last_used: Option<DateTime<Utc>>,
    /// Kept by its owner until then.
    pub kept_until: Option<DateTime<Utc>>,
}

/// The rule's memory between rounds: idle workloads and how far along they are.
#[derive(Debug, Default, Clone)]
pub struct IdleTracker {
    states: HashMap<String, IdleState>,
}

impl IdleTracker {
    /// Where workload `id` stands, if it is idle.
    pub fn state(&self, id: &str) -> Option<&IdleState> {
        self.states.get(id)
    }

    /// Every idle workload, by id.
    pub fn all(&self) -> &HashMap<String, IdleState> {
        &self.states
    }

    /// Takes one round into account; `facts` says, per running workload id, what the snapshot does not.
    pub fn observe(
        &mut self,
        rule: &IdleRule,
        snapshot: &MetricsSnapshot,
        facts: &HashMap<String, Facts>,
        now: DateTime<Utc>,
    ) -> Vec<IdleAction> {
        // per workload: whether every member holding GPUs shows idle GPUs (None: not judged)
        let mut gpu_idle: HashMap<&str, Option<bool>> = HashMap::new();
        let mut queue: HashMap<&str, &str> = HashMap::new();
        for m in snapshot.members.iter().filter(|m| !m.gpus.is_empty()) {
            let idle = m.gpu_utilization_pct.map(|u| u < rule.threshold_pct);
            let e = gpu_idle.entry(m.workload_id.as_str()).or_insert(Some(true));
            *e = match (*e, idle) {
                (Some(a), Some(b)) => Some(a && b),
                _ => None,
            };
            queue.insert(m.workload_id.as_str(), m.queue.as_str());
        }
        let mut actions = Vec::new();
        let mut seen = HashSet::new();
        for (id, idle) in gpu_idle {
            let Some(f) = facts.get(id) else { continue };
            let q = queue.get(id).copied().unwrap_or("default");
            let exempt = (f.kind == WorkloadKind::Job && !rule.jobs) || rule.exempt_queues.iter().any(|e| e == q);
            if idle != Some(true) || exempt {
                continue;
            }
            seen.insert(id.to_owned());
            let st = self.states.entry(id.to_owned()).or_insert(IdleState {
                since: now,
                warned_at: None,
                stop_at: None,
                stopping: false,
            });
            // use through the hub starts the count again (and withdraws a warning)
            if let Some(used) = f.last_used.filter(|u| *u > st.since) {
                *st = IdleState { since: used, warned_at: None, stop_at: None, stopping: false };
            }
            if f.kept_until.is_some_and(|k| k > now) {
                st.warned_at = None;
                st.stop_at = None;
                continue;
            }
            let after = rule.queue_after.get(q).copied().unwrap_or(rule.after);
            match (st.warned_at, st.stop_at) {
                (None, _) if now - st.since >= after => {
                    let stop_at = now + rule.grace;
                    st.warned_at = Some(now);
                    st.stop_at = Some(stop_at);
                    actions.push(IdleAction::Warn { workload_id: id.to_owned(), since: st.since, stop_at });
                }
                (Some(_), Some(stop_at)) if now >= stop_at && !st.stopping => {
                    st.stopping = true;
                    let detail = format!(
                        "GPU utilisation below {} % and no app, terminal or SSH use for {}, then {} after the warning",
                        rule.threshold_pct,
                        span(after),
                        span(rule.grace)
                    );
                    actions.push(IdleAction::Stop { workload_id: id.to_owned(), since: st.since, detail });
                }
                _ => {}
            }
        }
        self.states.retain(|id, _| seen.contains(id));
        actions
    }
}

/// `2h`, `30m`, `1h30m`, `45s`.
pub(crate) fn span(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

#[cfg(test)]
mod tests;
