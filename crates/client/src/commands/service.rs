//! `gpuhub service run …`: a service, kept running by the hub (started again with a backoff when it
//! exits), served at a stable URL through the hub's proxy once its readiness check passes.

use super::{Out, print_json, workloads};
use crate::cli::service::{ServiceCommand, ServiceRunArgs};
use crate::http::{Api, decode};
use crate::{ClientError, Context};
use gpuhub_api::WorkloadView;
use gpuhub_core::service::{ReadyCheck, ServiceSpec};
use gpuhub_core::workload::WorkloadKind;
use reqwest::Method;
use serde_json::Value;

/// The request `gpuhub service run` sends.
pub(crate) fn create_request(args: &ServiceRunArgs) -> Result<gpuhub_api::CreateWorkloadRequest, ClientError> {
    if args.run.workspace {
        return Err(ClientError::Usage("a service is no workspace: leave out --workspace".into()));
    }
    let ready = match (&args.ready_http, &args.ready_command) {
        (Some(path), _) => Some(ReadyCheck::Http(path.clone())),
        (None, Some(cmd)) => {
            let words =
                gpuhub_core::parse::words(cmd).map_err(|e| ClientError::Usage(format!("--ready-command: {e}")))?;
            Some(ReadyCheck::Command(words))
        }
        (None, None) => None,
    };
    let mut req = workloads::create_request(&args.run);
    req.kind = WorkloadKind::Service;
    req.service = Some(ServiceSpec { port: args.port, ready, access: args.access });
    Ok(req)
}

/// `gpuhub service …`.
pub(crate) async fn service(
    ctx: &Context,
    api: &Api,
    json: bool,
    cmd: ServiceCommand,
    out: Out<'_>,
) -> Result<i32, ClientError> {
    let ServiceCommand::Run(args) = cmd;
    let req = create_request(&args)?;
    let v = api.send_json(Method::POST, &["workloads"], &req).await?.unwrap_or(Value::Null);
    let w: WorkloadView = decode(&v, api.url(&["workloads"], &[]).as_str())?;
    if json {
        print_json(out, &v)?;
    } else {
        let url = w.service.as_ref().and_then(|s| s.url.clone()).unwrap_or_default();
        let url = if url.starts_with('/') { format!("{}{url}", api.server()) } else { url };
        writeln!(out, "{}\t{url}", w.name)?;
    }
    out.flush()?;
    if !args.run.follow {
        return Ok(0);
    }
    workloads::follow_to_end(ctx, api, &w.name, out).await
}
