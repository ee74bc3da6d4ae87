//! The service layer: finding a workload for a caller, deciding who may act on it or enter it, and the
//! workload operations (submit, stop, start, delete). The API, the SSH gateway and the browser pages
//! (apps, terminal) all go through here, so a rule is written once. Nothing here knows HTTP: errors are
//! typed [`ServiceError`]s that each front end turns into its own answer (a problem document, an SSH
//! refusal).

mod edit;
mod pids;
pub mod ready;
mod submit;
pub use submit::WORKSPACE_KEEP_ALIVE;

pub use edit::edit;
pub use submit::{MAX_FIELD_BYTES, SERVICE_APP, cap_error, check_sizes, submit};

use crate::state::AppState;
use gpuhub_core::api::WorkloadView;
use gpuhub_core::stop::StopReason;
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::MemberRef;
use gpuhub_store::StoreError;

/// What kind of failure a [`ServiceError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Nothing the caller may see by that name.
    NotFound,
    /// The caller may see it but not do this.
    Forbidden,
    /// The request's content is wrong (a field out of range, an unknown queue).
    Invalid,
    /// The object's state does not allow it now.
    Conflict,
    /// A per-user limit on counts is reached.
    TooMany,
    /// The object exists but is not usable now (a stopped workspace): try again once it runs.
    NotRunning,
    /// Something the service depends on is down for now.
    Unavailable,
    /// A dependency failed the request.
    Upstream,
    /// No room left to store it.
    StorageFull,
    /// A bug or an unexpected failure.
    Internal,
}

/// Why the service could not do what was asked, for a person.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct ServiceError {
    /// What kind of failure.
    pub kind: Kind,
    /// What exactly is wrong.
    pub detail: String,
    /// The request field at fault, where one is (`resources.gpus`): forms show the error beside it.
    pub field: Option<String>,
    /// The front end's own answer, when a lower layer already decided it (a store or engine error).
    pub(crate) api: Option<Box<crate::error::ApiError>>,
}

impl ServiceError {
    /// An error of `kind`.
    pub fn new(kind: Kind, detail: impl Into<String>) -> Self {
        Self { kind, detail: detail.into(), field: None, api: None }
    }
    /// [`Kind::Invalid`], naming the request field at fault.
    pub fn invalid_at(field: &str, detail: impl Into<String>) -> Self {
        Self::invalid(detail).at(field)
    }
    /// The same error, naming the request field at fault.
    pub fn at(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }
    /// [`Kind::Invalid`].
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, detail)
    }
    /// [`Kind::NotFound`].
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, detail)
    }
}

macro_rules! through_api {
    ($t:ty) => {
        impl From<$t> for ServiceError {
            fn from(e: $t) -> Self {
                let api = crate::error::ApiError::from(e);
                let kind = match api.status.as_u16() {
                    404 => Kind::NotFound,
                    403 => Kind::Forbidden,
                    409 => Kind::Conflict,
                    429 => Kind::TooMany,
                    503 => Kind::Unavailable,
                    507 => Kind::StorageFull,
                    500 => Kind::Internal,
                    s if s >= 500 => Kind::Upstream,
                    _ => Kind::Invalid,
                };
                Self { kind, detail: api.detail.clone(), field: api.field.clone(), api: Some(Box::new(api)) }
            }
        }
    };
}
through_api!(StoreError);
through_api!(gpuhub_driver::EngineError);
through_api!(gpuhub_controller::ControlError);
through_api!(gpuhub_core::CoreError);

/// A way into a running workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Its apps and terminal in a browser (`admins_open_apps` lets admins in).
    Browser,
    /// The SSH gateway (`admins_enter_workspaces` lets admins in).
    Ssh,
}

/// Finds a workload the caller may act on: their own, or (for admins) `owner`'s. Another user's name
/// is [`Kind::NotFound`], as if it did not exist.
pub async fn lookup(st: &AppState, caller: &User, name: &str, owner: Option<&str>) -> Result<Workload, ServiceError> {
    let owner = match owner {
        Some(o) if caller.is_admin() => o,
        _ => caller.username.as_str(),
    };
    match st.store.get_workload(owner, name).await {
        Ok(w) => Ok(w),
        Err(StoreError::NotFound { .. }) => Err(ServiceError::not_found(format!("no workload named {name:?}"))),
        Err(e) => Err(e.into()),
    }
}

/// Whether `caller` may enter `owner`'s workspaces by `way`: the owner, and admins when the
/// configuration lets them.
pub fn may_enter(st: &AppState, caller: &User, owner: &str, way: Way) -> bool {
    let admin_may = match way {
        Way::Browser => st.config.admins_open_apps,
        Way::Ssh => st.config.admins_enter_workspaces,
    };
    caller.username == owner || (caller.is_admin() && admin_may)
}

