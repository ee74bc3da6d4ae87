//! `gpuhub edit NAME`: lengthen a workload's run-time limit (`--extend 2h` or `--time-limit 6h`), or,
//! as an admin, change a queued workload's priority or queue; or update a service (`--image`, `--env`,
//! `-- COMMAND`): a rolling update where the hub can hold both runs (the new one serves once ready), else
//! a restart with them; the update's line says which.

use super::{Out, print_json};
use crate::ClientError;
use crate::cli::edit::EditArgs;
use crate::http::{Api, decode};
use gpuhub_api::{EditWorkloadRequest, WorkloadView};
use gpuhub_core::Seconds;
use reqwest::Method;

/// `gpuhub edit`: one `PATCH`; `--extend` reads the present limit first.
pub(crate) async fn edit(api: &Api, json: bool, args: EditArgs, out: Out<'_>) -> Result<(), ClientError> {
    let segs = ["workloads", args.name.as_str()];
    let q: Vec<(&str, &str)> = args.owner.as_deref().map(|o| vec![("owner", o)]).unwrap_or_default();
    let runtime_limit = match (args.extend, args.time_limit) {
        (Some(by), _) => {
            let w: WorkloadView = decode(&api.get(&segs, &q).await?, api.url(&segs, &q).as_str())?;
            let Some(cur) = w.runtime_limit else {
                return Err(ClientError::Usage(format!(
                    "workload {} has no run-time limit to extend; give --time-limit",
                    w.name
                )));
            };
            Some(Seconds(cur.0 + by.0))
        }
        (None, t) => t,
    };
    let req = EditWorkloadRequest {
        runtime_limit,
        priority: args.priority,
        queue: args.queue,
        image: args.image,
        command: (!args.command.is_empty()).then_some(args.command),
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
    };
    if req.is_empty() {
        return Err(ClientError::Usage(
            "nothing to change: give --extend, --time-limit, --priority, --queue, or a service's --image, --env or \
             -- COMMAND"
                .into(),
        ));
    }
    let body = serde_json::to_value(&req).map_err(|e| ClientError::Usage(e.to_string()))?;
    let v = api.call(Method::PATCH, &segs, &q, Some(&body)).await?.unwrap_or_default();
    if json {
        return print_json(out, &v);
    }
    let w: WorkloadView = decode(&v, api.url(&segs, &q).as_str())?;
    let limit = w.runtime_limit.map_or_else(|| "none".to_owned(), |l| l.to_string());
    let queue = if w.queue.is_empty() { "default" } else { w.queue.as_str() };
    writeln!(out, "{}: {}, time limit {limit}, priority {}, queue {queue}", w.name, w.state, w.priority)?;
    // a service's rolling update under way (`gpuhub inspect` follows it: service.update)
    let rolling = |u: &&gpuhub_core::service::UpdateReport| u.state == gpuhub_core::service::UpdateState::Rolling;
    if let Some(update) = w.service.as_ref().and_then(|s| s.update.as_ref()).filter(rolling) {
        writeln!(out, "{}", update.message)?;
    }
    Ok(())
}
