//! Edits of a workload's terms after submission ([`EditWorkloadRequest`]): a longer run-time limit while
//! it is queued or runs, another priority or queue while it waits. [`Workload::amend`] is the one rule;
//! who may ask and the queue's maximum are the service's business.

use crate::queue::MAX_RUNTIME;
use crate::workload::{Workload, WorkloadState};
use crate::{CoreError, Seconds};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `PATCH /api/v1/workloads/{name}`: what to change of a workload; what is left out stays. Its owner
/// may lengthen the run-time limit of a queued or running workload, within its queue's `max_runtime`;
/// an admin may also change a queued workload's priority or queue. A service's owner may update its
/// `image`, `command` or `env` (alone, without the others): a live service is restarted with them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EditWorkloadRequest {
    /// The new run-time limit (`"3h"`), longer than the present one (`time_limit` is taken too).
    #[serde(default, alias = "time_limit", skip_serializing_if = "Option::is_none")]
    pub runtime_limit: Option<Seconds>,
    /// The new priority (admins; queued workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The new team queue (admins; queued workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A service's new image (a catalog name or an image reference the engine has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A service's new command and arguments (empty: the image's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A service's new environment, in place of the old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl EditWorkloadRequest {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.runtime_limit.is_none() && self.priority.is_none() && self.queue.is_none() && !self.updates_spec()
    }

    /// Whether it changes what runs (image, command, environment): a service's update.
    pub fn updates_spec(&self) -> bool {
        self.image.is_some() || self.command.is_some() || self.env.is_some()
    }
}

fn display(limit: Option<Seconds>) -> String {
    limit.map_or_else(|| "none".into(), |l| l.to_string())
}

impl Workload {
    /// Applies `edit`'s terms (time limit, priority, queue; a service's image, command and environment
    /// are updated apart, by a restart), returning what changed in words (`run-time limit 1h → 3h`);
    /// nothing when it changes nothing. A run-time limit may only grow (to at most 366 days), and only while the
    /// workload is pulling, queued, starting or running; priority and queue change only while it waits
    /// (pulling or queued). A refusal changes nothing.
    pub fn amend(&mut self, edit: &EditWorkloadRequest) -> Result<Vec<String>, CoreError> {
        use WorkloadState::*;
        let mut changed = Vec::new();
        if (edit.priority.is_some() || edit.queue.is_some()) && !matches!(self.state, Pulling | Queued) {
            return Err(CoreError::Transition { from: self.state, action: "change its priority or queue" });
        }
        if let Some(limit) = edit.runtime_limit {
            if !matches!(self.state, Pulling | Queued | Starting | Running) {
                return Err(CoreError::Transition { from: self.state, action: "change its run-time limit" });
            }
            if limit.0 == 0 || limit > MAX_RUNTIME {
                return Err(CoreError::invalid("runtime_limit", "must be from 1s to 366d"));
            }
            match self.runtime_limit {
                None => {
                    return Err(CoreError::invalid(
                        "runtime_limit",
                        format!("workload {} has no run-time limit to extend", self.name),
                    ));
                }
                Some(cur) if limit <= cur => {
                    return Err(CoreError::invalid(
                        "runtime_limit",
                        format!("{limit} is not longer than its present limit of {cur}; a limit can only be extended"),
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(limit) = edit.runtime_limit {
            changed.push(format!("run-time limit {} → {limit}", display(self.runtime_limit)));
            self.runtime_limit = Some(limit);
        }
        if let Some(p) = edit.priority.filter(|p| *p != self.priority) {
            changed.push(format!("priority {} → {p}", self.priority));
            self.priority = p;
        }
        if let Some(q) = edit.queue.as_ref().filter(|q| **q != self.queue) {
            let name = |q: &str| if q.is_empty() { "the default queue".to_owned() } else { format!("queue {q}") };
            changed.push(format!("{} → {}", name(&self.queue), name(q)));
            self.queue = q.clone();
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued() -> Workload {
        let t = chrono::DateTime::from_timestamp(0, 0).unwrap();
        Workload::new("i", "o", "n", crate::workload::WorkloadKind::Job, "x", t)
    }

    fn limit(s: &str) -> EditWorkloadRequest {
        EditWorkloadRequest { runtime_limit: Some(Seconds::parse(s).unwrap()), ..Default::default() }
    }

    #[test]
    fn a_limit_only_grows_while_the_workload_is_live() {
        let mut w = queued();
        let e = w.amend(&limit("2h")).unwrap_err();
        assert!(e.to_string().contains("no run-time limit to extend"), "{e}");
        w.runtime_limit = Some(Seconds(3600));
        assert_eq!(w.amend(&limit("2h")).unwrap(), ["run-time limit 1h → 2h"]);
        assert_eq!(w.runtime_limit, Some(Seconds(7200)));
        let e = w.amend(&limit("30m")).unwrap_err();
        assert!(e.to_string().contains("not longer than its present limit of 2h"), "{e}");
        assert!(w.amend(&limit("400d")).is_err());
        w = w.restore(WorkloadState::Running);
        assert!(w.amend(&limit("3h")).is_ok());
        w = w.restore(WorkloadState::Failed);
        let e = w.amend(&limit("4h")).unwrap_err();
        assert_eq!(e.to_string(), "workload is failed, cannot change its run-time limit");
        assert_eq!(w.runtime_limit, Some(Seconds(3 * 3600)), "a refusal changes nothing");
    }

    #[test]
    fn priority_and_queue_change_only_while_waiting() {
        let mut w = queued();
        let edit = EditWorkloadRequest { priority: Some(50), queue: Some("vision".into()), ..Default::default() };
        assert_eq!(w.amend(&edit).unwrap(), ["priority 0 → 50", "the default queue → queue vision"]);
        assert_eq!((w.priority, w.queue.as_str()), (50, "vision"));
        assert!(w.amend(&edit).unwrap().is_empty(), "the same values change nothing");
        w = w.restore(WorkloadState::Running);
        let e = w.amend(&EditWorkloadRequest { priority: Some(1), ..Default::default() }).unwrap_err();
        assert_eq!(e.to_string(), "workload is running, cannot change its priority or queue");
        assert_eq!(w.priority, 50);
    }
}
