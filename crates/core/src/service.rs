//! Services: workloads of kind `service`, kept running. A service's run that ends by itself (any exit,
//! while nobody stopped it) is started again after a backoff that doubles with each quick failure
//! ([`backoff`]); after [`CRASH_LOOP_AFTER`] failures in a row it is in crash-loop, says so, and keeps
//! being tried at the longest backoff. A run that stayed up [`STABLE_AFTER`] starts the count afresh.
//! Its port is served through the hub's proxy once a readiness check (an HTTP path or a command)
//! passes. The state lives with the workload ([`Service`]) and changes only through
//! [`crate::workload::Workload::apply`].

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// The run label naming a service's port (for engines that check its readiness themselves: a
/// Kubernetes Deployment's readiness probe).
pub const LABEL_PORT: &str = "gpuhub.service.port";
/// The run label holding a service's readiness check as JSON (`{"http": "/"}`).
pub const LABEL_READY: &str = "gpuhub.service.ready";
/// The label an engine that restarts a service's container itself (Kubernetes) reports the restarts
/// of the run's member with, in a run's status.
pub const LABEL_RESTARTS: &str = "gpuhub.restarts";
/// The label an engine that rolls a service out itself (Kubernetes) reports where the rollout of the
/// run's current terms stands with, in a run's status: [`ROLLOUT_PROGRESSING`], [`ROLLOUT_COMPLETE`]
/// or [`ROLLOUT_FAILED`] (then [`LABEL_ROLLOUT_WHY`] says why).
pub const LABEL_ROLLOUT: &str = "gpuhub.rollout";
/// Why the engine's rollout failed, for people.
pub const LABEL_ROLLOUT_WHY: &str = "gpuhub.rollout.why";
/// [`LABEL_ROLLOUT`]: the new member is not ready yet.
pub const ROLLOUT_PROGRESSING: &str = "progressing";
/// [`LABEL_ROLLOUT`]: the new member serves, the old one is gone.
pub const ROLLOUT_COMPLETE: &str = "complete";
/// [`LABEL_ROLLOUT`]: the rollout stalled (its deadline passed, or the new member crash-loops).
pub const ROLLOUT_FAILED: &str = "failed";

/// The first wait before a failed service is started again.
pub const BACKOFF_FIRST: TimeDelta = TimeDelta::seconds(10);
/// The longest wait between tries.
pub const BACKOFF_MAX: TimeDelta = TimeDelta::seconds(300);
/// Failures in a row after which a service is in crash-loop.
pub const CRASH_LOOP_AFTER: u32 = 5;
/// A run that stayed up this long was no quick failure: the backoff starts afresh after it.
pub const STABLE_AFTER: TimeDelta = TimeDelta::seconds(600);

/// The wait before try `failures + 1`: 10s, 20s, 40s … at most 5 minutes.
pub fn backoff(failures: u32) -> TimeDelta {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_FIRST * (1 << doublings)).min(BACKOFF_MAX)
}

/// How a service shows it is ready to serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum ReadyCheck {
    /// An HTTP GET of this path on its port answers with a status below 400.
    Http(String),
    /// This command, run in it, exits 0.
    Command(Vec<String>),
}

impl ReadyCheck {
    /// As the run label [`LABEL_READY`] holds it: JSON (`{"http":"/"}`).
    pub fn to_label(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Who may reach a service's URL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ServiceAccess {
    /// Its owner (and admins where `admins_open_apps` allows).
    #[default]
    Owner,
    /// Every signed-in user.
    Users,
    /// Anyone, signed in or not.
    Public,
}

/// What a service asks for: the port it serves, how it shows it is ready, who may reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// The container port it serves (HTTP).
    pub port: u16,
    /// Its readiness check; default an HTTP GET of `/` on `port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyCheck>,
    /// Who may reach its URL; default its owner.
    #[serde(default)]
    pub access: ServiceAccess,
}

impl ServiceSpec {
    /// Checks the port and the readiness check.
    pub fn validate(&self) -> Result<(), crate::CoreError> {
        if self.port == 0 {
            return Err(crate::CoreError::invalid("service.port", "must be from 1 to 65535"));
        }
        match &self.ready {
            Some(ReadyCheck::Http(p)) if !p.starts_with('/') || p.chars().any(char::is_control) => {
                Err(crate::CoreError::invalid("service.ready.http", format!("{p:?} is not a path (it starts with /)")))
            }
            Some(ReadyCheck::Command(c)) if c.is_empty() || c.iter().any(|a| a.contains('\0')) => {
                Err(crate::CoreError::invalid("service.ready.command", "needs a program and arguments without NUL"))
            }
            _ => Ok(()),
        }
    }

