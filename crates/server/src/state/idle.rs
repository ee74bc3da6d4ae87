//! The idle rule's state, shared in the [`AppState`](super::AppState): the pure rule's memory and the
//! owners' keeps (the rounds that feed it are `crate::idle`'s).

use chrono::{DateTime, Utc};
use gpuhub_api::IdleView;
use gpuhub_monitor::IdleTracker;
use std::collections::HashMap;
use std::sync::Mutex;

/// The idle rule's memory and the owners' keeps; shared in [`AppState`](super::AppState); its rounds are `crate::idle`'s.
#[derive(Debug, Default)]
pub struct IdleWatch {
    pub(crate) tracker: Mutex<IdleTracker>,
    kept: Mutex<HashMap<String, DateTime<Utc>>>,
}

impl IdleWatch {
    /// How workload `id` stands, if it is idle or kept.
    pub fn view(&self, id: &str, now: DateTime<Utc>) -> Option<IdleView> {
        let kept_until = self.kept_until(id, now);
        let tracker = self.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let st = tracker.state(id)?;
        Some(IdleView { since: st.since, warned_at: st.warned_at, stop_at: st.stop_at, kept_until })
    }

    /// Until when workload `id` is kept, if it is now.
    pub fn kept_until(&self, id: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.get(id).copied().filter(|k| *k > now)
    }

    /// Keeps workload `id` until `until` (`None` withdraws the keep).
    pub fn keep(&self, id: &str, until: Option<DateTime<Utc>>) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match until {
            Some(u) => kept.insert(id.to_owned(), u),
            None => kept.remove(id),
        };
    }

    /// Forgets the keeps that ended before `now` (called as new ones come: bounded by those in force).
    pub fn forget_ended(&self, now: DateTime<Utc>) {
        let mut kept = self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.retain(|_, k| *k > now);
    }

    /// Keeps remembered now.
    pub fn kept_len(&self) -> usize {
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// The ids of every idle workload.
    pub fn idle_ids(&self) -> Vec<String> {
        let tracker = self.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tracker.all().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_keeps_are_forgotten() {
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let w = IdleWatch::default();
        for i in 0..1000 {
            w.forget_ended(t(i));
            w.keep(&format!("w{i}"), Some(t(i + 10)));
            assert!(w.kept_len() <= 11, "{} keeps at {i}", w.kept_len());
        }
        assert_eq!(w.kept_until("w999", t(1000)), Some(t(1009)));
        assert_eq!(w.kept_until("w0", t(1000)), None);
        w.keep("w999", None);
        w.forget_ended(t(2000));
        assert_eq!(w.kept_len(), 0);
    }
}
