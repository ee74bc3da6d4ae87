//! Team queues: seeding on first start only, create, compare-and-set edits, and deletion refused while
//! the queue holds work.

use crate::common::t;
use crate::workloads::sample;
use gpuhub_core::queue::{Limit, QueueDef};
use gpuhub_core::user::Role;
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::{Store, StoreError};

both!(seeded_once, edits, delete_refused_while_busy);

fn limited(name: &str, gpus: u64) -> QueueDef {
    QueueDef { user_limit: Some(Limit { gpu_milli: Some(gpus * 1000), ..Limit::default() }), ..QueueDef::open(name) }
}

async fn seeded_once(s: Store) {
    assert!(s.list_queues().await.unwrap().is_empty());
    assert!(s.seed_queues(&[limited("vision", 1), QueueDef::open("nlp")], t(0)).await.unwrap());
    let names: Vec<String> = s.list_queues().await.unwrap().into_iter().map(|q| q.name).collect();
    assert_eq!(names, ["nlp", "vision"]);
    // a second start with another file changes nothing: the database wins
    assert!(!s.seed_queues(&[limited("vision", 8), QueueDef::open("audio")], t(1)).await.unwrap());
    let queues = s.list_queues().await.unwrap();
    assert_eq!(queues.len(), 2);
    assert_eq!(s.get_queue("vision").await.unwrap(), Some(limited("vision", 1)));
    assert_eq!(s.get_queue("audio").await.unwrap(), None);
}

async fn edits(s: Store) {
    let q = limited("vision", 1);
    s.insert_queue(&q, t(0)).await.unwrap();
    let e = s.insert_queue(&q, t(1)).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("vision")), "{e:?}");
    let raised = limited("vision", 2);
    assert!(s.update_queue_if(&q, &raised, t(2)).await.unwrap());
    assert_eq!(s.get_queue("vision").await.unwrap(), Some(raised.clone()));
    // an edit based on a stale read does not overwrite the newer one
    assert!(!s.update_queue_if(&q, &limited("vision", 3), t(3)).await.unwrap());
    assert_eq!(s.get_queue("vision").await.unwrap(), Some(raised));
    let e = s.update_queue_if(&q, &limited("ghost", 1), t(4)).await.unwrap_err();
    assert!(matches!(&e, StoreError::NotFound { what: "queue", .. }), "{e:?}");
}

async fn delete_refused_while_busy(s: Store) {
    s.create_user("alice", "x", Role::User, t(0)).await.unwrap();
    s.insert_queue(&QueueDef::open("vision"), t(0)).await.unwrap();
    let mut w = sample("alice", "w", "w1");
    w.queue = "vision".into();
    s.insert_workload(&w).await.unwrap();
    let e = s.delete_queue("vision").await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("queued or running")), "{e:?}");
    w = w.restore(WorkloadState::Succeeded);
    s.update_workload(&w).await.unwrap();
    s.delete_queue("vision").await.unwrap();
    assert_eq!(s.get_queue("vision").await.unwrap(), None);
    let e = s.delete_queue("vision").await.unwrap_err();
    assert!(matches!(&e, StoreError::NotFound { what: "queue", .. }), "{e:?}");
}
