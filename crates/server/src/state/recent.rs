//! The holdings of the last [`KEEP`] (what usage reports and the admin dashboard add up), kept between
//! requests: read whole once, then followed through the controller's change feed. A holding is written
//! only with its workload's state (`Store::update_workload` and its kin, each followed by the
//! controller's announcement) or closed when the workload is deleted (announced too), so each announced
//! workload's holdings are read again by id before the next answer. A gap in the feed, more changes
//! than are worth reading one by one, or a day since the whole was read (what aged out is dropped) reads
//! the whole again. A window starting before what is kept is the store's to answer.
//!
//! The state changes the admin dashboard reads (`Store::state_changes`) are kept the same way
//! ([`RecentStates`], for workloads alive in the last [`STATES_KEEP`]), each announced or submitted
//! workload's read again by id (the workload and its history).

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::usage::Holding;
use gpuhub_store::{StateChange, Store, StoreError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::TryRecvError};

/// How far back holdings are kept: a month's usage page (30 days) and the dashboard's week, with room.
pub const KEEP: TimeDelta = TimeDelta::days(35);

/// How long the whole read serves before it is read again.
const RELOAD: TimeDelta = TimeDelta::days(1);

/// More changed workloads than this since the last answer: the whole is read again instead.
const REREAD_MAX: usize = 128;

/// The kept holdings and how they follow changes.
#[derive(Debug, Default)]
pub struct RecentHoldings {
    kept: tokio::sync::Mutex<Option<Kept>>,
}

#[derive(Debug)]
struct Kept {
    changes: broadcast::Receiver<String>,
    /// Every holding that had not ended by then is kept.
    from: DateTime<Utc>,
    /// When the whole was read.
    read_at: DateTime<Utc>,
    by_workload: HashMap<String, Vec<Holding>>,
}

impl Kept {
    fn put(&mut self, id: &str, holdings: Vec<Holding>) {
        let from = self.from;
        let kept: Vec<Holding> = holdings.into_iter().filter(|h| h.until.is_none_or(|u| u > from)).collect();
        if kept.is_empty() {
            self.by_workload.remove(id);
        } else {
            self.by_workload.insert(id.to_owned(), kept);
        }
    }

    /// What `Store::holdings` answers for the window, oldest first.
    fn within(&self, from: DateTime<Utc>, to: DateTime<Utc>, owner: Option<&str>) -> Vec<Holding> {
        let mut out: Vec<Holding> = self
            .by_workload
            .values()
            .flatten()
            .filter(|h| h.since < to && h.until.is_none_or(|u| u > from) && owner.is_none_or(|o| h.owner == o))
            .cloned()
            .collect();
        out.sort_by(|a, b| (a.since, &a.workload_id).cmp(&(b.since, &b.workload_id)));
        out
    }
}

impl RecentHoldings {
    /// The holdings overlapping `from`–`to` (of `owner` only, when given), oldest first, as
    /// `Store::holdings` gives them after every change announced so far on the controller's feed
    /// (`subscribe` subscribes anew whenever the whole is read); `None` where `from` is before what is
    /// kept.
    pub async fn holdings(
        &self,
        store: &Store,
        subscribe: impl FnOnce() -> broadcast::Receiver<String>,
        now: DateTime<Utc>,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
        owner: Option<&str>,
    ) -> Result<Option<Vec<Holding>>, StoreError> {
        let mut kept = self.kept.lock().await;
        let mut whole = kept.as_ref().is_none_or(|k| now - k.read_at > RELOAD || now < k.read_at);
        if let Some(k) = kept.as_mut().filter(|_| !whole) {
            let mut ids = BTreeSet::new();
            whole = drain(&mut k.changes, &mut ids);
            if !whole {
                for id in &ids {
                    match store.holdings_of(id).await {
                        Ok(h) => k.put(id, h),
                        Err(e) => {
                            // the changes taken from the feed are not kept: read the whole next time
                            *kept = None;
                            return Err(e);
                        }
                    }
                }
            }
        }
        if whole {
            // subscribed before the store is read: nothing changed meanwhile is missed
            let changes = subscribe();
            let since = now - KEEP;
            let all = store.holdings(since, now + TimeDelta::days(36_500), None).await?;
            let mut k = Kept { changes, from: since, read_at: now, by_workload: HashMap::new() };
            let mut by: HashMap<String, Vec<Holding>> = HashMap::new();
            for h in all {
                by.entry(h.workload_id.clone()).or_default().push(h);
            }
            for (id, h) in by {
                k.put(&id, h);
            }
            *kept = Some(k);
        }
        let k = kept.as_ref().expect("kept or read just now");
        Ok((from >= k.from).then(|| k.within(from, to, owner)))
    }
}

