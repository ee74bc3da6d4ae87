//! Workloads: round trip of every field, conflicts, filters and ordering, updates and compare-and-set.

use crate::common::t;
use chrono::Duration;
use gpuhub_core::workload::{Resources, Workload, WorkloadKind, WorkloadState};
use gpuhub_core::{Bytes, CpuMilli, Seconds};
use gpuhub_store::{Store, StoreError, WorkloadFilter};
use std::collections::BTreeMap;

both!(round_trip, conflicts, filters_and_order, updates, compare_and_set, racing_compare_and_set, delete);
both!(many);

/// A queued job with defaults and nothing optional set.
pub fn sample(owner: &str, name: &str, id: &str) -> Workload {
    Workload::new(id, owner, name, WorkloadKind::Job, "busybox:1.36", t(0))
}

/// A workload with every field set to something awkward (a field added to `Workload` is set here too,
/// or the round trip does not test it).
fn full() -> Workload {
    let image = "registry.example:5000/team/pytorch@sha256:0123abcd";
    let mut w = Workload::new("0b7c2d1e-full", "alice", "train-llm", WorkloadKind::Workspace, image, t(1))
        .restore(WorkloadState::Running);
    w.command = vec![
        "bash".into(),
        "-c".into(),
        "echo \"quoted\" 'single' $HOME; printf '%s\\n' ünïcode 🚀".into(),
        String::new(),
    ];
    w.env = BTreeMap::from([
        ("CUDA_VISIBLE_DEVICES".into(), "0,1".into()),
        ("EMPTY".into(), String::new()),
        ("JSON".into(), "{\"a\": [1, 2]}".into()),
        ("MULTI".into(), "line1\nline2\ttab".into()),
    ]);
    // memory above i64::MAX must survive the signed BIGINT column
    w.resources = Resources { cpu_milli: CpuMilli(1500), memory: Bytes(u64::MAX - 7), gpus: 8, ..Resources::default() };
    w.priority = -42;
    w.queue = "vision-team".into();
    w.constraint = Some(r#"gpu.model in ["H100","H200"] && node.labels.rack != "b" && gpu.memory >= 80GiB"#.into());
    w.runtime_limit = Some(Seconds(u64::MAX - 3));
    w.disk = Some(gpuhub_core::Bytes(50 << 30));
    w.apps = vec![gpuhub_core::workload::AppSpec {
        name: "lab".into(),
        port: 8888,
        command: vec!["jupyter".into(), "--ServerApp.base_url={base_url}".into()],
    }];
    w.datasets = vec![gpuhub_core::dataset::DatasetMount {
        name: "imagenet".into(),
        path: "/srv/data/imagenet".into(),
        nfs: Some("10.0.0.5".into()),
        s3: None,
        read_only: true,
    }];
    w.teams = vec![gpuhub_core::team::TeamMount { queue: "vision".into(), path: "/d/teams/vision".into(), gid: 60001 }];
    w.gpus = vec!["GPU-0a1b2c3d-0000-1111-2222-333344445555".into(), "GPU-ffffffff-0000-1111-2222-333344445555".into()];
    w.size = 3;
    w.run_id = Some("4f1e9c0b5a7d".into());
    w.members = vec![
        gpuhub_core::workload::Member {
            node: Some("node-1".into()),
            state: gpuhub_core::workload::MemberPhase::Exited,
            gpus: vec!["GPU-0a1b2c3d-0000-1111-2222-333344445555".into()],
            exit_code: Some(-137),
            engine_id: Some("4f1e9c0b5a7d.0".into()),
            ports: [("lab".to_owned(), 20001)].into(),
            index: 0,
        },
        gpuhub_core::workload::Member::pending(2),
    ];
    w.exit_code = Some(-137);
    w.message = Some("started on node a100-01 (2 GPUs)".into());
    w.interruption = Some(gpuhub_core::stop::StopReason::User { by: "root-ish \"x\"".into(), at: t(3) });
    w.queued_at = t(2);
    w.started_at = Some(t(999));
    w.finished_at = Some(t(86_400_123));
    w.held_since = Some(t(998));
    w.held_until = Some(t(86_400_123));
    w.service = Some(gpuhub_core::service::Service {
        spec: gpuhub_core::service::ServiceSpec {
            port: 8080,
            ready: Some(gpuhub_core::service::ReadyCheck::Command(vec!["test".into(), "-f".into(), "/ready".into()])),
            access: gpuhub_core::service::ServiceAccess::Users,
        },
        restarts: 7,
        failures: 5,
        restart_at: Some(t(86_400_133)),
        crash_loop: true,
        rollout: None,
        update: None,
        engine_restarts: 3,
    });
    w
}

async fn round_trip(s: Store) {
    let f = full();
    s.insert_workload(&f).await.unwrap();
    assert_eq!(s.get_workload("alice", "train-llm").await.unwrap(), f);
    assert_eq!(s.get_workload_by_id(&f.id).await.unwrap(), f);

    let mut minimal = sample("bob", "tiny", "tiny-1");
    minimal.priority = i32::MAX;
    // a share of one GPU, with a memory amount above i64::MAX
    minimal.resources = Resources {
        cpu_milli: CpuMilli(1),
        memory: Bytes(6 << 20),
        gpus: 0,
        gpu_milli: 999,
        gpu_memory: Some(Bytes(u64::MAX - 1)),
    };
    s.insert_workload(&minimal).await.unwrap();
    assert_eq!(s.get_workload_by_id("tiny-1").await.unwrap(), minimal);
    assert_eq!(s.list_workloads(&WorkloadFilter::default()).await.unwrap(), vec![minimal.clone(), f]);

    // timestamps keep milliseconds and drop what is finer
    let mut fine = sample("bob", "fine", "fine-1");
    fine.created_at = t(7) + Duration::microseconds(999);
    fine.queued_at = t(8) + Duration::nanoseconds(1);
    fine.started_at = Some(t(9) + Duration::microseconds(500));
    s.insert_workload(&fine).await.unwrap();
    let got = s.get_workload_by_id("fine-1").await.unwrap();
    assert_eq!((got.created_at, got.queued_at, got.started_at), (t(7), t(8), Some(t(9))));

    for e in [s.get_workload("alice", "nope").await.unwrap_err(), s.get_workload_by_id("nope").await.unwrap_err()] {
        assert!(matches!(e, StoreError::NotFound { what: "workload", .. }), "{e:?}");
    }
}

async fn conflicts(s: Store) {
    s.insert_workload(&sample("alice", "train", "id-1")).await.unwrap();
    let e = s.insert_workload(&sample("alice", "train", "id-2")).await.unwrap_err();
    assert_eq!(e.to_string(), "workload train of alice already exists");
    // the same name for another owner is fine; the same id is not
    s.insert_workload(&sample("bob", "train", "id-3")).await.unwrap();
    let e = s.insert_workload(&sample("carol", "other", "id-1")).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    assert_eq!(e.to_string(), "workload id id-1 already exists");
    assert_eq!(s.list_workloads(&WorkloadFilter::default()).await.unwrap().len(), 2);
}

fn ids(ws: &[Workload]) -> Vec<&str> {
    ws.iter().map(|w| w.id.as_str()).collect()
}

async fn filters_and_order(s: Store) {
    use WorkloadState::*;
    // inserted out of order; "b" and "a" share a creation time, so the id breaks the tie
    let rows = [
        ("w-c", "alice", 30, Running),
        ("w-b", "bob", 10, Queued),
        ("w-a", "alice", 10, Queued),
        ("w-d", "bob", 40, Succeeded),
        ("w-e", "alice", 20, Failed),
    ];
    for (id, owner, at, state) in rows {
        let mut w = sample(owner, id, id);
        w.created_at = t(at);
        w = w.restore(state);
        s.insert_workload(&w).await.unwrap();
    }
    let list = |owner: Option<&str>, states: Option<Vec<WorkloadState>>| {
        let s = s.clone();
        let filter = WorkloadFilter { owner: owner.map(str::to_owned), states };
        async move { s.list_workloads(&filter).await.unwrap() }
    };
    assert_eq!(ids(&list(None, None).await), ["w-a", "w-b", "w-e", "w-c", "w-d"]);
    assert_eq!(ids(&list(Some("alice"), None).await), ["w-a", "w-e", "w-c"]);
    assert_eq!(ids(&list(None, Some(vec![Queued])).await), ["w-a", "w-b"]);
    assert_eq!(ids(&list(None, Some(vec![Running, Queued, Lost])).await), ["w-a", "w-b", "w-c"]);
    assert_eq!(ids(&list(Some("bob"), Some(vec![Queued, Succeeded])).await), ["w-b", "w-d"]);
    assert_eq!(ids(&list(Some("alice"), Some(vec![Succeeded])).await), Vec::<&str>::new());
    assert!(list(None, Some(vec![])).await.is_empty());
    assert!(list(Some("nobody"), None).await.is_empty());
    let all = list(Some("alice"), Some(WorkloadState::ALL.to_vec())).await;
    assert_eq!(ids(&all), ["w-a", "w-e", "w-c"]);
    assert!(all.iter().all(|w| w.owner == "alice"));
}

/// `w` moved to running with everything the controller records.
fn started(mut w: Workload) -> Workload {
    w = w.restore(WorkloadState::Running);
    w.gpus = vec!["GPU-1".into(), "GPU-2".into()];
    w.run_id = Some("c0ffee".into());
    w.members = vec![gpuhub_core::workload::Member::pending(0)];
    w.message = Some("running".into());
    w.priority = 7;
    w.queued_at = t(50);
    w.started_at = Some(t(60));
    w
}

async fn updates(s: Store) {
    let w = sample("alice", "job", "id-1");
    s.insert_workload(&w).await.unwrap();
    let run = started(w.clone());
    s.update_workload(&run).await.unwrap();
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), run);

    // ending clears what it held and records the outcome
    let mut done = run.clone();
    done = done.restore(WorkloadState::Failed);
    done.gpus.clear();
    done.exit_code = Some(3);
    done.message = None;
    done.finished_at = Some(t(70));
    s.update_workload(&done).await.unwrap();
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), done);

    // and back to the queue, with the optional fields cleared again
    let mut again = done.clone();
    again = again.restore(WorkloadState::Queued);
    again.run_id = None;
    again.exit_code = None;
    again.started_at = None;
    again.finished_at = None;
    s.update_workload(&again).await.unwrap();
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), again);

    // the spec is not rewritten by an update
    let mut renamed = again.clone();
    renamed.name = "other".into();
    renamed.image = "other:latest".into();
    renamed.command = vec!["x".into()];
    s.update_workload(&renamed).await.unwrap();
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), again);

    let e = s.update_workload(&sample("alice", "ghost", "ghost")).await.unwrap_err();
    assert!(matches!(&e, StoreError::NotFound { what: "workload", key } if key == "ghost"), "{e:?}");
}

