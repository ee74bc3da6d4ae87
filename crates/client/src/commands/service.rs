//! `gpuhub service run …`: a service, kept running by the hub (started again with a backoff when it
//! exits), served at a stable URL through the hub's proxy once its readiness check passes.

use super::{Out, print_json, workloads};
use crate::cli::RunArgs;
use crate::http::{Api, decode};
use crate::{ClientError, Context};
use clap::{Args, Subcommand};
use gpuhub_core::api::WorkloadView;
use gpuhub_core::service::{ReadyCheck, ServiceAccess, ServiceSpec};
use gpuhub_core::workload::WorkloadKind;
use reqwest::Method;
use serde_json::Value;

/// `gpuhub service …`.
#[derive(Debug, Clone, Subcommand)]
pub enum ServiceCommand {
    /// Start a service: kept running (started again after a backoff when it exits; in crash-loop after
    /// five quick failures), its port served at /w/<you>/<name>/service/ once ready. Stop it with
    /// `gpuhub stop`; `gpuhub inspect` shows its restarts, readiness and URL.
    Run(Box<ServiceRunArgs>),
}

/// `gpuhub service run`.
#[derive(Debug, Clone, Args)]
pub struct ServiceRunArgs {
    /// The container port it serves (HTTP).
    #[arg(long, value_name = "PORT")]
    pub port: u16,
    /// Ready when an HTTP GET of this path answers below 400 (default `/`).
    #[arg(long, value_name = "PATH", conflicts_with = "ready_command")]
    pub ready_http: Option<String>,
    /// Ready when this command, run in it, exits 0 (split into words like a shell's).
    #[arg(long, value_name = "COMMAND")]
    pub ready_command: Option<String>,
    /// Who may reach its URL: owner, users (every signed-in user) or public (needs the hub's apps_domain).
    #[arg(long, value_name = "WHO", default_value = "owner", value_parser = parse_access)]
    pub access: ServiceAccess,
    /// What to run, as for `gpuhub run`.
    #[command(flatten)]
    pub run: RunArgs,
}

fn parse_access(s: &str) -> Result<ServiceAccess, String> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| format!("{s:?} is not one of owner, users, public"))
}

/// The request `gpuhub service run` sends.
pub(crate) fn create_request(args: &ServiceRunArgs) -> Result<gpuhub_core::api::CreateWorkloadRequest, ClientError> {
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