/// How far back state changes are kept: the dashboard's week, with room.
pub const STATES_KEEP: TimeDelta = TimeDelta::days(8);

/// Takes what the feed holds into `ids`; whether the whole must be read again instead.
fn drain(changes: &mut broadcast::Receiver<String>, ids: &mut BTreeSet<String>) -> bool {
    loop {
        match changes.try_recv() {
            Ok(id) => {
                ids.insert(id);
                if ids.len() > REREAD_MAX {
                    return true;
                }
            }
            Err(TryRecvError::Empty) => return false,
            Err(TryRecvError::Lagged(_) | TryRecvError::Closed) => return true,
        }
    }
}

/// The kept state changes and how they follow changes.
#[derive(Debug, Default)]
pub struct RecentStates {
    kept: tokio::sync::Mutex<Option<KeptStates>>,
    /// Workloads submitted since the last answer (a submission writes its first state).
    submitted: std::sync::Mutex<Vec<String>>,
}

#[derive(Debug)]
struct KeptStates {
    changes: broadcast::Receiver<String>,
    /// Every workload that had not ended by then is kept.
    from: DateTime<Utc>,
    read_at: DateTime<Utc>,
    /// Each workload's changes, oldest first, by id; shared with the answers (an answer of 30,000
    /// changes clones pointers, not their strings).
    by_workload: BTreeMap<String, Vec<Arc<StateChange>>>,
}

impl KeptStates {
    fn put(&mut self, id: &str, rows: Vec<StateChange>) {
        match rows.first() {
            Some(r) if r.finished_at.is_none_or(|f| f >= self.from) => {
                self.by_workload.insert(id.to_owned(), rows.into_iter().map(Arc::new).collect());
            }
            _ => {
                self.by_workload.remove(id);
            }
        }
    }

    /// What `Store::state_changes` answers for the window, each workload's together, oldest first.
    fn within(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Arc<StateChange>> {
        let alive = |r: &StateChange| r.created_at < to && r.finished_at.is_none_or(|f| f >= from);
        self.by_workload
            .values()
            .filter(|rows| rows.first().is_some_and(|r| alive(r)))
            .flat_map(|rows| rows.iter().filter(|r| r.at < to).cloned())
            .collect()
    }
}

impl RecentStates {
    /// `id` was just submitted: the next answer holds its first state.
    pub fn submitted(&self, id: &str) {
        self.submitted.lock().unwrap().push(id.to_owned());
    }