async fn compare_and_set(s: Store) {
    let w = sample("alice", "job", "id-1");
    s.insert_workload(&w).await.unwrap();
    let mut starting = w.clone();
    starting = starting.restore(WorkloadState::Starting);
    starting.gpus = vec!["GPU-1".into()];

    // the stored state is queued, not running: nothing is written
    assert!(!s.update_workload_if(&starting, WorkloadState::Running).await.unwrap());
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), w);
    assert!(s.update_workload_if(&starting, WorkloadState::Queued).await.unwrap());
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), starting);
    // the same transition a second time fails: the state moved on
    assert!(!s.update_workload_if(&starting, WorkloadState::Queued).await.unwrap());
    let run = started(starting.clone());
    assert!(s.update_workload_if(&run, WorkloadState::Starting).await.unwrap());
    assert_eq!(s.get_workload_by_id("id-1").await.unwrap(), run);
    // a workload that is gone is not an error, just no write
    assert!(!s.update_workload_if(&sample("a", "b", "ghost"), WorkloadState::Queued).await.unwrap());
}

async fn racing_compare_and_set(s: Store) {
    for round in 0..5 {
        let id = format!("race-{round}");
        s.insert_workload(&sample("alice", &id, &id)).await.unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (s, id) = (s.clone(), id.clone());
                tokio::spawn(async move {
                    let mut w = s.get_workload_by_id(&id).await.unwrap();
                    w = w.restore(WorkloadState::Starting);
                    w.message = Some(format!("claimed by {i}"));
                    s.update_workload_if(&w, WorkloadState::Queued).await.unwrap().then_some(i)
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "exactly one claim wins: {winners:?}");
        let stored = s.get_workload_by_id(&id).await.unwrap();
        assert_eq!(stored.message, Some(format!("claimed by {}", winners[0])));
    }
}

async fn delete(s: Store) {
    s.insert_workload(&sample("alice", "a", "id-1")).await.unwrap();
    s.insert_workload(&sample("alice", "b", "id-2")).await.unwrap();
    s.delete_workload("id-1", t(5)).await.unwrap();
    let e = s.delete_workload("id-1", t(5)).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { what: "workload", .. }), "{e:?}");
    assert_eq!(ids(&s.list_workloads(&WorkloadFilter::default()).await.unwrap()), ["id-2"]);
    // the name is free again
    s.insert_workload(&sample("alice", "a", "id-3")).await.unwrap();
}

