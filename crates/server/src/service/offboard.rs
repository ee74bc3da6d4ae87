//! What ends when an account is disabled (by an admin, or gone from the directory).

use super::ServiceError;
use crate::state::AppState;
use gpuhub_controller::ControlError;
use gpuhub_core::user::User;
use gpuhub_core::workload::WorkloadState;
use gpuhub_store::WorkloadFilter;

/// Disables `user`: tokens and sessions revoked, open SSH connections and browser terminals closed,
/// running work stopped (unless `keep_workloads`); queued work does not start while disabled.
pub async fn offboard(st: &AppState, user: &User, keep_workloads: bool) -> Result<(), ServiceError> {
    st.store.set_disabled(&user.username, true).await?;
    st.store.delete_user_tokens(user.id).await?;
    st.revocations.revoke(&user.username);
    if !keep_workloads {
        stop_all(st, &user.username).await?;
    }
    st.controller.kick();
    Ok(())
}

/// Stops every starting or running workload of `owner`.
async fn stop_all(st: &AppState, owner: &str) -> Result<(), ServiceError> {
    let filter = WorkloadFilter {
        owner: Some(owner.to_owned()),
        states: Some(vec![WorkloadState::Starting, WorkloadState::Running]),
    };
    // and what waits in an engine's own queue (Slurm), which would otherwise start there
    let queued = WorkloadFilter { owner: Some(owner.to_owned()), states: Some(vec![WorkloadState::Queued]) };
    let waiting = st.store.list_workloads(&queued).await?.into_iter().filter(|w| w.waits_in_engine());
    for w in st.store.list_workloads(&filter).await?.into_iter().chain(waiting) {
        let reason = gpuhub_core::stop::StopReason::OwnerDisabled { at: st.clock.now() };
        match st.controller.stop(&w.id, reason).await {
            Ok(_) => {}
            // it ended meanwhile
            Err(ControlError::Conflict(_) | ControlError::NotFound(_)) => {}
            Err(ControlError::Store(gpuhub_store::StoreError::NotFound { .. })) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
