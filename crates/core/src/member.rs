//! A member of a workload's run: where it runs, what it holds, how it ended. Its own module so that
//! [`crate::service`] (a rollout's new member) and [`crate::workload`] both name it without a circle.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a member of a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MemberPhase {
    /// Placed or submitted, not running yet.
    Pending,
    /// Its main process runs.
    Running,
    /// Its main process ended.
    Exited,
}

/// A member of a workload's run, as the store keeps it and the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    /// 0-based; also its `RANK`.
    pub index: u32,
    /// The node it runs (or ran) on, once placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub state: MemberPhase,
    /// The GPUs it holds (or held).
    #[serde(default)]
    pub gpus: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The engine's id of it (a container id; `<job>.<step>` on Slurm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_id: Option<String>,
    /// The port each app listens on, where gpuhub assigned one (engines whose members share their
    /// node's network); an app not named listens on its declared port.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u16>,
}

impl Member {
    /// Member `index`, pending, nowhere yet.
    pub fn pending(index: u32) -> Self {
        Self {
            index,
            node: None,
            state: MemberPhase::Pending,
            gpus: Vec::new(),
            exit_code: None,
            engine_id: None,
            ports: BTreeMap::new(),
        }
    }
}