async fn many(s: Store) {
    const N: i64 = 3000;
    let states = WorkloadState::ALL;
    for i in 0..N {
        let mut w = full();
        w.id = format!("id-{i:05}");
        w.name = format!("w-{i}");
        w.owner = ["alice", "bob", "carol"][i as usize % 3].into();
        w = w.restore(states[i as usize % states.len()]);
        // newest first in insertion order, so the result order comes from the query
        w.created_at = t(N - i);
        s.insert_workload(&w).await.unwrap();
    }
    let started = std::time::Instant::now();
    let all = s.list_workloads(&WorkloadFilter::default()).await.unwrap();
    eprintln!("{:?}: listed {} workloads in {:?}", s.backend(), all.len(), started.elapsed());
    assert_eq!(all.len(), N as usize);
    assert!(all.windows(2).all(|p| p[0].created_at < p[1].created_at));
    assert_eq!(all[0].id, format!("id-{:05}", N - 1));
    assert_eq!(all[0].env, full().env);
    let queued_of_bob = s
        .list_workloads(&WorkloadFilter { owner: Some("bob".into()), states: Some(vec![WorkloadState::Queued]) })
        .await
        .unwrap();
    let expected = (0..N).filter(|i| i % 3 == 1 && states[*i as usize % states.len()] == WorkloadState::Queued).count();
    assert_eq!(queued_of_bob.len(), expected);
}

both!(interruption);

/// The typed reason of an interruption is stored and read back as written, and cleared with `None`.
async fn interruption(s: Store) {
    use gpuhub_core::stop::StopReason;
    s.create_user("alice", "x", gpuhub_core::user::Role::User, t(0)).await.unwrap();
    let mut w = sample("alice", "w", "w1");
    s.insert_workload(&w).await.unwrap();
    assert_eq!(s.get_workload_by_id("w1").await.unwrap().interruption, None);
    let why =
        StopReason::Preempted { by: "bob/big".into(), queue: "vision".into(), at: t(5), detail: "reclaim".into() };
    w.interruption = Some(why.clone());
    assert!(s.update_workload_if(&w, WorkloadState::Queued).await.unwrap());
    assert_eq!(s.get_workload_by_id("w1").await.unwrap().interruption, Some(why));
    w.interruption = None;
    s.update_workload(&w).await.unwrap();
    assert_eq!(s.get_workload_by_id("w1").await.unwrap().interruption, None);
}
