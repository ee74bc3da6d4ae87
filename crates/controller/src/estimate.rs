//! Estimated starts the scheduler does not give: a workload held by its queue's limit (or its user's
//! limit in the queue) can start once enough of what the queue holds has ended, which is known when
//! those runs have run-time limits.

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::workload::Workload;
use gpuhub_sched::{QueueSpec, Quota};

fn quota(w: &Workload) -> Quota {
    Quota::of_request(&crate::scheduling::request(w), w.size.max(1))
}

/// When a run ends at the latest (its start plus its run-time limit); `None` without a limit.
fn end(w: &Workload) -> Option<DateTime<Utc>> {
    let limit = TimeDelta::try_seconds(i64::try_from(w.runtime_limit?.0).ok()?)?;
    w.started_at?.checked_add_signed(limit)
}

/// The earliest time `w` fits within the limits of `spec` as the runs in `active` end (each at its
/// run-time limit): `None` when it fits already (something else holds it), or when a run that must
/// end first has no run-time limit.
pub fn queue_limit_start(
    w: &Workload,
    active: &[Workload],
    spec: &QueueSpec,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let want = quota(w);
    let mut holders: Vec<&Workload> =
        active.iter().filter(|a| a.queue == w.queue && a.state().holds_resources() && a.id != w.id).collect();
    let (mut queue, mut user) = (Quota::default(), Quota::default());
    for h in &holders {
        queue = queue.plus(quota(h));
        if h.owner == w.owner {
            user = user.plus(quota(h));
        }
    }
    let user_max = spec.user_limit.unwrap_or(Quota::UNLIMITED);
    let fits = |queue: Quota, user: Quota| queue.plus(want).within(spec.max()) && user.plus(want).within(user_max);
    if fits(queue, user) {
        return None;
    }
    // runs without a limit sort last: reaching one means no estimate
    holders.sort_by_key(|h| (end(h).is_none(), end(h)));
    for h in holders {
        let at = end(h)?;
        queue = queue.minus(quota(h));
        if h.owner == w.owner {
            user = user.minus(quota(h));
        }
        if fits(queue, user) {
            return Some(at.max(now));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::Seconds;
    use gpuhub_core::workload::{Resources, WorkloadState};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn w(id: &str, owner: &str, state: WorkloadState, limit: Option<u64>) -> Workload {
        let mut w = crate::testutil::job(id, at(0)).restore(state);
        w.owner = owner.into();
        w.resources = Resources { gpus: 1, ..Resources::default() };
        w.queue = "q".into();
        w.runtime_limit = limit.map(Seconds);
        w.started_at = state.holds_resources().then(|| at(100));
        w
    }

    #[test]
    fn the_first_end_that_frees_enough() {
        let spec =
            QueueSpec { user_limit: Some(Quota { gpu_milli: 2000, ..Quota::UNLIMITED }), ..QueueSpec::open("q") };
        let run = WorkloadState::Running;
        let active =
            vec![w("a", "alice", run, Some(600)), w("b", "alice", run, Some(60)), w("c", "bob", run, Some(10))];
        let next = w("n", "alice", WorkloadState::Queued, None);
        // alice holds 2 GPUs, her limit is 2: the earlier of her runs' ends frees one (bob's does not count)
        assert_eq!(queue_limit_start(&next, &active, &spec, at(120)), Some(at(160)));
        // already past that end: now
        assert_eq!(queue_limit_start(&next, &active, &spec, at(500)), Some(at(500)));
        // a run without a limit must end first: no estimate
        let open = vec![w("a", "alice", run, None), w("b", "alice", run, None)];
        assert_eq!(queue_limit_start(&next, &open, &spec, at(120)), None);
        // it fits the limits: not held by them, no estimate from here
        assert_eq!(queue_limit_start(&next, &active[..1], &spec, at(120)), None);
    }
}