    /// The readiness check in force.
    pub fn ready_check(&self) -> ReadyCheck {
        self.ready.clone().unwrap_or_else(|| ReadyCheck::Http("/".into()))
    }
}

/// A service's terms and where its restarts stand, kept with the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Service {
    /// What it asked for.
    pub spec: ServiceSpec,
    /// How many times its run was started again after it ended by itself.
    #[serde(default)]
    pub restarts: u32,
    /// Quick failures in a row (runs that ended before [`STABLE_AFTER`]).
    #[serde(default)]
    pub failures: u32,
    /// Not started again before this (the backoff), while it waits to be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<DateTime<Utc>>,
    /// Whether it failed [`CRASH_LOOP_AFTER`] times in a row (and is tried at the longest backoff).
    #[serde(default)]
    pub crash_loop: bool,
    /// A rolling update under way: the new terms' run beside the serving one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// How its last update went (or goes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdateReport>,
    /// The restarts the engine last reported of its run's member, where the engine restarts it itself
    /// (counted into `restarts` as they grow).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub engine_restarts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Service {
    /// A new service of `spec`: no restarts yet.
    pub fn new(spec: ServiceSpec) -> Self {
        Self {
            spec,
            restarts: 0,
            failures: 0,
            restart_at: None,
            crash_loop: false,
            rollout: None,
            update: None,
            engine_restarts: 0,
        }
    }

    /// Its run ended by itself with `code` at `now` after running since `started` (if it ran): counts
    /// the restart and the failure, and sets when it may start again. Returns the message to show.
    pub fn ended(&mut self, code: i64, started: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
        let stable = started.is_some_and(|s| now - s >= STABLE_AFTER);
        self.failures = if stable { 1 } else { self.failures.saturating_add(1) };
        self.restarts = self.restarts.saturating_add(1);
        let wait = backoff(self.failures);
        self.restart_at = Some(now + wait);
        self.crash_loop = self.failures >= CRASH_LOOP_AFTER;
        let wait = crate::Seconds(wait.num_seconds().max(0) as u64);
        if self.crash_loop {
            format!("crash-loop: exited with code {code}, {} times in a row; restarting in {wait}", self.failures)
        } else {
            format!("exited with code {code}; restarting in {wait} (restart {})", self.restarts)
        }
    }

    /// Whether it waits out its backoff at `now`.
    pub fn backing_off(&self, now: DateTime<Utc>) -> bool {
        self.restart_at.is_some_and(|t| t > now)
    }

    /// The engine reports `count` restarts of the run's member (it restarts it itself): the new ones
    /// are counted. A count below the last one is a new member's (a rollout's new pod).
    pub fn engine_restarted(&mut self, count: u32) {
        let new = if count >= self.engine_restarts { count - self.engine_restarts } else { count };
        self.restarts = self.restarts.saturating_add(new);
        self.engine_restarts = count;
    }

    /// Started again by a person: the failures and the backoff are forgotten (the restarts stay).
    pub fn reset(&mut self) {
        self.failures = 0;
        self.restart_at = None;
        self.crash_loop = false;
    }
}

/// A service as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceView {
    /// The container port it serves.
    pub port: u16,
    /// Its readiness check.
    pub ready_check: ReadyCheck,
    /// Who may reach its URL.
    pub access: ServiceAccess,
    /// Whether it is in crash-loop (it failed [`CRASH_LOOP_AFTER`] times in a row).
    pub crash_loop: bool,
    /// When it is started again, while it waits out its backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at: Option<DateTime<Utc>>,
    /// Whether its readiness check passes now (running services the hub has checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Its URL through the hub's proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How its last update went, or goes while its new run starts beside the serving one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdateReport>,
}

impl From<&Service> for ServiceView {
    fn from(s: &Service) -> Self {
        ServiceView {
            port: s.spec.port,
            ready_check: s.spec.ready_check(),
            access: s.spec.access,
            crash_loop: s.crash_loop,
            restart_at: s.restart_at,
            ready: None,
            url: None,
            update: s.update.clone(),
        }
    }
}

