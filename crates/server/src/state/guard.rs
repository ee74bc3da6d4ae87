//! The GPU memory guard's state, shared in the [`AppState`](super::AppState): the pure rule's memory and
//! its counts (the rounds that feed it are `crate::guard`'s).

use gpuhub_api::GpuGuardView;
use gpuhub_monitor::GuardTracker;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The guard's memory and its counts; shared in [`AppState`](super::AppState); its rounds are `crate::guard`'s.
#[derive(Debug, Default)]
pub struct GuardWatch {
    pub(crate) tracker: Mutex<GuardTracker>,
    pub(crate) warnings: AtomicU64,
    pub(crate) stops: AtomicU64,
}

impl GuardWatch {
    /// The members of workload `id` over their grant now.
    pub fn view(&self, id: &str) -> Vec<GpuGuardView> {
        let tracker = self.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tracker
            .of_workload(id)
            .into_iter()
            .map(|(member, s)| GpuGuardView {
                member,
                used_bytes: s.used,
                granted_bytes: s.granted,
                since: s.since,
                stop_at: s.stop_at,
            })
            .collect()
    }

    /// Warnings given and stops asked for since the server started.
    pub fn counts(&self) -> (u64, u64) {
        (self.warnings.load(Ordering::Relaxed), self.stops.load(Ordering::Relaxed))
    }

    /// Members over their grant now.
    pub fn over(&self) -> usize {
        self.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}
