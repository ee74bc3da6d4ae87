//! The options of `gpuhub edit`.

use clap::Args;
use gpuhub_core::Seconds;

/// `gpuhub edit`.
#[derive(Debug, Clone, Args)]
pub struct EditArgs {
    /// The workload.
    pub name: String,
    /// Lengthen its run-time limit by this much (`2h`, `30m`).
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds, conflicts_with = "time_limit")]
    pub extend: Option<Seconds>,
    /// Its new run-time limit, counted from its start (`6h`); only longer than the present one.
    #[arg(long, value_name = "DURATION", value_parser = parse_seconds)]
    pub time_limit: Option<Seconds>,
    /// Its new priority (admin; queued workloads).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Its new team queue (admin; queued workloads).
    #[arg(long, value_name = "QUEUE")]
    pub queue: Option<String>,
    /// Another user's workload (admin).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// A service's new image (it is restarted with it).
    #[arg(long, value_name = "IMG")]
    pub image: Option<String>,
    /// A service's environment, in place of its old one; repeat for more.
    #[arg(long = "env", value_name = "K=V", value_parser = crate::cli::parse_env)]
    pub env: Vec<(String, String)>,
    /// A service's new command and arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub(crate) fn parse_seconds(s: &str) -> Result<Seconds, String> {
    Seconds::parse(s).map_err(|e| e.to_string())
}