/// The longest a rolling update's new run may take to pass its readiness check; past it the update
/// fails and the serving run goes on.
pub const ROLLOUT_DEADLINE: TimeDelta = TimeDelta::seconds(300);

/// A rolling update under way: a run of the new terms started beside the serving one, which the URL
/// keeps going to until the new run passes its readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rollout {
    /// The new image.
    pub image: String,
    /// The new command.
    pub command: Vec<String>,
    /// The new environment.
    pub env: std::collections::BTreeMap<String, String>,
    /// What changes, and by whom (`image a → b, command (by alice)`).
    pub change: String,
    /// The new run, once the engine took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// Its member (node and GPUs) as placed.
    pub members: Vec<crate::member::Member>,
    /// When it began to hold resources (its own holding, beside the serving run's).
    pub since: DateTime<Utc>,
    /// It fails unless ready by then.
    pub deadline: DateTime<Utc>,
}

/// Where a service's update stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum UpdateState {
    /// The new run starts beside the serving one.
    Rolling,
    /// The new run serves; the old one was stopped.
    Done,
    /// The new run was not ready in time or ended: the old one kept serving, with the old terms.
    Failed,
    /// Both runs could not be held at once: the old run was stopped, then the new one started.
    StopThenStart,
}

/// How a service's last update went, as its view and history show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UpdateReport {
    /// Where it stands.
    pub state: UpdateState,
    /// When it got there.
    pub at: DateTime<Utc>,
    /// One line for people.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let secs: Vec<i64> = (1..=7).map(|f| backoff(f).num_seconds()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[test]
    fn quick_failures_end_in_crash_loop_and_a_stable_run_starts_afresh() {
        let spec = ServiceSpec { port: 8080, ready: None, access: ServiceAccess::Owner };
        let mut s = Service::new(spec);
        let mut now = t(1000);
        for i in 1..CRASH_LOOP_AFTER {
            let msg = s.ended(1, Some(now - TimeDelta::seconds(1)), now);
            assert!(!s.crash_loop && msg.contains(&format!("(restart {i})")), "{msg}");
            assert!(s.backing_off(now) && !s.backing_off(now + backoff(i)));
            now += TimeDelta::hours(1);
        }
        let msg = s.ended(1, None, now);
        assert!(s.crash_loop, "{s:?}");
        assert_eq!(msg, "crash-loop: exited with code 1, 5 times in a row; restarting in 2m40s");
        assert_eq!(s.restart_at, Some(now + TimeDelta::seconds(160)));
        // an hour up: no quick failure, the count starts again and crash-loop ends
        let msg = s.ended(0, Some(now), now + TimeDelta::hours(1));
        assert_eq!((s.failures, s.restarts, s.crash_loop), (1, 6, false));
        assert_eq!(msg, "exited with code 0; restarting in 10s (restart 6)");
        s.reset();
        assert_eq!((s.failures, s.restart_at, s.restarts), (0, None, 6));
    }

    #[test]
    fn specs_are_checked_and_read_as_documented() {
        let s: ServiceSpec = serde_json::from_str(r#"{"port": 8080, "ready": {"http": "/healthz"}}"#).unwrap();
        assert_eq!((s.ready_check(), s.access), (ReadyCheck::Http("/healthz".into()), ServiceAccess::Owner));
        let s: ServiceSpec =
            serde_json::from_str(r#"{"port": 1, "ready": {"command": ["true"]}, "access": "public"}"#).unwrap();
        assert!(s.validate().is_ok() && s.access == ServiceAccess::Public);
        assert_eq!(
            serde_json::from_str::<ServiceSpec>(r#"{"port": 1}"#).unwrap().ready_check(),
            ReadyCheck::Http("/".into())
        );
        let bad = |j: &str| serde_json::from_str::<ServiceSpec>(j).unwrap().validate().unwrap_err().to_string();
        assert!(bad(r#"{"port": 0}"#).contains("service.port"));
        assert!(bad(r#"{"port": 1, "ready": {"http": "healthz"}}"#).contains("not a path"));
        assert!(bad(r#"{"port": 1, "ready": {"command": []}}"#).contains("service.ready.command"));
        assert!(serde_json::from_str::<ServiceSpec>(r#"{"port": 1, "prot": 2}"#).is_err());
    }
}
