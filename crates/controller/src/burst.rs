//! Bursts: the commands and engine events already waiting when the controller wakes are all handled
//! before its one scheduling pass, so a burst of N submissions, stops or container exits costs one pass,
//! not N. A pass reads every active workload from the store and runs the scheduler, so running one per
//! event made a busy hub spend its time re-deciding what nothing had changed.

use super::Controller;
use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use gpuhub_driver::{EngineError, EngineEvent, EventStream};

/// The most waiting items handled before a pass, so that a flood cannot hold scheduling off for long.
const BURST_MAX: usize = 1024;

impl Controller {
    /// Handles the commands and engine events that are ready now, without waiting for more.
    pub(super) async fn drain(&mut self, events: &mut Option<EventStream>) {
        for _ in 0..BURST_MAX {
            if let Ok(cmd) = self.rx.try_recv() {
                self.command(cmd).await;
                continue;
            }
            match events.as_mut().and_then(|s| s.next().now_or_never()) {
                Some(Some(Ok(ev))) => {
                    self.event(ev).await;
                    continue;
                }
                Some(Some(Err(e))) => {
                    tracing::warn!(error = %e, "engine event stream failed; reconnecting at the next tick");
                    *events = None;
                    self.engine_went_away().await;
                }
                Some(None) => {
                    *events = None;
                    self.engine_went_away().await;
                }
                None => {}
            }
            break;
        }
    }
}

/// Resolves at `deadline` (seen from `now`, the controller's clock), never without one.
pub(super) async fn until(deadline: Option<DateTime<Utc>>, now: DateTime<Utc>) {
    match deadline {
        Some(t) => tokio::time::sleep((t - now).to_std().unwrap_or_default()).await,
        None => std::future::pending().await,
    }
}

pub(super) async fn next_event(events: &mut Option<EventStream>) -> Option<Result<EngineEvent, EngineError>> {
    match events {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}
