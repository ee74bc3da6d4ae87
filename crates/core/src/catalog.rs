//! The admin-curated image catalog: a name people use in place of an image reference.

use crate::workload::AppSpec;
use serde::{Deserialize, Serialize};

/// An entry of the admin-curated image catalog.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageEntry {
    /// Catalog name, used in place of a reference (`pytorch`).
    pub name: String,
    /// Image reference the engine runs (`pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime`).
    pub image: String,
    #[serde(default)]
    pub description: String,
    /// Web apps every workspace of this image serves (JupyterLab, TensorBoard…).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
}