    /// The state changes of the workloads alive in `from`–`to`, as `Store::state_changes` gives them
    /// after every change announced so far and every submission; `None` where `from` is before what is
    /// kept.
    pub async fn changes(
        &self,
        store: &Store,
        subscribe: impl FnOnce() -> broadcast::Receiver<String>,
        now: DateTime<Utc>,
        (from, to): (DateTime<Utc>, DateTime<Utc>),
    ) -> Result<Option<Vec<Arc<StateChange>>>, StoreError> {
        let mut kept = self.kept.lock().await;
        let mut whole = kept.as_ref().is_none_or(|k| now - k.read_at > RELOAD || now < k.read_at);
        if let Some(k) = kept.as_mut().filter(|_| !whole) {
            let mut ids: BTreeSet<String> = self.submitted.lock().unwrap().drain(..).collect();
            whole = drain(&mut k.changes, &mut ids);
            if !whole {
                for id in &ids {
                    let read = async {
                        let w = store.get_workload_by_id(id).await?;
                        let history = store.workload_history(id).await?;
                        Ok::<_, StoreError>((w, history))
                    };
                    match read.await {
                        Ok((w, history)) => {
                            let rows = history
                                .into_iter()
                                .map(|e| StateChange {
                                    workload_id: w.id.clone(),
                                    owner: w.owner.clone(),
                                    name: w.name.clone(),
                                    queue: w.queue.clone(),
                                    created_at: w.created_at,
                                    finished_at: w.finished_at,
                                    at: e.at,
                                    state: e.state,
                                    message: e.message,
                                })
                                .collect();
                            k.put(id, rows);
                        }
                        Err(StoreError::NotFound { .. }) => k.put(id, Vec::new()),
                        Err(e) => {
                            *kept = None;
                            return Err(e);
                        }
                    }
                }
            }
        }
        if whole {
            let changes = subscribe();
            self.submitted.lock().unwrap().clear();
            let since = now - STATES_KEEP;
            let all = store.state_changes(since, now + TimeDelta::days(36_500)).await?;
            let mut k = KeptStates { changes, from: since, read_at: now, by_workload: BTreeMap::new() };
            let mut by: BTreeMap<String, Vec<StateChange>> = BTreeMap::new();
            for c in all {
                by.entry(c.workload_id.clone()).or_default().push(c);
            }
            for (id, rows) in by {
                k.put(&id, rows);
            }
            *kept = Some(k);
        }
        let k = kept.as_ref().expect("kept or read just now");
        Ok((from >= k.from).then(|| k.within(from, to)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(h: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap() + TimeDelta::hours(h)
    }

    fn holding(id: &str, owner: &str, since: i64, until: Option<i64>) -> Holding {
        Holding {
            workload_id: id.into(),
            workload: id.into(),
            owner: owner.into(),
            queue: String::new(),
            gpus: vec![],
            gpu_milli: 1000,
            cpu_milli: 1000,
            memory: 1,
            since: t(since),
            until: until.map(t),
        }
    }

    #[test]
    fn a_window_gets_what_overlaps_it_oldest_first_and_what_ended_before_the_kept_is_dropped() {
        let (_tx, changes) = broadcast::channel(1);
        let mut k = Kept { changes, from: t(10), read_at: t(10), by_workload: HashMap::new() };
        k.put("old", vec![holding("old", "alice", 0, Some(5))]);
        assert!(k.by_workload.is_empty(), "ended before what is kept");
        k.put("b", vec![holding("b", "bob", 12, Some(14)), holding("b", "bob", 20, None)]);
        k.put("a", vec![holding("a", "alice", 11, Some(30))]);
        let ids = |v: Vec<Holding>| v.iter().map(|h| (h.workload_id.clone(), h.since)).collect::<Vec<_>>();
        assert_eq!(
            ids(k.within(t(13), t(25), None)),
            [("a".to_owned(), t(11)), ("b".to_owned(), t(12)), ("b".to_owned(), t(20))]
        );
        assert_eq!(ids(k.within(t(14), t(20), None)), [("a".to_owned(), t(11))], "ends and starts are exclusive");
        assert_eq!(ids(k.within(t(13), t(25), Some("bob"))).len(), 2);
        // a deleted workload's holdings are read again (closed): replaced
        k.put("a", vec![holding("a", "alice", 11, Some(12))]);
        assert_eq!(ids(k.within(t(13), t(25), None)).len(), 2);
    }

    #[test]
    fn the_state_changes_of_a_window_are_those_of_its_live_workloads_up_to_its_end() {
        use gpuhub_core::workload::WorkloadState::{Queued, Running, Stopped};
        let (_tx, changes) = broadcast::channel(1);
        let mut k = KeptStates { changes, from: t(10), read_at: t(10), by_workload: BTreeMap::new() };
        let row = |id: &str, created: i64, finished: Option<i64>, at: i64, state| StateChange {
            workload_id: id.into(),
            owner: "alice".into(),
            name: id.into(),
            queue: String::new(),
            created_at: t(created),
            finished_at: finished.map(t),
            at: t(at),
            state,
            message: None,
        };
        k.put("gone", vec![row("gone", 0, Some(5), 0, Queued), row("gone", 0, Some(5), 5, Stopped)]);
        assert!(k.by_workload.is_empty(), "ended before what is kept");
        k.put(
            "a",
            vec![
                row("a", 11, Some(20), 11, Queued),
                row("a", 11, Some(20), 12, Running),
                row("a", 11, Some(20), 20, Stopped),
            ],
        );
        k.put("b", vec![row("b", 15, None, 15, Queued), row("b", 15, None, 30, Running)]);
        let got = |k: &KeptStates, from, to| {
            k.within(t(from), t(to)).iter().map(|c| (c.workload_id.clone(), c.state)).collect::<Vec<_>>()
        };
        let (a, b) = (|s| ("a".to_owned(), s), |s| ("b".to_owned(), s));
        assert_eq!(got(&k, 10, 16), [a(Queued), a(Running), b(Queued)], "up to the window's end");
        assert_eq!(got(&k, 21, 40), [b(Queued), b(Running)], "a ended before the window");
        assert_eq!(got(&k, 10, 12), [a(Queued)], "b not created yet");
        k.put("a", Vec::new());
        assert_eq!(got(&k, 10, 40), [b(Queued), b(Running)], "a deleted");
    }
}
