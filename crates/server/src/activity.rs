//! Use of workloads through the hub: requests to their apps, open browser terminals and SSH sessions.
//! The idle-GPU rule counts a workload as used while a terminal or SSH session is open, and until
//! the last request or session end otherwise. In memory: after a restart every workload starts afresh.

use chrono::{DateTime, Utc};
use gpuhub_controller::clock::Clock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    /// The last request, or the end of the last session.
    last: Option<DateTime<Utc>>,
    /// Sessions open now.
    open: u32,
}

/// Workloads remembered at most. The idle rule forgets those no longer running after each monitoring
/// round; without it (`[idle]` off), beyond this the least recently used without an open session go.
const MAX_ENTRIES: usize = 100_000;

/// Who used which workload through the hub, and when; cheap to clone.
#[derive(Debug, Clone)]
pub struct Activity {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    clock: Arc<dyn Clock>,
    cap: usize,
}

impl Activity {
    /// An empty registry reading the time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { entries: Arc::default(), clock, cap: MAX_ENTRIES }
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Entry>) -> T) -> T {
        f(&mut self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Makes room for one more entry: beyond the cap, the least recently used without an open session
    /// go, down to three quarters of it (one sort per many new entries).
    fn make_room(&self, m: &mut HashMap<String, Entry>, id: &str) {
        if m.len() < self.cap || m.contains_key(id) {
            return;
        }
        let mut idle: Vec<(Option<DateTime<Utc>>, String)> =
            m.iter().filter(|(_, e)| e.open == 0).map(|(k, e)| (e.last, k.clone())).collect();
        let excess = (m.len() + 1).saturating_sub(self.cap * 3 / 4).min(idle.len());
        if excess == 0 {
            return;
        }
        idle.select_nth_unstable(excess - 1);
        for (_, k) in idle.into_iter().take(excess) {
            m.remove(&k);
        }
    }

    /// Workloads remembered now.
    pub fn len(&self) -> usize {
        self.with(|m| m.len())
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a request to workload `id` now.
    pub fn touch(&self, id: &str) {
        let now = self.clock.now();
        self.with(|m| {
            self.make_room(m, id);
            m.entry(id.to_owned()).or_default().last = Some(now)
        });
    }

    /// Opens a session on workload `id` (a terminal, an SSH connection): it counts as used until the
    /// returned guard is dropped.
    pub fn open(&self, id: &str) -> Session {
        let now = self.clock.now();
        self.with(|m| {
            self.make_room(m, id);
            let e = m.entry(id.to_owned()).or_default();
            e.open += 1;
            e.last = Some(now);
        });
        Session { activity: self.clone(), id: id.to_owned() }
    }

    /// When workload `id` was last used through the hub: now while a session is open.
    pub fn last_used(&self, id: &str) -> Option<DateTime<Utc>> {
        let now = self.clock.now();
        self.with(|m| m.get(id).and_then(|e| if e.open > 0 { Some(now) } else { e.last }))
    }

    /// Forgets workloads not in `keep` that have no open session (bounded memory).
    pub fn retain(&self, keep: &std::collections::HashSet<String>) {
        self.with(|m| m.retain(|id, e| e.open > 0 || keep.contains(id)));
    }
}

/// An open session; closing it (dropping this) records its end as the last use.
#[derive(Debug)]
pub struct Session {
    activity: Activity,
    id: String,
}

impl Drop for Session {
    fn drop(&mut self) {
        let now = self.activity.clock.now();
        self.activity.with(|m| {
            if let Some(e) = m.get_mut(&self.id) {
                e.open = e.open.saturating_sub(1);
                e.last = Some(now);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_controller::clock::ManualClock;

    #[test]
    fn requests_and_sessions_count_as_use() {
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let clock = Arc::new(ManualClock::new(t(100)));
        let a = Activity::new(clock.clone());
        assert_eq!(a.last_used("w"), None);
        a.touch("w");
        clock.set(t(200));
        assert_eq!(a.last_used("w"), Some(t(100)));
        let s = a.open("w");
        clock.set(t(900));
        assert_eq!(a.last_used("w"), Some(t(900)), "open: used now");
        drop(s);
        clock.set(t(1000));
        assert_eq!(a.last_used("w"), Some(t(900)), "closed at 900");
        a.retain(&Default::default());
        assert_eq!(a.last_used("w"), None);
    }

    #[test]
    fn beyond_the_cap_the_least_recently_used_go_and_open_sessions_stay() {
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let clock = Arc::new(ManualClock::new(t(0)));
        let a = Activity { cap: 100, ..Activity::new(clock.clone()) };
        let session = a.open("held");
        for i in 0..1000 {
            clock.set(t(i + 1));
            a.touch(&format!("w{i}"));
            assert!(a.len() <= 100, "{} after {i}", a.len());
        }
        assert_eq!(a.last_used("w999"), Some(t(1000)), "the latest is kept");
        assert_eq!(a.last_used("w0"), None, "the oldest went");
        assert_eq!(a.last_used("held"), Some(t(1000)), "an open session is never dropped");
        drop(session);
    }
}
