//! How far the pull of an image is, as the engines report it and a pulling workload shows it.

use crate::Bytes;
use serde::{Deserialize, Serialize};

/// How far the pull of an image is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PullView {
    /// The registry's last word (`Downloading`, `Pull complete`).
    pub status: String,
    /// Bytes fetched so far (of the layers whose size is known).
    pub current_bytes: u64,
    /// Bytes to fetch, as far as known.
    pub total_bytes: u64,
    /// Layers seen, and those in place.
    pub layers: u32,
    pub layers_done: u32,
}

impl PullView {
    /// `45% (3 of 5 layers)`, or the status alone before sizes are known.
    pub fn text(&self) -> String {
        if self.total_bytes == 0 {
            return if self.status.is_empty() { "starting".into() } else { self.status.clone() };
        }
        let pct = (self.current_bytes.min(self.total_bytes) * 100) / self.total_bytes;
        format!("{pct}% of {} ({} of {} layers)", Bytes(self.total_bytes), self.layers_done, self.layers)
    }

    /// What a finished pull fetched: `pulled 24MiB (2 layers)`, or `pulled` when no sizes came.
    pub fn summary(&self) -> String {
        let layers = if self.layers == 1 { "1 layer".to_owned() } else { format!("{} layers", self.layers) };
        match (self.total_bytes, self.layers) {
            (0, 0) => "pulled".into(),
            (0, _) => format!("pulled ({layers})"),
            (t, _) => format!("pulled {} ({layers})", Bytes(t)),
        }
    }
}
