//! A service's readiness, checked when its view is asked for, on its serving run
//! ([`gpuhub_controller::ready::check`]: an HTTP GET of its path on its port answering below 400, or its
//! command, run in it as its owner, exiting 0, each bounded by [`CHECK_TIMEOUT`]).

use crate::state::AppState;
use gpuhub_core::workload::{Workload, WorkloadState};

pub use gpuhub_controller::ready::CHECK_TIMEOUT;

/// Whether running service `w` is ready now; `None` for anything else (not a service, not running).
pub async fn check(st: &AppState, w: &Workload) -> Option<bool> {
    let service = w.service.as_ref()?;
    let run = w.run_id.as_deref().filter(|_| w.state() == WorkloadState::Running)?;
    let port = w.members.first().and_then(|m| m.ports.get(super::submit::SERVICE_APP)).copied();
    let port = port.unwrap_or(service.spec.port);
    let check = service.spec.ready_check();
    Some(gpuhub_controller::ready::check(&*st.engine, &st.store, &w.owner, &check, run, port).await)
}
