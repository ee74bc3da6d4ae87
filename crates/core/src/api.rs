//! The JSON shapes of the HTTP API under `/api/v1`, shared by the server and the CLI.
//!
//! Request types refuse unknown fields, so a typo is an error rather than a silently ignored setting.

use crate::workload::{AppSpec, Resources, WorkloadKind, WorkloadState};
use crate::{Bytes, CoreError, CpuMilli};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /api/v1/login`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub username: String,
    pub password: String,
}

/// A bearer token for the CLI; also set as a session cookie for browsers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenResponse {
    pub token: String,
    pub username: String,
    pub role: crate::user::Role,
}

/// An account as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct UserView {
    pub username: String,
    pub role: crate::user::Role,
    /// The UID/GID the user's containers run as.
    pub uid: u32,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

impl From<&crate::user::User> for UserView {
    fn from(u: &crate::user::User) -> Self {
        Self { username: u.username.clone(), role: u.role, uid: u.uid, disabled: u.disabled, created_at: u.created_at }
    }
}

/// `POST /api/v1/users` (admin).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub admin: bool,
}

/// `PATCH /api/v1/users/{name}` (admin): each field present is changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchUserRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

/// The resources part of a workload request, as a person writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceRequest {
    /// CPU cores, fractional allowed (`0.5`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory limit (`"4GiB"` or bytes); default 1GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Whole GPUs; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

impl ResourceRequest {
    /// Validates and fills defaults.
    pub fn resolve(&self) -> Result<Resources, CoreError> {
        let d = Resources::default();
        let cpu_milli = match self.cpus {
            Some(c) => CpuMilli::from_cores(c)?,
            None => d.cpu_milli,
        };
        if cpu_milli.0 == 0 {
            return Err(CoreError::invalid("resources.cpus", "must be more than 0"));
        }
        let memory = self.memory.unwrap_or(d.memory);
        if memory.0 < 6 * crate::quantity::MIB {
            return Err(CoreError::invalid(
                "resources.memory",
                "must be at least 6MiB (the container engine's minimum)",
            ));
        }
        Ok(Resources { cpu_milli, memory, gpus: self.gpus.unwrap_or(0) })
    }
}

/// `POST /api/v1/workloads`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkloadRequest {
    /// Unique among the owner's workloads; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub kind: WorkloadKind,
    /// A catalog name or an image reference the engine has.
    pub image: String,
    /// Command and arguments; the image's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Higher starts first; users may ask for -100..=100, default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Web apps this workload serves (added to those its catalog image declares).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
}

/// Who holds a GPU.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct GpuHolder {
    pub owner: String,
    pub workload: String,
}

/// A GPU as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GpuView {
    pub uuid: String,
    pub index: u32,
    pub model: String,
    pub memory: Bytes,
    /// Present while a workload holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<GpuHolder>,
}

/// A node as `GET /api/v1/nodes` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    /// Cores in all.
    pub cpus: f64,
    /// Cores not held by a workload.
    pub cpus_free: f64,
    pub memory: Bytes,
    pub memory_free: Bytes,
    pub gpus: Vec<GpuView>,
}

/// An entry of the admin-curated image catalog.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
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

/// Why a queued workload waits, from the scheduler's last pass.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct Explanation {
    /// The kind of obstacle (`resources`, `queue-limit`, `backfill`, `reservation`, `unschedulable`…).
    pub reason: String,
    /// One line for people.
    pub message: String,
    /// 1-based position among pending workloads in scheduling order.
    pub position: u32,
    /// When it is expected to start, when run-time limits allow an estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<DateTime<Utc>>,
}

/// A workload as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WorkloadView {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub kind: WorkloadKind,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub resources: Resources,
    pub priority: i32,
    /// Web apps, served at `/w/<owner>/<name>/<app>/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<AppSpec>,
    pub state: WorkloadState,
    /// GPU UUIDs held while starting or running.
    pub gpus: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Why it is in its state (for a queued workload: what it waits for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a queued workload: why it waits, its position and estimated start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}

impl From<&crate::workload::Workload> for WorkloadView {
    fn from(w: &crate::workload::Workload) -> Self {
        Self {
            id: w.id.clone(),
            name: w.name.clone(),
            owner: w.owner.clone(),
            kind: w.kind,
            image: w.image.clone(),
            command: w.command.clone(),
            env: w.env.clone(),
            resources: w.resources,
            priority: w.priority,
            apps: w.apps.clone(),
            state: w.state,
            gpus: w.gpus.clone(),
            exit_code: w.exit_code,
            message: w.message.clone(),
            explanation: None,
            created_at: w.created_at,
            started_at: w.started_at,
            finished_at: w.finished_at,
        }
    }
}

/// An RFC 9457 problem document, the body of every error response (`application/problem+json`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    /// What exactly is wrong, for a person.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_refused() {
        let e = serde_json::from_str::<CreateWorkloadRequest>(r#"{"kind":"job","image":"x","colour":1}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `colour`"), "{e}");
        let e = serde_json::from_str::<CreateWorkloadRequest>(r#"{"kind":"job","image":"x","resources":{"gpu":1}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `gpu`"), "{e}");
    }

    #[test]
    fn resolve_resources() {
        let r: ResourceRequest = serde_json::from_str(r#"{"cpus":0.5,"memory":"2GiB","gpus":1}"#).unwrap();
        let r = r.resolve().unwrap();
        assert_eq!(r.cpu_milli, CpuMilli(500));
        assert_eq!(r.memory, Bytes(2 << 30));
        assert_eq!(r.gpus, 1);
        let neg: ResourceRequest = serde_json::from_str(r#"{"cpus":-1}"#).unwrap();
        assert!(neg.resolve().unwrap_err().to_string().contains("resources.cpus"));
        assert!(serde_json::from_str::<ResourceRequest>(r#"{"gpus":-1}"#).is_err());
        assert_eq!(ResourceRequest::default().resolve().unwrap(), Resources::default());
    }
}
