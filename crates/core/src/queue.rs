//! Team queues as the store keeps them and admins edit them: a guarantee, optional borrowing and
//! per-user limits, a fair-share weight, who may submit and which priority classes its users may ask
//! for. Counted in milli-GPU, milli-CPU and bytes, like the scheduler.

use crate::{Bytes, Seconds};
use serde::{Deserialize, Deserializer, Serialize};

/// An amount of the three resources (a guarantee); a component left out is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amounts {
    /// Milli-GPU (1000 per whole GPU).
    #[serde(default)]
    pub gpu_milli: u64,
    /// Milli-CPU.
    #[serde(default)]
    pub cpu_milli: u64,
    /// Bytes of memory.
    #[serde(default)]
    pub memory: u64,
}

/// A limit on the three resources; a component that is `None` is not limited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// Milli-GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u64>,
    /// Milli-CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    /// Bytes of memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
}

/// One team queue's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueDef {
    /// The queue's name (workloads name it in `queue`).
    pub name: String,
    /// What the team is guaranteed (reclaimed from borrowers when preemption is on).
    #[serde(default)]
    pub guarantee: Amounts,
    /// How much beyond the guarantee it may borrow; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<Limit>,
    /// The most one user may hold in it; `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<Limit>,
    /// Fair-share weight, relative to the other queues (positive).
    #[serde(default = "one")]
    pub weight: f64,
    /// Who may submit to it; `None`: everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    /// The priority classes its users may ask for (besides those allowed for every queue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_classes: Vec<String>,
    /// The group owning its team folder (`/team/<name>`), which its members' workloads mounting it
    /// carry; `None`: no team folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_gid: Option<u32>,
    /// The longest a workload in it may run: its `runtime_limit` at submit and any extension stay within
    /// it; `None`: up to 366 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime: Option<Seconds>,
    /// The most a workload in it may write outside its mounts (its `disk`); a larger `container_disk`
    /// default is capped at it; `None`: no maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk: Option<Bytes>,
}

/// The longest run-time limit any workload may have (366 days).
pub const MAX_RUNTIME: Seconds = Seconds(366 * 86_400);

/// The least writable-layer cap a workload or queue may name (16 MiB, as `container_disk`).
pub const MIN_DISK: u64 = 16 << 20;

fn one() -> f64 {
    1.0
}

impl QueueDef {
    /// A queue with no guarantee, no limits, weight 1, open to everyone.
    pub fn open(name: &str) -> Self {
        QueueDef {
            name: name.to_owned(),
            guarantee: Amounts::default(),
            borrow_limit: None,
            user_limit: None,
            weight: 1.0,
            members: None,
            priority_classes: Vec::new(),
            team_gid: None,
            max_runtime: None,
            max_disk: None,
        }
    }

    /// The longest run-time limit a workload in this queue may have.
    pub fn runtime_cap(&self) -> Seconds {
        self.max_runtime.unwrap_or(MAX_RUNTIME)
    }
}

/// Reads a present field as `Some(value)`, `null` included (`Some(None)`); an absent one stays `None`
/// through `#[serde(default)]`. This is how a merge patch tells "unset" from "unchanged".
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A change to a limit (JSON merge patch): an absent resource is unchanged, `null` makes it unlimited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LimitPatch {
    /// Whole GPUs (`0.5`); `null`: unlimited.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub gpus: Option<Option<f64>>,
    /// Cores; `null`: unlimited.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub cpus: Option<Option<f64>>,
    /// Bytes or `"64GiB"`; `null`: unlimited.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Bytes>))]
    pub memory: Option<Option<Bytes>>,
}

impl From<LimitView> for LimitPatch {
    fn from(v: LimitView) -> Self {
        LimitPatch { gpus: v.gpus.map(Some), cpus: v.cpus.map(Some), memory: v.memory.map(Some) }
    }
}

