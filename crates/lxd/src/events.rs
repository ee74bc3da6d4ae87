//! The event stream: a poller lists gpuhub's containers every `poll_ms` and tells each subscriber what
//! changed since the last look (started, exited with its status, removed). It starts with the first
//! subscriber; the first look only notes what is there ("from now on").

use crate::engine::LxdEngine;
use futures::StreamExt;
use gpuhub_driver::{EngineError, EngineEvent, EventStream, LABEL_WORKLOAD, MemberState};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::broadcast;

/// What the poller last saw of a container: its workload, member index and state.
type Seen = HashMap<String, (String, u32, MemberState)>;

/// The events between two looks.
pub(crate) fn changes(before: &Seen, now: &Seen) -> Vec<EngineEvent> {
    let mut out = Vec::new();
    for (run, (workload, member, state)) in now {
        let (run, workload, member) = (run.clone(), workload.clone(), *member);
        let was = before.get(&run).map(|s| s.2);
        match (was, state) {
            (Some(MemberState::Running), MemberState::Exited(code)) => {
                out.push(EngineEvent::Exited { run, workload, member, exit_code: *code })
            }
            (None | Some(MemberState::Pending), MemberState::Exited(code)) => {
                out.push(EngineEvent::Started { run: run.clone(), workload: workload.clone(), member });
                out.push(EngineEvent::Exited { run, workload, member, exit_code: *code });
            }
            (None | Some(MemberState::Pending), MemberState::Running) => {
                out.push(EngineEvent::Started { run, workload, member })
            }
            _ => {}
        }
    }
    for (run, (workload, member, _)) in before {
        if !now.contains_key(run) {
            out.push(EngineEvent::Removed { run: run.clone(), workload: workload.clone(), member: *member });
        }
    }
    out
}

impl LxdEngine {
    async fn look(&self) -> Result<Seen, EngineError> {
        let mut seen = Seen::new();
        for c in self.containers().await? {
            if c.running {
                self.cap_log(&c);
            }
            let status = self.status(&c);
            let workload = c.label(LABEL_WORKLOAD).unwrap_or_default().to_owned();
            if let Some(m) = status.members.first() {
                seen.insert(c.name.clone(), (workload, m.index, m.state));
            }
        }
        Ok(seen)
    }

    /// Keeps a running container's output at its run's `log_max_bytes` (see [`crate::logs::cap`]).
    fn cap_log(&self, c: &crate::engine::Container) {
        let Some(max) = c.config.get(crate::spec::LOG_MAX_KEY).and_then(|v| v.as_str()?.parse::<u64>().ok()) else {
            return;
        };
        let path = self.run_dir(&c.name).join("log");
        match crate::logs::cap(&path, max) {
            Ok(0) => {}
            Ok(cut) => tracing::debug!(container = %c.name, cut, "cut the oldest output of a container"),
            Err(e) => tracing::warn!(container = %c.name, error = %e, "cannot cap a container's output"),
        }
    }

    /// A stream of the poller's events, starting it when it is not running.
    pub(crate) async fn subscribe(&self) -> Result<EventStream, EngineError> {
        let rx = self.inner.events.subscribe();
        {
            let mut poller = self.inner.poller.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if poller.as_ref().is_none_or(|p| p.is_finished()) {
                let weak = std::sync::Arc::downgrade(&self.inner);
                let every = Duration::from_millis(self.inner.config.poll_ms);
                let first = self.clone();
                *poller = Some(tokio::spawn(async move {
                    let mut before = first.look().await.unwrap_or_default();
                    drop(first);
                    loop {
                        tokio::time::sleep(every).await;
                        let Some(inner) = weak.upgrade() else { return };
                        let engine = LxdEngine { inner };
                        match engine.look().await {
                            Ok(now) => {
                                for e in changes(&before, &now) {
                                    let _ = engine.inner.events.send(e);
                                }
                                before = now;
                            }
                            Err(e) => tracing::debug!(error = %e, "lxd event poll failed"),
                        }
                    }
                }));
            }
        }
        let stream = tokio_stream_from(rx);
        Ok(stream)
    }
}

/// The broadcast receiver as a stream; a subscriber that fell behind is told how many events it missed.
fn tokio_stream_from(rx: broadcast::Receiver<EngineEvent>) -> EventStream {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(e) => Some((Ok(e), rx)),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                Some((Err(EngineError::Engine(format!("the event stream fell behind by {n} events"))), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(items: &[(&str, MemberState)]) -> Seen {
        items.iter().map(|(r, s)| (r.to_string(), (format!("w-{r}"), 0, *s))).collect()
    }

    #[test]
    fn changes_between_looks_are_events() {
        let before = seen(&[("a", MemberState::Pending), ("b", MemberState::Running), ("c", MemberState::Running)]);
        let now = seen(&[("a", MemberState::Running), ("b", MemberState::Exited(3)), ("d", MemberState::Exited(0))]);
        let mut events = changes(&before, &now);
        events.sort_by_key(|e| format!("{e:?}"));
        let want = [
            EngineEvent::Exited { run: "b".into(), workload: "w-b".into(), member: 0, exit_code: 3 },
            EngineEvent::Exited { run: "d".into(), workload: "w-d".into(), member: 0, exit_code: 0 },
            EngineEvent::Removed { run: "c".into(), workload: "w-c".into(), member: 0 },
            EngineEvent::Started { run: "a".into(), workload: "w-a".into(), member: 0 },
            EngineEvent::Started { run: "d".into(), workload: "w-d".into(), member: 0 },
        ];
        for w in &want {
            assert!(events.contains(w), "{w:?} missing from {events:?}");
        }
        assert_eq!(events.len(), want.len(), "{events:?}");
        assert!(changes(&now, &now).is_empty());
    }
}
