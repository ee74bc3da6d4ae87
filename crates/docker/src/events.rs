//! The engine's event feed, narrowed to gpuhub's containers and mapped onto member events
//! ([`EngineEvent`]): a container is member [`LABEL_MEMBER`] of run [`LABEL_RUN`] (a container made
//! before runs had labels is a one-member run named by its id).

use crate::error;
use bollard::Docker;
use bollard::models::{EventMessage, EventMessageTypeEnum};
use bollard::system::EventsOptions;
use futures::StreamExt;
use gpuhub_driver::{EngineError, EngineEvent, EventStream, LABEL_MEMBER, LABEL_RUN, LABEL_WORKLOAD};
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// The query: container events `start`, `die` and `destroy` of containers carrying the workload label,
/// since `since` (the engine replays what it buffered after that instant, so nothing between the call
/// and the subscription is lost).
pub(crate) fn options(since: SystemTime) -> EventsOptions<String> {
    let since = since.duration_since(UNIX_EPOCH).unwrap_or_default();
    EventsOptions {
        since: Some(format!("{}.{:09}", since.as_secs(), since.subsec_nanos())),
        until: None,
        filters: HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("event".to_owned(), vec!["start".to_owned(), "die".to_owned(), "destroy".to_owned()]),
            ("label".to_owned(), vec![LABEL_WORKLOAD.to_owned()]),
        ]),
    }
}

/// The gpuhub event an engine event stands for, if any.
pub(crate) fn to_event(msg: EventMessage) -> Option<EngineEvent> {
    if msg.typ != Some(EventMessageTypeEnum::CONTAINER) {
        return None;
    }
    let actor = msg.actor?;
    let id = actor.id?;
    let attributes = actor.attributes.unwrap_or_default();
    let workload = attributes.get(LABEL_WORKLOAD)?.clone();
    let run = attributes.get(LABEL_RUN).cloned().unwrap_or_else(|| id.clone());
    let member = attributes.get(LABEL_MEMBER).and_then(|m| m.parse().ok()).unwrap_or(0);
    match msg.action.as_deref()? {
        "start" => Some(EngineEvent::Started { run, workload, member }),
        "die" => {
            let exit_code = attributes.get("exitCode").and_then(|c| c.parse().ok()).unwrap_or_else(|| {
                tracing::warn!(container = %id, "die event without an exit code");
                -1
            });
            Some(EngineEvent::Exited { run, workload, member, exit_code })
        }
        "destroy" => Some(EngineEvent::Removed { run, workload, member }),
        _ => None,
    }
}

/// Subscribes now: a task reads the engine's feed at once (so the engine never drops events for a slow
/// reader) and hands them over until the returned stream is dropped. The stream ends, after an error,
/// when the engine's feed breaks (an engine restart, say); subscribe again then.
pub(crate) fn subscribe(docker: &Docker) -> EventStream {
    let (tx, rx) = mpsc::unbounded_channel::<Result<EngineEvent, EngineError>>();
    let mut feed = Box::pin(docker.events(Some(options(SystemTime::now()))));
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                _ = tx.closed() => return,
                item = feed.next() => item,
            };
            let out = match item {
                None => Err(EngineError::Engine("event stream ended".to_owned())),
                Some(Err(e)) => Err(error::map(e, "event stream")),
                Some(Ok(msg)) => match to_event(msg) {
                    Some(ev) => Ok(ev),
                    None => continue,
                },
            };
            let end = out.is_err();
            if tx.send(out).is_err() || end {
                return;
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn msg(action: &str, attrs: &[(&str, &str)]) -> EventMessage {
        EventMessage {
            typ: Some(EventMessageTypeEnum::CONTAINER),
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".to_owned()),
                attributes: Some(attrs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn maps_start_die_destroy() {
        let w = (LABEL_WORKLOAD, "w1");
        // a container of before runs had labels is member 0 of a run named by its id
        let (run, workload) = ("c1".to_owned(), "w1".to_owned());
        assert_eq!(
            to_event(msg("start", &[w])),
            Some(EngineEvent::Started { run: run.clone(), workload: workload.clone(), member: 0 })
        );
        assert_eq!(
            to_event(msg("die", &[w, ("exitCode", "3")])),
            Some(EngineEvent::Exited { run: run.clone(), workload: workload.clone(), member: 0, exit_code: 3 })
        );
        assert_eq!(
            to_event(msg("destroy", &[w])),
            Some(EngineEvent::Removed { run, workload: workload.clone(), member: 0 })
        );
        let gang = [w, (LABEL_RUN, "r1"), (LABEL_MEMBER, "1"), ("exitCode", "7")];
        assert_eq!(
            to_event(msg("die", &gang)),
            Some(EngineEvent::Exited { run: "r1".into(), workload, member: 1, exit_code: 7 })
        );
    }

    #[test]
    fn ignores_others() {
        let w = (LABEL_WORKLOAD, "w1");
        assert_eq!(to_event(msg("exec_start: sh", &[w])), None);
        assert_eq!(to_event(msg("start", &[])), None, "no workload label");
        let mut image = msg("start", &[w]);
        image.typ = Some(EventMessageTypeEnum::IMAGE);
        assert_eq!(to_event(image), None);
    }

    #[test]
    fn query_filters_and_since() {
        let o = options(UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5));
        assert_eq!(o.since.as_deref(), Some("1700000000.000000005"));
        assert_eq!(o.filters["label"], vec![LABEL_WORKLOAD.to_owned()]);
        assert_eq!(o.filters["type"], vec!["container".to_owned()]);
    }
}
