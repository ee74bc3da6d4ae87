//! The options of `gpuhub stats` and `gpuhub top`.

use clap::Args;

/// `gpuhub stats`.
#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    /// The workload.
    pub name: String,
    /// Start of the window: a date (`2026-11-01`, UTC) or an RFC 3339 time; default an hour before `--to`.
    #[arg(long, value_name = "WHEN")]
    pub from: Option<String>,
    /// End of the window (exclusive); default now.
    #[arg(long, value_name = "WHEN")]
    pub to: Option<String>,
    /// Seconds per line (the mean of the samples in it); default about 500 lines per member at most.
    #[arg(long, value_name = "SECS")]
    pub step: Option<u64>,
    /// Another user's workload (admins).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
}

/// `gpuhub top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// Print again every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub watch: Option<u64>,
}
