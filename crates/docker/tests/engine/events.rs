//! The event feed: gpuhub's containers only, in order, with exit codes.

use crate::common::*;
use futures::StreamExt;
use gpuhub_docker::ContainerStatus;
use gpuhub_driver::{EngineEvent, EventStream};

/// The next event about container `id` (a container without a run label is a run of its own, named by
/// its id), skipping other tests' events.
async fn next_for(events: &mut EventStream, id: &str, unwanted: &str) -> EngineEvent {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let ev = events.next().await.expect("the feed stays open").unwrap();
            let (of, _) = ev.run();
            assert_ne!(of, unwanted, "an unlabelled container's event came through: {ev:?}");
            if of == id {
                return ev;
            }
        }
    })
    .await
    .expect("the event arrives")
}

#[tokio::test]
async fn started_died_destroyed_for_labelled_containers() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let mut events = rt.events().await.unwrap();

    // An unlabelled container runs to its end first: none of its events may come through.
    let mut plain = spec(&unique("evplain"), "exit 1");
    plain.labels.clear();
    let (_, _) = run_to_end(&rt, &mut cleanup, &plain).await;
    let plain_id = rt.inspect(&plain.name).await.unwrap().id;
    rt.remove(&plain_id).await.unwrap();

    let s = spec(&unique("events"), "exit 3");
    let workload = s.name.clone();
    let id = run(&rt, &mut cleanup, &s).await;
    assert_eq!(
        next_for(&mut events, &id, &plain_id).await,
        EngineEvent::Started { run: id.clone(), workload: workload.clone(), member: 0 }
    );
    assert_eq!(
        next_for(&mut events, &id, &plain_id).await,
        EngineEvent::Exited { run: id.clone(), workload: workload.clone(), member: 0, exit_code: 3 }
    );
    rt.remove(&id).await.unwrap();
    assert_eq!(next_for(&mut events, &id, &plain_id).await, EngineEvent::Removed { run: id, workload, member: 0 });
}

#[tokio::test]
async fn events_between_subscribing_and_reading_are_kept() {
    let rt = runtime().await;
    let mut cleanup = Cleanup::default();
    let mut events = rt.events().await.unwrap();
    // Everything happens before the stream is first read.
    let id = run(&rt, &mut cleanup, &spec(&unique("evearly"), "exit 5")).await;
    output(&rt, &id).await;
    assert_eq!(rt.inspect(&id).await.unwrap().status, ContainerStatus::Exited(5));
    assert!(matches!(next_for(&mut events, &id, "").await, EngineEvent::Started { .. }));
    assert!(matches!(next_for(&mut events, &id, "").await, EngineEvent::Exited { exit_code: 5, .. }));
}
