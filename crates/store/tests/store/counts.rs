//! The active workloads counted per queue and state, with the oldest of each group; the queues of
//! those holding resources.

use crate::common::t;
use crate::workloads::sample;
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::{ActiveCount, Store};

both!(active_workloads_are_counted_per_queue_and_state);

async fn active_workloads_are_counted_per_queue_and_state(s: Store) {
    assert_eq!(s.count_active_workloads().await.unwrap(), vec![]);
    // (queue, state, queued_at offset): ended ones are never counted
    let rows = [
        ("", WorkloadState::Queued, 30),
        ("", WorkloadState::Queued, 10),
        ("", WorkloadState::Running, 5),
        ("vision", WorkloadState::Queued, 20),
        ("vision", WorkloadState::Starting, 7),
        ("vision", WorkloadState::Running, 3),
        ("vision", WorkloadState::Running, 1),
        ("vision", WorkloadState::Succeeded, 0),
        ("", WorkloadState::Failed, 0),
        ("", WorkloadState::Lost, 0),
    ];
    for (i, (queue, state, at)) in rows.into_iter().enumerate() {
        let mut w = sample("alice", &format!("w{i}"), &format!("id-{i}"));
        w.queue = queue.into();
        w = w.restore(state);
        w.queued_at = t(at);
        s.insert_workload(&w).await.unwrap();
    }
    let count =
        |queue: &str, state, count, at| ActiveCount { queue: queue.into(), state, count, oldest_queued_at: t(at) };
    let mut got = s.count_active_workloads().await.unwrap();
    got.sort_by(|a, b| (&a.queue, a.state.as_str()).cmp(&(&b.queue, b.state.as_str())));
    assert_eq!(
        got,
        vec![
            count("", WorkloadState::Queued, 2, 10),
            count("", WorkloadState::Running, 1, 5),
            count("vision", WorkloadState::Queued, 1, 20),
            count("vision", WorkloadState::Running, 2, 1),
            count("vision", WorkloadState::Starting, 1, 7),
        ]
    );
    assert_eq!(
        s.list_holding_queues().await.unwrap(),
        vec![
            ("alice".to_owned(), "w2".to_owned(), String::new()),
            ("alice".into(), "w4".into(), "vision".into()),
            ("alice".into(), "w5".into(), "vision".into()),
            ("alice".into(), "w6".into(), "vision".into()),
        ]
    );
    // members of the active ones: seven workloads of one member each, and a gang of three of bob's
    assert_eq!(s.count_active_members(None).await.unwrap(), 7);
    let mut gang = sample("bob", "gang", "id-gang");
    gang.size = 3;
    s.insert_workload(&gang).await.unwrap();
    assert_eq!(s.count_active_members(None).await.unwrap(), 10);
    assert_eq!(s.count_active_members(Some("bob")).await.unwrap(), 3);
    assert_eq!(s.count_active_members(Some("carol")).await.unwrap(), 0);
    // alice holds w2, w4, w5 and w6 (starting or running); bob's gang is queued
    assert!(s.holds_other("alice", "id-2").await.unwrap());
    assert!(!s.holds_other("bob", "id-gang").await.unwrap());
    assert!(!s.holds_other("carol", "id-0").await.unwrap());
    let mut only = sample("dave", "only", "id-only");
    only = only.restore(WorkloadState::Running);
    s.insert_workload(&only).await.unwrap();
    assert!(!s.holds_other("dave", "id-only").await.unwrap(), "its own run is not another");
    assert!(s.holds_other("dave", "id-next").await.unwrap());
}
