//! The GPU memory guard, pure: from each round's snapshot, each guarded share's memory grant and the
//! time, which members to warn and which workloads to stop.
//!
//! A member of a workload holding a share of a guarded GPU (`gpu_sharing = "guard"`, and as a backstop
//! on `mps` GPUs) is over its grant while the GPU memory of its own processes (attributed by PID,
//! [`crate::attribute`]) is above the memory its share was granted. Over for the first time, its owner
//! is warned and the member given `grace`; still over when the grace ends, the workload is stopped
//! (with the typed reason `gpu-memory-exceeded` by the caller). A round in which the member is back
//! within its grant clears it; a member without GPU figures is not judged (it keeps where it stood).

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::Bytes;
use gpuhub_core::metrics::MetricsSnapshot;
use std::collections::{HashMap, HashSet};

/// The guard's settings (the server's `[guard]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardRule {
    /// From the warning to the stop.
    pub grace: TimeDelta,
}

/// A member over its grant, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardState {
    /// Since when it is over its grant.
    pub since: DateTime<Utc>,
    /// GPU memory its processes used at the last round, bytes.
    pub used: u64,
    /// Its grant, bytes.
    pub granted: u64,
    /// When it is stopped if still over.
    pub stop_at: DateTime<Utc>,
    /// Whether its stop was asked for.
    pub stopping: bool,
}

/// What to do about a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardAction {
    /// Tell the owner that the member uses more GPU memory than granted, and when it will be stopped.
    Warn {
        /// The workload's id.
        workload_id: String,
        /// The member's index.
        member: u32,
        /// GPU memory used, bytes.
        used: u64,
        /// The grant, bytes.
        granted: u64,
        /// Stopped then if still over.
        stop_at: DateTime<Utc>,
    },
    /// Stop the workload: the member stayed over its grant past the grace.
    Stop {
        /// The workload's id.
        workload_id: String,
        /// The member's index.
        member: u32,
        /// GPU memory used at the stop, bytes.
        used: u64,
        /// The grant, bytes.
        granted: u64,
        /// Over since.
        since: DateTime<Utc>,
        /// The figures in words, for the stop's recorded reason.
        detail: String,
    },
}

/// The guard's memory between rounds: members over their grant, by `(workload id, member)`.
#[derive(Debug, Default, Clone)]
pub struct GuardTracker {
    over: HashMap<(String, u32), GuardState>,
}

impl GuardTracker {
    /// Where member `member` of workload `id` stands, if it is over its grant.
    pub fn state(&self, id: &str, member: u32) -> Option<&GuardState> {
        self.over.get(&(id.to_owned(), member))
    }

    /// The members of workload `id` over their grant, by member index.
    pub fn of_workload(&self, id: &str) -> Vec<(u32, GuardState)> {
        let mut v: Vec<(u32, GuardState)> =
            self.over.iter().filter(|((w, _), _)| w == id).map(|((_, m), s)| (*m, s.clone())).collect();
        v.sort_by_key(|(m, _)| *m);
        v
    }

    /// How many members are over their grant now.
    pub fn len(&self) -> usize {
        self.over.len()
    }

    /// Whether no member is over its grant.
    pub fn is_empty(&self) -> bool {
        self.over.is_empty()
    }

    /// Takes one round into account. `grants` holds, per guarded workload id, the GPU memory each of its
    /// members was granted (bytes); workloads absent from it are not judged, and forgotten.
    pub fn observe(
        &mut self,
        rule: &GuardRule,
        snapshot: &MetricsSnapshot,
        grants: &HashMap<String, u64>,
        now: DateTime<Utc>,
    ) -> Vec<GuardAction> {
        let mut actions = Vec::new();
        let mut seen: HashSet<(String, u32)> = HashSet::new();
        for m in &snapshot.members {
            let Some(&granted) = grants.get(&m.workload_id) else { continue };
            let key = (m.workload_id.clone(), m.member);
            let Some(used) = m.gpu_memory_used else {
                // no figures this round: neither judged nor forgotten
                if self.over.contains_key(&key) {
                    seen.insert(key);
                }
                continue;
            };
            if used <= granted {
                continue;
            }
            seen.insert(key.clone());
            match self.over.get_mut(&key) {
                None => {
                    let stop_at = now + rule.grace;
                    self.over.insert(key, GuardState { since: now, used, granted, stop_at, stopping: false });
                    actions.push(GuardAction::Warn {
                        workload_id: m.workload_id.clone(),
                        member: m.member,
                        used,
                        granted,
                        stop_at,
                    });
                    if rule.grace <= TimeDelta::zero() {
                        // no grace: the same round stops it
                        let st = self.over.get_mut(&(m.workload_id.clone(), m.member));
                        if let Some(st) = st {
                            st.stopping = true;
                            actions.push(stop(m.workload_id.clone(), m.member, st, &m.gpus, rule));
                        }
                    }
                }
                Some(st) => {
                    st.used = used;
                    st.granted = granted;
                    if now >= st.stop_at && !st.stopping {
                        st.stopping = true;
                        actions.push(stop(m.workload_id.clone(), m.member, st, &m.gpus, rule));
                    }
                }
            }
        }
        // a member back within its grant, or no longer guarded or running, starts afresh
        self.over.retain(|k, _| seen.contains(k));
        actions
    }
}