/// `PATCH /api/v1/queues/{name}` (admin), a JSON merge patch: an absent field is unchanged, `null`
/// unsets it (no guarantee, no limit, open to everyone, no classes), and a limit object is merged
/// into the current limit resource by resource.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueuePatch {
    /// What the team is guaranteed; `null`: nothing.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<LimitPatch>))]
    pub guarantee: Option<Option<LimitPatch>>,
    /// How much beyond the guarantee it may borrow; `null`: no limit.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<LimitPatch>))]
    pub borrow_limit: Option<Option<LimitPatch>>,
    /// The most one user may hold in it; `null`: no limit.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<LimitPatch>))]
    pub user_limit: Option<Option<LimitPatch>>,
    /// Fair-share weight (positive); `null`: 1.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>))]
    pub weight: Option<Option<f64>>,
    /// Who may submit; `null`: everyone.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<String>>))]
    pub members: Option<Option<Vec<String>>>,
    /// Priority classes its users may ask for; `null`: none.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<String>>))]
    pub priority_classes: Option<Option<Vec<String>>>,
    /// The group of its team folder (from 1000 up); `null`: no team folder (the directory stays).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>))]
    pub team_gid: Option<Option<u32>>,
    /// The longest a workload in it may run (`"24h"`, from 1s to 366d); `null`: 366 days.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Seconds>))]
    pub max_runtime: Option<Option<Seconds>>,
    /// The most a workload in it may write outside its mounts (`"50GiB"`); `null`: no maximum.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Bytes>))]
    pub max_disk: Option<Option<Bytes>>,
}

/// `POST /api/v1/queues` (admin): a new team queue; what is left out is unset (see [`QueuePatch`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateQueueRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<LimitView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_limit: Option<LimitView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<LimitView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<Vec<String>>,
    /// The group of its team folder (`/team/<name>`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_gid: Option<u32>,
    /// The longest a workload in it may run (`"24h"`); absent: 366 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runtime: Option<Seconds>,
    /// The most a workload in it may write outside its mounts (`"50GiB"`); absent: no maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk: Option<Bytes>,
}

impl CreateQueueRequest {
    /// The patch that turns an open queue into the one asked for.
    pub fn patch(&self) -> QueuePatch {
        QueuePatch {
            guarantee: self.guarantee.map(|l| Some(l.into())),
            borrow_limit: self.borrow_limit.map(|l| Some(l.into())),
            user_limit: self.user_limit.map(|l| Some(l.into())),
            weight: self.weight.map(Some),
            members: self.members.clone().map(Some),
            priority_classes: self.priority_classes.clone().map(Some),
            team_gid: self.team_gid.map(Some),
            max_runtime: self.max_runtime.map(Some),
            max_disk: self.max_disk.map(Some),
        }
    }
}

/// A patch the rules refuse: the field at fault (`user_limit.gpus`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InvalidField {
    /// The field, dotted.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

fn invalid(field: &str, reason: impl Into<String>) -> InvalidField {
    InvalidField { field: field.to_owned(), reason: reason.into() }
}

/// Whole units (`1.5` GPUs or cores) as milli-units, refusing what is not a finite amount ≥ 0.
fn milli(field: &str, v: f64) -> Result<u64, InvalidField> {
    if !v.is_finite() || v < 0.0 {
        return Err(invalid(field, format!("{v} is not an amount (a number ≥ 0)")));
    }
    let m = (v * 1000.0).round();
    if m > 1e15 {
        return Err(invalid(field, format!("{v} is too large")));
    }
    Ok(m as u64)
}

/// Merges `p` into `limit` (components `None`: unlimited).
fn merge_limit(field: &str, limit: Limit, p: &LimitPatch) -> Result<Limit, InvalidField> {
    let mut l = limit;
    if let Some(g) = p.gpus {
        l.gpu_milli = g.map(|v| milli(&format!("{field}.gpus"), v)).transpose()?;
    }
    if let Some(c) = p.cpus {
        l.cpu_milli = c.map(|v| milli(&format!("{field}.cpus"), v)).transpose()?;
    }
    if let Some(m) = p.memory {
        l.memory = m.map(|b| b.0);
    }
    Ok(l)
}

