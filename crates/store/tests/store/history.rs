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
    let mut written = vec![w.state];
    let write = async |w: &gpuhub_core::workload::Workload, written: &mut Vec<WorkloadState>| {
        s.update_workload(w).await.unwrap();
        s.update_workload(w).await.unwrap(); // again: no new state
        written.push(w.state);
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
    assert_eq!(w.state, WorkloadState::Queued, "preempted work is queued again");
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
