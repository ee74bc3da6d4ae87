//! Throughput (being written).

use crate::SimError;

/// Arguments of `sim throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct ThroughputArgs {
    /// Nodes.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
}

/// Runs `sim throughput` and renders the report.
pub fn report(_a: &ThroughputArgs) -> Result<String, SimError> {
    Err(SimError::Arg { arg: "throughput".into(), reason: "not implemented yet".into() })
}
