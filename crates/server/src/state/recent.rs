//! The holdings of the last [`KEEP`] (what usage reports and the admin dashboard add up), kept between
//! requests: read whole once, then followed through the controller's change feed. A holding is written
//! only with its workload's state (`Store::update_workload` and its kin, each followed by the
//! controller's announcement) or closed when the workload is deleted (announced too), so each announced
//! workload's holdings are read again by id before the next answer. A gap in the feed, more changes
//! than are worth reading one by one, or a day since the whole was read (what aged out is dropped) reads
//! the whole again. A window starting before what is kept is the store's to answer.

use chrono::{DateTime, TimeDelta, Utc};
use gpuhub_core::usage::Holding;
use gpuhub_store::{Store, StoreError};
use std::collections::{BTreeSet, HashMap};
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
}
