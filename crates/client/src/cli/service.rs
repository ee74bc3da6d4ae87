//! The options of `gpuhub service run`.

use crate::cli::RunArgs;
use clap::{Args, Subcommand};
use gpuhub_core::service::ServiceAccess;
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

pub(crate) fn parse_access(s: &str) -> Result<ServiceAccess, String> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| format!("{s:?} is not one of owner, users, public"))
}
