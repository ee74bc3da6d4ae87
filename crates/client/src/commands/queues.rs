//! `gpuhub queue ls | add | set | rm`: the team queues, edited by admins without a restart.

use super::sched::queues;
use super::{Out, print_json};
use crate::ClientError;
use crate::cli::queue::QueueCommand;
use crate::http::{Api, decode};
use gpuhub_api::QueueView;
use gpuhub_core::queue::QueuePatch;
use reqwest::Method;
use serde_json::Value;

/// `gpuhub queue …`.
pub(crate) async fn queue(api: &Api, json: bool, cmd: QueueCommand, out: Out<'_>) -> Result<(), ClientError> {
    let (method, segments, body): (Method, Vec<&str>, Value) = match &cmd {
        QueueCommand::Ls => return queues(api, json, out).await,
        QueueCommand::Rm { name } => {
            api.call(Method::DELETE, &["queues", name], &[], None).await?;
            if !json {
                writeln!(out, "removed queue {name}")?;
            }
            return Ok(());
        }
        QueueCommand::Add { name, settings } => {
            let mut body = serde_json::to_value(settings.patch()).map_err(|e| ClientError::Usage(e.to_string()))?;
            body["name"] = Value::String(name.clone());
            (Method::POST, vec!["queues"], body)
        }
        QueueCommand::Set { name, settings } => {
            let patch = settings.patch();
            if patch == QueuePatch::default() {
                return Err(ClientError::Usage("nothing to change: give at least one option".into()));
            }
            let body = serde_json::to_value(patch).map_err(|e| ClientError::Usage(e.to_string()))?;
            (Method::PATCH, vec!["queues", name.as_str()], body)
        }
    };
    if let (QueueCommand::Add { .. }, Some(bad)) = (&cmd, add_nulls(&body)) {
        return Err(ClientError::Usage(format!("--{bad} none: a new queue has nothing to unset; leave it out")));
    }
    let v = api.send_json(method, &segments, &body).await?.unwrap_or(Value::Null);
    if json {
        return print_json(out, &v);
    }
    let q: QueueView = decode(&v, api.url(&segments, &[]).as_str())?;
    write!(out, "{}", super::sched::queues_text(std::slice::from_ref(&q)))?;
    Ok(())
}

/// `POST /api/v1/queues` takes no `null`s: the option a `none` was given to, if any.
fn add_nulls(body: &Value) -> Option<String> {
    let fields = body.as_object()?;
    fields.iter().find(|(_, v)| v.is_null()).map(|(k, _)| k.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::queue::{Limit, List, QueueSettings, parse_limit, parse_list, parse_max_disk};
    use gpuhub_core::Bytes;

    #[test]
    fn limits_and_lists_parse() {
        let l = parse_limit("gpus=2, memory=8GiB,cpus=none").unwrap().0.unwrap();
        assert_eq!((l.gpus, l.cpus, l.memory), (Some(Some(2.0)), Some(None), Some(Some(Bytes(8 << 30)))));
        assert_eq!(parse_limit("none").unwrap(), Limit(None));
        assert!(parse_limit("gpu=2").unwrap_err().contains("unknown resource"));
        assert!(parse_limit("gpus=two").is_err());
        assert_eq!(parse_list("alice, bob").unwrap(), List(Some(vec!["alice".into(), "bob".into()])));
        assert_eq!(parse_list("none").unwrap(), List(None));
    }

    #[test]
    fn options_make_a_merge_patch() {
        let s = QueueSettings {
            user_limit: Some(parse_limit("gpus=2").unwrap()),
            borrow_limit: Some(Limit(None)),
            weight: Some(2.0),
            ..QueueSettings::default()
        };
        let body = serde_json::to_value(s.patch()).unwrap();
        assert_eq!(body, serde_json::json!({"user_limit": {"gpus": 2.0}, "borrow_limit": null, "weight": 2.0}));
        assert_eq!(add_nulls(&body).as_deref(), Some("borrow-limit"));
        let s = QueueSettings { members: Some(parse_list("alice").unwrap()), ..QueueSettings::default() };
        let mut body = serde_json::to_value(s.patch()).unwrap();
        body["name"] = "vision".into();
        // an `add` body is what POST /api/v1/queues takes
        let req: gpuhub_core::queue::CreateQueueRequest = serde_json::from_value(body).unwrap();
        assert_eq!(req.members, Some(vec!["alice".into()]));
        // --max-disk: a size, or none
        let s = QueueSettings { max_disk: Some(parse_max_disk("50GiB").unwrap()), ..QueueSettings::default() };
        assert_eq!(serde_json::to_value(s.patch()).unwrap(), serde_json::json!({"max_disk": "50GiB"}));
        assert_eq!(parse_max_disk("none").unwrap().0, None);
        assert!(parse_max_disk("big").is_err());
    }
}