/// The workspace `owner/name` if `caller` may enter it by `way`; [`Kind::NotFound`] otherwise (also for
/// another user's), and for the workspace of a disabled account.
pub async fn enterable(
    st: &AppState,
    caller: &User,
    owner: &str,
    name: &str,
    way: Way,
) -> Result<Workload, ServiceError> {
    let not_found = || ServiceError::not_found(format!("no workspace named {name:?}"));
    if caller.disabled || !may_enter(st, caller, owner, way) {
        return Err(not_found());
    }
    let w = match st.store.get_workload(owner, name).await {
        Ok(w) => w,
        Err(StoreError::NotFound { .. }) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    if owner != caller.username && st.store.get_user(owner).await?.disabled {
        return Err(not_found());
    }
    Ok(w)
}

/// The service `owner/name` if `caller` may reach its port (its app [`SERVICE_APP`], nothing else of
/// it) in a browser: as [`enterable`], or any enabled signed-in user where its owner opened it to
/// `users` or the `public`; [`Kind::NotFound`] otherwise.
pub async fn reachable_service(
    st: &AppState,
    caller: &User,
    owner: &str,
    name: &str,
) -> Result<Workload, ServiceError> {
    let not_found = || ServiceError::not_found(format!("no service named {name:?}"));
    if caller.disabled {
        return Err(not_found());
    }
    let w = match st.store.get_workload(owner, name).await {
        Ok(w) => w,
        Err(StoreError::NotFound { .. }) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let opened = w.service.as_ref().is_some_and(|s| s.spec.access != gpuhub_core::service::ServiceAccess::Owner);
    if !opened {
        return enterable(st, caller, owner, name, Way::Browser).await;
    }
    if owner != caller.username && st.store.get_user(owner).await?.disabled {
        return Err(not_found());
    }
    Ok(w)
}

/// The member of a running workload one enters (member 0), or why there is none.
pub fn running_member(w: &Workload) -> Result<MemberRef, ServiceError> {
    match (&w.run_id, w.state) {
        (Some(run), WorkloadState::Running) => Ok(MemberRef::new(run, 0)),
        (_, state) => Err(ServiceError::new(Kind::NotRunning, not_running(w.kind, &w.name, state))),
    }
}

/// Why `name` cannot be entered in `state`, with the advice that applies there: one on its way waits
/// (`gpuhub ps` says why), one that ended is started again.
fn not_running(kind: gpuhub_core::workload::WorkloadKind, name: &str, state: WorkloadState) -> String {
    use WorkloadState::*;
    match state {
        Queued | Pulling | Starting => {
            format!(
                "{} {name} is {state}, not running yet: it opens once it runs (`gpuhub ps` says why it waits)",
                kind.as_str()
            )
        }
        _ => format!("{} {name} is {state}, not running: start it with `gpuhub start {name}`", kind.as_str()),
    }
}

/// A workload as the caller sees it: with the explanation of why it waits, when it does.
pub fn view(st: &AppState, w: &Workload) -> WorkloadView {
    let mut v = WorkloadView::from(w);
    if w.state == WorkloadState::Queued {
        v.explanation = st.controller.explanation(&w.id);
    }
    if w.state == WorkloadState::Running {
        v.idle = st.idle.view(&w.id, st.clock.now());
        v.gpu_guard = st.guard.view(&w.id);
    }
    if w.state == WorkloadState::Pulling {
        v.pull = st.controller.pull_progress(&w.id);
    }
    if let (Some(s), Some(app)) = (v.service.as_mut(), w.apps.iter().find(|a| a.name == SERVICE_APP)) {
        let base = st.config.public_url.as_deref().unwrap_or_default().trim_end_matches('/');
        s.url = Some(format!("{base}{}", app.base_url(&w.owner, &w.name)));
    }
    v
}

/// Stops `w` for `caller`; answers once its run has stopped.
pub async fn stop(st: &AppState, caller: &User, w: &Workload) -> Result<Workload, ServiceError> {
    let reason = StopReason::User { by: caller.username.clone(), at: st.clock.now() };
    Ok(st.controller.stop(&w.id, reason).await?)
}

/// Queues an ended `w` again (a workspace keeps its home); counts against the owner's queued cap as a
/// submission does (admins are exempt).
pub async fn start(st: &AppState, caller: &User, w: &Workload) -> Result<Workload, ServiceError> {
    if !caller.is_admin() && w.state.is_terminal() {
        let counts = st.store.count_owner_workloads(&w.owner).await?;
        let limits = &st.config.limits;
        if counts.queued >= limits.max_queued_per_user {
            return Err(cap_error(&w.owner, limits, gpuhub_store::CapReached::Queued { count: counts.queued }));
        }
    }
    let w = st.controller.start(&w.id).await?;
    st.controller.kick();
    Ok(w)
}

/// Deletes `w` with its run and logs.
pub async fn delete(st: &AppState, w: &Workload) -> Result<(), ServiceError> {
    Ok(st.controller.delete(&w.id).await?)
}