fn names(field: &str, list: &[String], what: &'static str) -> Result<(), InvalidField> {
    for n in list {
        crate::names::validate(what, n).map_err(|e| invalid(field, e.to_string()))?;
    }
    Ok(())
}

impl QueueDef {
    /// This queue with `p` applied, or the first field the rules refuse. Priority classes are checked
    /// for their form only; whether they exist is the configuration's business.
    pub fn patched(&self, p: &QueuePatch) -> Result<QueueDef, InvalidField> {
        let mut q = self.clone();
        if let Some(g) = &p.guarantee {
            q.guarantee = match g {
                None => Amounts::default(),
                Some(g) => {
                    let cur = Limit {
                        gpu_milli: Some(q.guarantee.gpu_milli),
                        cpu_milli: Some(q.guarantee.cpu_milli),
                        memory: Some(q.guarantee.memory),
                    };
                    let l = merge_limit("guarantee", cur, g)?;
                    Amounts {
                        gpu_milli: l.gpu_milli.unwrap_or(0),
                        cpu_milli: l.cpu_milli.unwrap_or(0),
                        memory: l.memory.unwrap_or(0),
                    }
                }
            };
        }
        if let Some(b) = &p.borrow_limit {
            q.borrow_limit =
                b.as_ref().map(|b| merge_limit("borrow_limit", q.borrow_limit.unwrap_or_default(), b)).transpose()?;
        }
        if let Some(u) = &p.user_limit {
            q.user_limit =
                u.as_ref().map(|u| merge_limit("user_limit", q.user_limit.unwrap_or_default(), u)).transpose()?;
        }
        if let Some(w) = p.weight {
            let w = w.unwrap_or(1.0);
            if !w.is_finite() || w <= 0.0 || w > 1e6 {
                return Err(invalid("weight", format!("{w} is not a weight (a number > 0, at most 1000000)")));
            }
            q.weight = w;
        }
        if let Some(m) = &p.members {
            if let Some(m) = m {
                names("members", m, "user name")?;
            }
            q.members = m.clone();
        }
        if let Some(c) = &p.priority_classes {
            let c = c.clone().unwrap_or_default();
            names("priority_classes", &c, "priority class")?;
            q.priority_classes = c;
        }
        if let Some(g) = p.team_gid {
            if let Some(g) = g {
                crate::team::check_gid(g).map_err(|e| invalid("team_gid", e))?;
            }
            q.team_gid = g;
        }
        if let Some(m) = p.max_runtime {
            if m.is_some_and(|m| m.0 == 0 || m > MAX_RUNTIME) {
                return Err(invalid("max_runtime", "must be from 1s to 366d"));
            }
            q.max_runtime = m;
        }
        if let Some(d) = p.max_disk {
            if d.is_some_and(|d| d.0 < MIN_DISK) {
                return Err(invalid("max_disk", "must be at least 16MiB"));
            }
            q.max_disk = d;
        }
        Ok(q)
    }
}

