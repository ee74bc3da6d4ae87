//! A workload's states: recorded in order, once each (a write that leaves the state as it was adds
//! nothing), through a preemption and a requeue, at the times the workload gives; gone with it.

use crate::common::t;
use crate::workloads::sample;
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::{Member, WorkloadState};
use gpuhub_store::Store;

both!(states_are_recorded_in_order_once_each);

async fn states_are_recorded_in_order_once_each(s: Store) {
    let mut w = sample("alice", "job", "h1");
    w.resources.gpus = 1;
    s.insert_workload(&w).await.unwrap();
    let mut written = vec![w.state()];
    let write = async |w: &gpuhub_core::workload::Workload, written: &mut Vec<WorkloadState>| {
        s.update_workload(w).await.unwrap();
        s.update_workload(w).await.unwrap(); // again: no new state
        written.push(w.state());
    };
    w.apply(Event::Placed { members: vec![Member::pending(0)] }, t(100)).unwrap();
    write(&w, &mut written).await;
    w.apply(Event::Submitted { run: "r1".into(), members: vec![], ports: Default::default() }, t(110)).unwrap();
    write(&w, &mut written).await;
    let why = gpuhub_core::stop::StopReason::Preempted {
        by: "b/x".into(),
        queue: "q".into(),
        at: t(500),
        detail: "d".into(),
    };
    w.apply(Event::StopRequested { reason: why }, t(500)).unwrap();
    write(&w, &mut written).await;
    w.apply(Event::RunStopped { code: Some(143) }, t(500)).unwrap();
    assert_eq!(w.state(), WorkloadState::Queued, "preempted work is queued again");
    write(&w, &mut written).await;
    w.apply(Event::Placed { members: vec![Member::pending(0)] }, t(900)).unwrap();
    write(&w, &mut written).await;

    written.dedup();
    let history = s.workload_history(&w.id).await.unwrap();
    let states: Vec<WorkloadState> = history.iter().map(|e| e.state).collect();
    assert_eq!(states, written, "{history:?}");
    assert!(states.iter().filter(|s| **s == WorkloadState::Queued).count() >= 2, "the requeue is in it: {states:?}");
    let times: Vec<_> = history.iter().map(|e| e.at).collect();
    assert!(times.windows(2).all(|p| p[0] <= p[1]), "in time order: {times:?}");
    assert_eq!(history.last().unwrap().at, t(900), "the last placement's time");

    s.delete_workload(&w.id, t(1000)).await.unwrap();
    assert!(s.workload_history(&w.id).await.unwrap().is_empty(), "gone with the workload");
}

both!(state_changes_cover_the_window);

/// `state_changes`: every state up to the window's end of the workloads alive in it, in order per
/// workload; one that ended before the window and one created after it are not there.
async fn state_changes_cover_the_window(s: Store) {
    let mut early = sample("alice", "early", "sc-early");
    early.created_at = t(0);
    early.queued_at = t(0);
    s.insert_workload(&early).await.unwrap();
    early = early.restore(WorkloadState::Failed);
    early.finished_at = Some(t(50));
    s.update_workload(&early).await.unwrap();
    let mut w = sample("bob", "w", "sc-w");
    w.created_at = t(100);
    w.queued_at = t(100);
    s.insert_workload(&w).await.unwrap();
    w = w.restore(WorkloadState::Running);
    w.started_at = Some(t(300));
    s.update_workload(&w).await.unwrap();
    let mut late = sample("carol", "late", "sc-late");
    late.created_at = t(5000);
    late.queued_at = t(5000);
    s.insert_workload(&late).await.unwrap();

    let got = s.state_changes(t(200), t(1000)).await.unwrap();
    let seen: Vec<(&str, WorkloadState, i64)> =
        got.iter().map(|c| (c.name.as_str(), c.state, c.at.timestamp_millis() - t(0).timestamp_millis())).collect();
    assert_eq!(seen, [("w", WorkloadState::Queued, 100), ("w", WorkloadState::Running, 300)], "{got:?}");
    assert_eq!(got[0].owner, "bob");
    assert!(s.state_changes(t(0), t(40)).await.unwrap().iter().any(|c| c.name == "early"), "early, in its time");
}
