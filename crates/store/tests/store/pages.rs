//! Keyset pages of workloads with filters, and the per-owner caps checked with the insert.

use crate::common::t;
use crate::workloads::sample;
use gpuhub_core::workload::{Workload, WorkloadKind, WorkloadState};
use gpuhub_store::{CapReached, OwnerCaps, OwnerCounts, Store, WorkloadCursor, WorkloadFilter, WorkloadQuery};

both!(pages_follow_cursors, caps_refuse_and_store_nothing, racing_inserts_respect_caps);

/// 40 workloads of three owners, kinds, queues and states; many share a creation time, so the id must
/// break ties; inserted newest first so that order comes from the query.
async fn fill(s: &Store) -> Vec<Workload> {
    let states = WorkloadState::ALL;
    let mut all = Vec::new();
    for i in (0..40).rev() {
        let mut w = sample(["alice", "bob", "carol"][i % 3], &format!("w{i}"), &format!("id-{:02}", (i * 7) % 40));
        w.created_at = t((i / 4) as i64);
        w = w.restore(states[i % states.len()]);
        w.kind = if i % 5 == 0 { WorkloadKind::Workspace } else { WorkloadKind::Job };
        w.queue = if i % 2 == 0 { "vision".into() } else { String::new() };
        s.insert_workload(&w).await.unwrap();
        all.push(w);
    }
    all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    all
}

/// Which workloads a filter must keep.
type Keep = Box<dyn Fn(&Workload) -> bool + Send + Sync>;

/// Every page of `query`, following the cursors; asserts that only the last page has none.
async fn every_page(s: &Store, mut query: WorkloadQuery) -> Vec<Workload> {
    let mut out = Vec::new();
    for _ in 0..100 {
        let page = s.list_workloads_page(&query).await.unwrap();
        assert!(page.workloads.len() <= query.limit as usize);
        out.extend(page.workloads.iter().cloned());
        match page.next {
            Some(next) => {
                assert_eq!(page.workloads.len(), query.limit as usize, "only a full page has a next one");
                assert_eq!(Some(&next), page.workloads.last().map(WorkloadCursor::after).as_ref());
                query.after = Some(next);
            }
            None => return out,
        }
    }
    panic!("the cursors never end");
}

/// Every page of `query`, following the cursors, whatever their sizes.
async fn every_page_of_any_size(s: &Store, mut query: WorkloadQuery) -> Vec<Workload> {
    let mut out = Vec::new();
    loop {
        let page = s.list_workloads_page(&query).await.unwrap();
        assert!(!page.workloads.is_empty() || page.next.is_none());
        out.extend(page.workloads);
        match page.next {
            Some(next) => query.after = Some(next),
            None => return out,
        }
    }
}

