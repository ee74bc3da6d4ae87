//! The workloads that are not over (pulling, queued, starting, running), kept between requests for
//! the pages and calls that read them all (the nodes' view, the team queues, the new-workload form's
//! queue list, the Nodes page's idle flags). Read whole from the store once, then kept up to date:
//! every workload the controller announces a change of (its change feed, sent after the store is
//! written) and every submission ([`ActiveWorkloads::submitted`], the one write of a workload made
//! outside the controller) is read again by id before the next snapshot is handed out. A gap in the
//! feed, or more changes than are worth reading one by one, reads the whole list again.

use chrono::{DateTime, Utc};
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_store::{Store, StoreError, WorkloadFilter};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::TryRecvError};

/// More changed workloads than this since the last snapshot: the whole list is read again instead.
const REREAD_MAX: usize = 128;

/// The states kept.
pub const ACTIVE: [WorkloadState; 4] =
    [WorkloadState::Pulling, WorkloadState::Queued, WorkloadState::Starting, WorkloadState::Running];

/// A snapshot: the active workloads, oldest first (as `Store::list_workloads` orders them). Snapshots
/// are shared and never change; a new one is made after a change (compare with [`Arc::ptr_eq`]).
pub type Snapshot = Arc<Vec<Arc<Workload>>>;

/// The kept list and how it follows changes.
#[derive(Debug, Default)]
pub struct ActiveWorkloads {
    kept: tokio::sync::Mutex<Option<Kept>>,
    /// Workloads submitted since the last snapshot.
    submitted: std::sync::Mutex<Vec<String>>,
}

#[derive(Debug)]
struct Kept {
    changes: broadcast::Receiver<String>,
    by_order: BTreeMap<(DateTime<Utc>, String), Arc<Workload>>,
    created: HashMap<String, DateTime<Utc>>,
    snapshot: Snapshot,
}

impl Kept {
    fn new(changes: broadcast::Receiver<String>, list: Vec<Workload>) -> Kept {
        let mut k = Kept { changes, by_order: BTreeMap::new(), created: HashMap::new(), snapshot: Arc::default() };
        for w in list {
            k.put(w);
        }
        k.snapshot = Arc::new(k.by_order.values().cloned().collect());
        k
    }

    fn remove(&mut self, id: &str) {
        if let Some(at) = self.created.remove(id) {
            self.by_order.remove(&(at, id.to_owned()));
        }
    }

    /// Keeps `w` as it is now: in the list while active, out of it once over.
    fn put(&mut self, w: Workload) {
        self.remove(&w.id);
        if ACTIVE.contains(&w.state()) {
            self.created.insert(w.id.clone(), w.created_at);
            self.by_order.insert((w.created_at, w.id.clone()), Arc::new(w));
        }
    }
}

impl ActiveWorkloads {
    /// `id` was just submitted (written to the store): the next snapshot holds it.
    pub fn submitted(&self, id: &str) {
        self.submitted.lock().unwrap().push(id.to_owned());
    }

    /// The active workloads as the store holds them after every change announced so far on
    /// `changes` (the controller's feed; subscribed anew, with `subscribe`, whenever the whole list is
    /// read) and every submission.
    pub async fn get(
        &self,
        store: &Store,
        subscribe: impl FnOnce() -> broadcast::Receiver<String>,
    ) -> Result<Snapshot, StoreError> {
        let mut kept = self.kept.lock().await;
        if let Some(k) = kept.as_mut() {
            let mut ids: BTreeSet<String> = self.submitted.lock().unwrap().drain(..).collect();
            let mut whole = false;
            while !whole {
                match k.changes.try_recv() {
                    Ok(id) => {
                        ids.insert(id);
                        whole = ids.len() > REREAD_MAX;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Lagged(_) | TryRecvError::Closed) => whole = true,
                }
            }
            if !whole {
                if ids.is_empty() {
                    return Ok(k.snapshot.clone());
                }
                for id in &ids {
                    match store.get_workload_by_id(id).await {
                        Ok(w) => k.put(w),
                        Err(StoreError::NotFound { .. }) => k.remove(id),
                        Err(e) => {
                            // the changes taken from the feed are not kept: read everything next time
                            *kept = None;
                            return Err(e);
                        }
                    }
                }
                k.snapshot = Arc::new(k.by_order.values().cloned().collect());
                return Ok(k.snapshot.clone());
            }
        }
        // subscribed before the store is read: nothing changed meanwhile is missed
        let changes = subscribe();
        self.submitted.lock().unwrap().clear();
        let list = store.list_workloads(&WorkloadFilter { owner: None, states: Some(ACTIVE.to_vec()) }).await;
        let k = Kept::new(changes, list?);
        let snapshot = k.snapshot.clone();
        *kept = Some(k);
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_leaves_the_list_once_over_and_keeps_its_place_while_active() {
        let (tx, rx) = broadcast::channel(4);
        drop(tx);
        let w = |id: &str, secs: i64, state: WorkloadState| {
            let at = DateTime::from_timestamp(secs, 0).unwrap();
            Workload::new(id, "alice", id, gpuhub_core::workload::WorkloadKind::Job, "i", at).restore(state)
        };
        let mut k = Kept::new(rx, vec![w("b", 2, WorkloadState::Queued), w("a", 1, WorkloadState::Running)]);
        let ids = |k: &Kept| k.by_order.values().map(|w| w.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&k), ["a", "b"]);
        assert_eq!(k.snapshot.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        k.put(w("a", 1, WorkloadState::Stopped));
        assert_eq!(ids(&k), ["b"]);
        k.put(w("c", 0, WorkloadState::Pulling));
        k.put(w("b", 2, WorkloadState::Running));
        assert_eq!(ids(&k), ["c", "b"]);
        assert_eq!(k.by_order.values().nth(1).map(|w| w.state()), Some(WorkloadState::Running));
        k.remove("c");
        assert_eq!(ids(&k), ["b"]);
    }
}