/// A limit as people read it: whole GPUs and cores, bytes.
pub fn limit_view(l: Limit) -> LimitView {
    LimitView {
        gpus: l.gpu_milli.map(|v| v as f64 / 1000.0),
        cpus: l.cpu_milli.map(|v| v as f64 / 1000.0),
        memory: l.memory.map(Bytes),
    }
}
/// A limit on the three resources; a resource it does not name is not limited.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LimitView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_merge_and_null_unsets() {
        let mut q = QueueDef::open("vision");
        q.user_limit = Some(Limit { gpu_milli: Some(1000), cpu_milli: Some(4000), memory: None });
        q.members = Some(vec!["alice".into()]);
        let p: QueuePatch = serde_json::from_str(r#"{"user_limit": {"gpus": 2, "cpus": null}, "weight": 2}"#).unwrap();
        let out = q.patched(&p).unwrap();
        assert_eq!(out.user_limit, Some(Limit { gpu_milli: Some(2000), cpu_milli: None, memory: None }));
        assert_eq!((out.weight, out.members.as_deref()), (2.0, Some(&["alice".to_owned()][..])));
        let p: QueuePatch = serde_json::from_str(r#"{"user_limit": null, "members": null}"#).unwrap();
        let out = q.patched(&p).unwrap();
        assert_eq!((out.user_limit, out.members), (None, None));
        // an empty patch changes nothing
        assert_eq!(q.patched(&QueuePatch::default()).unwrap(), q);
        // the guarantee merges too, and null means none
        let p: QueuePatch = serde_json::from_str(r#"{"guarantee": {"gpus": 1.5, "memory": "2GiB"}}"#).unwrap();
        let g = q.patched(&p).unwrap().guarantee;
        assert_eq!(g, Amounts { gpu_milli: 1500, cpu_milli: 0, memory: 2 << 30 });
        let p: QueuePatch = serde_json::from_str(r#"{"guarantee": null}"#).unwrap();
        assert_eq!(q.patched(&p).unwrap().guarantee, Amounts::default());
    }

    #[test]
    fn bad_patches_name_the_field() {
        let q = QueueDef::open("vision");
        let field = |json: &str| q.patched(&serde_json::from_str(json).unwrap()).unwrap_err().field;
        assert_eq!(field(r#"{"user_limit": {"gpus": -1}}"#), "user_limit.gpus");
        assert_eq!(field(r#"{"borrow_limit": {"cpus": -0.5}}"#), "borrow_limit.cpus");
        assert_eq!(field(r#"{"weight": 0}"#), "weight");
        assert_eq!(field(r#"{"members": ["Not A Name"]}"#), "members");
        assert_eq!(field(r#"{"team_gid": 0}"#), "team_gid");
        let p: QueuePatch = serde_json::from_str(r#"{"team_gid": 60001}"#).unwrap();
        assert_eq!(q.patched(&p).unwrap().team_gid, Some(60001));
        assert_eq!(field(r#"{"max_runtime": "0s"}"#), "max_runtime");
        assert_eq!(field(r#"{"max_runtime": "400d"}"#), "max_runtime");
        let p: QueuePatch = serde_json::from_str(r#"{"max_runtime": "24h"}"#).unwrap();
        let capped = q.patched(&p).unwrap();
        assert_eq!((capped.max_runtime, capped.runtime_cap()), (Some(Seconds(86_400)), Seconds(86_400)));
        let p: QueuePatch = serde_json::from_str(r#"{"max_runtime": null}"#).unwrap();
        assert_eq!(capped.patched(&p).unwrap().runtime_cap(), MAX_RUNTIME);
        assert_eq!(field(r#"{"max_disk": "1MiB"}"#), "max_disk");
        let p: QueuePatch = serde_json::from_str(r#"{"max_disk": "50GiB"}"#).unwrap();
        assert_eq!(q.patched(&p).unwrap().max_disk, Some(Bytes(50 << 30)));
        assert!(serde_json::from_str::<QueuePatch>(r#"{"user_limits": {}}"#).is_err());
        assert!(serde_json::from_str::<QueuePatch>(r#"{"user_limit": {"gpu": 1}}"#).is_err());
    }

    #[test]
    fn round_trips_through_json_and_refuses_unknown_fields() {
        let mut q = QueueDef::open("vision");
        q.user_limit = Some(Limit { gpu_milli: Some(2000), ..Limit::default() });
        q.members = Some(vec!["alice".into()]);
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<QueueDef>(&json).unwrap(), q);
        assert!(json.contains(r#""user_limit":{"gpu_milli":2000}"#), "unlimited components are left out: {json}");
        assert!(serde_json::from_str::<QueueDef>(r#"{"name":"x","wieght":2}"#).is_err());
        assert_eq!(serde_json::from_str::<QueueDef>(r#"{"name":"x"}"#).unwrap(), QueueDef::open("x"));
    }
}
