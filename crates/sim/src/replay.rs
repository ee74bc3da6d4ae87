//! Trace replay (being written).

use crate::SimError;
use std::path::PathBuf;

/// Arguments of `sim replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Philly-format trace CSV.
    #[arg(long)]
    pub trace: PathBuf,
}

/// Runs `sim replay` and renders the report.
pub fn report(_a: &ReplayArgs) -> Result<String, SimError> {
    Err(SimError::Arg { arg: "replay".into(), reason: "not implemented yet".into() })
}
