//! The service layer: every operation of the hub, once: finding a workload for a caller, deciding who
//! may act on it or enter it, the workload operations (submit, edit, stop, start, delete, logs) and the
//! others by area (accounts, queues, reservations, catalog, keys, homes, usage, metrics). The API, the
//! portal, the SSH gateway and the app proxy all go through here, so a rule is written once. Nothing here
//! knows HTTP or names a front end: errors are typed [`ServiceError`]s of domain kinds that each front
//! end turns into its own answer (a problem document, a page, an SSH refusal).

pub mod accounts;
pub mod catalog;
pub mod credentials;
mod disk;
mod edit;
mod error;
pub mod homes;
pub mod identity;
pub mod images;
pub mod keys;
pub mod listing;
pub mod logs;
pub mod metrics;
pub mod offboard;
mod pids;
pub mod queues;
pub mod ready;
pub mod reservations;
mod submit;
pub mod teams;
pub mod usage;
pub use submit::WORKSPACE_KEEP_ALIVE;

pub use edit::edit;
pub use error::{Kind, Problems, RETRY_AFTER, ServiceError};
pub use submit::{MAX_FIELD_BYTES, SERVICE_APP, cap_error, prepare, submit};

use crate::state::AppState;
use gpuhub_api::WorkloadView;
use gpuhub_core::stop::StopReason;
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::MemberRef;
use gpuhub_store::StoreError;

/// Refuses a caller who is no admin ([`Kind::Forbidden`]).
pub fn require_admin(caller: &User) -> Result<(), ServiceError> {
    if caller.is_admin() { Ok(()) } else { Err(ServiceError::forbidden("this needs an admin account")) }
}

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
    match (&w.run_id, w.state()) {
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
    // the cap its run is given: its own, else the admin's default
    v.disk = w.disk.or(st.config.container_disk);
    if w.state() == WorkloadState::Queued {
        v.explanation = st.controller.explanation(&w.id);
    }
    if w.state() == WorkloadState::Running {
        v.idle = st.idle.view(&w.id, st.clock.now());
        v.gpu_guard = st.guard.view(&w.id);
    }
    if w.state() == WorkloadState::Pulling {
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
    if !caller.is_admin() && w.state().is_terminal() {
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