fn stop(workload_id: String, member: u32, st: &GuardState, gpus: &[String], rule: &GuardRule) -> GuardAction {
    let on = match gpus {
        [] => String::new(),
        [g] => format!(" on {g}"),
        many => format!(" on {}", many.join(", ")),
    };
    let detail = format!(
        "member {member} used {} of GPU memory{on}, above its grant of {}, for longer than the guard's grace of {}",
        Bytes(st.used),
        Bytes(st.granted),
        crate::idle::span(rule.grace)
    );
    GuardAction::Stop { workload_id, member, used: st.used, granted: st.granted, since: st.since, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::metrics::MemberMetrics;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn member(id: &str, index: u32, used: Option<u64>) -> MemberMetrics {
        MemberMetrics {
            workload_id: id.into(),
            workload: format!("{id}-name"),
            owner: "alice".into(),
            queue: "default".into(),
            member: index,
            node: Some("local".into()),
            cpu_cores: None,
            memory_used: 0,
            memory_limit: None,
            gpus: vec!["GPU-0".into()],
            gpu_utilization_pct: Some(50.0),
            gpu_memory_used: used,
        }
    }

    fn snap(members: Vec<MemberMetrics>) -> MetricsSnapshot {
        MetricsSnapshot { at: None, members, gpus: Vec::new() }
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn over_its_grant_past_the_grace_is_stopped_once() {
        let rule = GuardRule { grace: TimeDelta::seconds(30) };
        let grants = HashMap::from([("w1".to_owned(), 10 * GIB), ("w2".to_owned(), 10 * GIB)]);
        let mut t = GuardTracker::default();
        // w1 at its grant is fine; w2 above it is warned
        let a = t.observe(
            &rule,
            &snap(vec![member("w1", 0, Some(10 * GIB)), member("w2", 0, Some(12 * GIB))]),
            &grants,
            at(0),
        );
        assert_eq!(
            a,
            vec![GuardAction::Warn {
                workload_id: "w2".into(),
                member: 0,
                used: 12 * GIB,
                granted: 10 * GIB,
                stop_at: at(30)
            }]
        );
        // within the grace nothing more happens
        assert!(t.observe(&rule, &snap(vec![member("w2", 0, Some(13 * GIB))]), &grants, at(20)).is_empty());
        assert_eq!(t.state("w2", 0).map(|s| s.used), Some(13 * GIB));
        // past it: stopped, with the figures
        let a = t.observe(&rule, &snap(vec![member("w2", 0, Some(13 * GIB))]), &grants, at(31));
        let [GuardAction::Stop { workload_id, used, granted, since, detail, .. }] = a.as_slice() else {
            panic!("expected one stop, got {a:?}")
        };
        assert_eq!((workload_id.as_str(), *used, *granted, *since), ("w2", 13 * GIB, 10 * GIB, at(0)));
        assert_eq!(
            detail,
            "member 0 used 13GiB of GPU memory on GPU-0, above its grant of 10GiB, for longer than the guard's grace of 30s"
        );
        // asked once only
        assert!(t.observe(&rule, &snap(vec![member("w2", 0, Some(13 * GIB))]), &grants, at(40)).is_empty());
    }

    #[test]
    fn back_within_the_grant_clears_the_warning() {
        let rule = GuardRule { grace: TimeDelta::seconds(30) };
        let grants = HashMap::from([("w".to_owned(), GIB)]);
        let mut t = GuardTracker::default();
        assert_eq!(t.observe(&rule, &snap(vec![member("w", 0, Some(2 * GIB))]), &grants, at(0)).len(), 1);
        assert!(t.observe(&rule, &snap(vec![member("w", 0, Some(GIB / 2))]), &grants, at(10)).is_empty());
        assert!(t.is_empty());
        // over again later: a new warning and a new grace, not a stop
        let a = t.observe(&rule, &snap(vec![member("w", 0, Some(2 * GIB))]), &grants, at(40));
        assert!(matches!(a.as_slice(), [GuardAction::Warn { stop_at, .. }] if *stop_at == at(70)), "{a:?}");
    }

    #[test]
    fn unguarded_and_unmeasured_members_are_not_judged() {
        let rule = GuardRule { grace: TimeDelta::seconds(5) };
        let grants = HashMap::from([("w".to_owned(), GIB)]);
        let mut t = GuardTracker::default();
        // a workload without a grant (a whole GPU, a `none` GPU) is never judged
        assert!(t.observe(&rule, &snap(vec![member("other", 0, Some(80 * GIB))]), &grants, at(0)).is_empty());
        assert_eq!(t.observe(&rule, &snap(vec![member("w", 1, Some(2 * GIB))]), &grants, at(0)).len(), 1);
        // a round without figures keeps where it stood, and the next one with figures may stop it
        assert!(t.observe(&rule, &snap(vec![member("w", 1, None)]), &grants, at(3)).is_empty());
        assert_eq!(t.of_workload("w").len(), 1);
        let a = t.observe(&rule, &snap(vec![member("w", 1, Some(2 * GIB))]), &grants, at(6));
        assert!(matches!(a.as_slice(), [GuardAction::Stop { member: 1, .. }]), "{a:?}");
        // a workload that stopped running is forgotten
        t.observe(&rule, &snap(vec![]), &grants, at(7));
        assert!(t.is_empty());
    }

    #[test]
    fn no_grace_stops_in_the_same_round() {
        let rule = GuardRule { grace: TimeDelta::zero() };
        let grants = HashMap::from([("w".to_owned(), GIB)]);
        let a = GuardTracker::default().observe(&rule, &snap(vec![member("w", 0, Some(2 * GIB))]), &grants, at(0));
        assert!(matches!(a.as_slice(), [GuardAction::Warn { .. }, GuardAction::Stop { .. }]), "{a:?}");
    }
}