async fn pages_follow_cursors(s: Store) {
    use WorkloadState::*;
    let all = fill(&s).await;
    let ids = |ws: &[Workload]| ws.iter().map(|w| w.id.clone()).collect::<Vec<_>>();
    let q = |limit: u32| WorkloadQuery { limit, ..WorkloadQuery::default() };
    // every page size gives the whole list once, in order, the same as the unpaged list
    let unpaged = s.list_workloads(&WorkloadFilter::default()).await.unwrap();
    assert_eq!(ids(&unpaged), ids(&all));
    for limit in [1, 3, 7, 40, 41, 1000] {
        assert_eq!(ids(&every_page(&s, q(limit)).await), ids(&all), "limit {limit}");
    }
    // a byte budget cuts pages short (each still holds one workload) and the cursors carry on
    let small = WorkloadQuery { max_bytes: Some(1), ..q(10) };
    let page = s.list_workloads_page(&small).await.unwrap();
    assert_eq!((page.workloads.len(), page.next), (1, Some(WorkloadCursor::after(&all[0]))));
    assert_eq!(ids(&every_page_of_any_size(&s, small).await), ids(&all));
    let roomy = WorkloadQuery { max_bytes: Some(1 << 20), ..q(10) };
    assert_eq!(s.list_workloads_page(&roomy).await.unwrap().workloads.len(), 10);
    // a page that ends exactly at the last row has no next page
    let page = s.list_workloads_page(&q(40)).await.unwrap();
    assert_eq!((page.workloads.len(), page.next), (40, None));
    let page = s.list_workloads_page(&q(39)).await.unwrap();
    assert_eq!(page.next, Some(WorkloadCursor::after(&all[38])));
    // a cursor past the end gives an empty last page; limit 0 is read as 1
    let end = WorkloadQuery { after: Some(WorkloadCursor::after(&all[39])), ..q(10) };
    assert_eq!(s.list_workloads_page(&end).await.unwrap(), Default::default());
    assert_eq!(s.list_workloads_page(&q(0)).await.unwrap().workloads.len(), 1);
    // filters, alone and together, paged
    let cases: Vec<(WorkloadQuery, Keep)> = vec![
        (WorkloadQuery { owner: Some("bob".into()), ..q(4) }, Box::new(|w| w.owner == "bob")),
        (WorkloadQuery { states: Some(vec![Queued, Lost]), ..q(2) }, Box::new(|w| matches!(w.state(), Queued | Lost))),
        (
            WorkloadQuery { kind: Some(WorkloadKind::Workspace), ..q(3) },
            Box::new(|w| w.kind == WorkloadKind::Workspace),
        ),
        (WorkloadQuery { queue: Some(String::new()), ..q(5) }, Box::new(|w| w.queue.is_empty())),
        (
            WorkloadQuery {
                owner: Some("alice".into()),
                queue: Some("vision".into()),
                kind: Some(WorkloadKind::Job),
                states: Some(WorkloadState::ALL.to_vec()),
                ..q(2)
            },
            Box::new(|w| w.owner == "alice" && w.queue == "vision" && w.kind == WorkloadKind::Job),
        ),
    ];
    for (query, keep) in cases {
        let want: Vec<Workload> = all.iter().filter(|w| keep(w)).cloned().collect();
        assert!(!want.is_empty() && want.len() < all.len(), "{query:?} must filter");
        assert_eq!(ids(&every_page(&s, query.clone()).await), ids(&want), "{query:?}");
    }
    let none = WorkloadQuery { states: Some(vec![]), ..q(10) };
    assert_eq!(s.list_workloads_page(&none).await.unwrap(), Default::default());
    let nobody = WorkloadQuery { owner: Some("nobody".into()), ..q(10) };
    assert_eq!(s.list_workloads_page(&nobody).await.unwrap(), Default::default());
}

async fn caps_refuse_and_store_nothing(s: Store) {
    let caps = OwnerCaps { total: 3, queued: 2 };
    let w = |name: &str| sample("alice", name, &format!("id-{name}"));
    assert_eq!(s.insert_workload_capped(&w("a"), caps).await.unwrap(), None);
    assert_eq!(s.insert_workload_capped(&w("b"), caps).await.unwrap(), None);
    // the queued cap: a third queued workload is refused and not stored…
    assert_eq!(s.insert_workload_capped(&w("c"), caps).await.unwrap(), Some(CapReached::Queued { count: 2 }));
    assert_eq!(s.count_owner_workloads("alice").await.unwrap(), OwnerCounts { total: 2, queued: 2 });
    assert!(s.get_workload("alice", "c").await.is_err());
    // …another owner is not affected, and one that has ended does not count as queued
    assert_eq!(s.insert_workload_capped(&sample("bob", "c", "id-bob-c"), caps).await.unwrap(), None);
    let mut a = s.get_workload("alice", "a").await.unwrap();
    a = a.restore(WorkloadState::Succeeded);
    s.update_workload(&a).await.unwrap();
    assert_eq!(s.insert_workload_capped(&w("c"), caps).await.unwrap(), None);
    // the total cap counts every state
    assert_eq!(s.count_owner_workloads("alice").await.unwrap(), OwnerCounts { total: 3, queued: 2 });
    let mut d = w("d");
    d = d.restore(WorkloadState::Succeeded);
    assert_eq!(s.insert_workload_capped(&d, caps).await.unwrap(), Some(CapReached::Total { count: 3 }));
    // a taken name is still a conflict, not a cap
    let big = OwnerCaps { total: 100, queued: 100 };
    assert!(matches!(s.insert_workload_capped(&w("a"), big).await, Err(gpuhub_store::StoreError::Conflict(_))));
    assert_eq!(s.count_owner_workloads("nobody").await.unwrap(), OwnerCounts::default());
}

async fn racing_inserts_respect_caps(s: Store) {
    let caps = OwnerCaps { total: 5, queued: 5 };
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let w = sample("alice", &format!("r{i}"), &format!("id-r{i}"));
                s.insert_workload_capped(&w, caps).await.unwrap()
            })
        })
        .collect();
    let mut stored = 0;
    for t in tasks {
        if t.await.unwrap().is_none() {
            stored += 1;
        }
    }
    assert_eq!(stored, 5);
    assert_eq!(s.count_owner_workloads("alice").await.unwrap(), OwnerCounts { total: 5, queued: 5 });
}
