//! Homes of accounts: usage shown with the account, quotas changed by admins, homes released
//! when an account is deleted.

use super::ServiceError;
use crate::state::AppState;
use gpuhub_api::{HomeView, UserView};
use gpuhub_core::quantity::Bytes;
use gpuhub_core::user::User;
use gpuhub_core::workload::WorkloadState;
use gpuhub_homes::HomeError;
use gpuhub_store::WorkloadFilter;

/// `u` as the API shows it, with how full their home is (left out when it cannot be read).
pub async fn user_view(st: &AppState, u: &User) -> UserView {
    let mut v = UserView::from(u);
    match st.homes.usage(&u.username).await {
        Ok(h) => v.home = h.map(|h| HomeView { used_bytes: h.used, quota_bytes: h.quota }),
        Err(e) => tracing::warn!(user = %u.username, error = %e, "cannot read the home's usage"),
    }
    v
}

/// The quota in force for `user` were their own quota `own`: theirs, or the configured default.
fn in_force(st: &AppState, user: &User, own: Option<u64>) -> Option<u64> {
    User { home_quota: own, ..user.clone() }.home_quota_or(st.config.home_quota.map(|q| q.0))
}

/// Whether `owner` has work starting or running (a loop-mounted home then cannot shrink).
async fn busy(st: &AppState, owner: &str) -> Result<bool, ServiceError> {
    let f = WorkloadFilter {
        owner: Some(owner.to_owned()),
        states: Some(vec![WorkloadState::Starting, WorkloadState::Running]),
    };
    Ok(!st.store.list_workloads(&f).await?.is_empty())
}

/// The checked quota `text` asks for `user`: what the store keeps (`None`: the default), refused as
/// [`Kind::Invalid`](super::Kind::Invalid) naming `home_quota` when it is malformed, too small or cannot
/// be enforced here, and as [`Kind::Conflict`](super::Kind::Conflict) when the home already holds more.
pub async fn check_quota(st: &AppState, user: &User, text: &str) -> Result<Option<u64>, ServiceError> {
    let own = gpuhub_core::user::parse_home_quota(text)?;
    let Some(q) = in_force(st, user, own) else { return Ok(own) };
    let invalid = |reason: String| ServiceError::invalid_at("home_quota", format!("invalid home_quota: {reason}"));
    if !st.homes.enforces_quotas() {
        return Err(invalid("this server enforces no home quotas (home_backend = \"dir\")".into()));
    }
    if q < gpuhub_homes::MIN_LOOP_QUOTA {
        return Err(invalid(format!("{} is less than the least accepted, 16MiB", Bytes(q))));
    }
    if let Ok(Some(h)) = st.homes.usage(&user.username).await
        && h.used > q
    {
        return Err(ServiceError::conflict(format!(
            "home_quota: the home of {} holds {}, more than the quota of {} asked for",
            user.username,
            Bytes(h.used),
            Bytes(q)
        ))
        .at("home_quota"));
    }
    Ok(own)
}

/// Stores `user`'s new quota and applies it to their home now when it exists. A loop-mounted home that
/// must be unmounted to change size while its owner's work runs gets it at their next start with
/// nothing else running.
pub async fn set_quota(st: &AppState, user: &User, own: Option<u64>) -> Result<(), ServiceError> {
    st.store.set_home_quota(&user.username, own).await?;
    if st.homes.usage(&user.username).await.ok().flatten().is_none() {
        return Ok(());
    }
    let quota = in_force(st, user, own);
    let busy = busy(st, &user.username).await?;
    match st.homes.ensure(&user.username, user.uid, quota, busy).await {
        Ok(_) | Err(HomeError::Busy { .. }) => Ok(()),
        Err(e @ HomeError::BelowUsage { .. }) => {
            Err(ServiceError::conflict(format!("home_quota: {e}")).at("home_quota"))
        }
        Err(e) => Err(ServiceError::internal(e)),
    }
}

/// Detaches `name`'s home and moves it into `<data_dir>/archive/` (`archive`) or deletes it.
pub async fn dispose(st: &AppState, name: &str, archive: bool) -> Result<(), ServiceError> {
    let paths = st.homes.release(name).await.map_err(ServiceError::internal)?;
    let at = st.clock.now().timestamp_millis();
    for p in paths {
        if !archive {
            let gone = if p.is_dir() { tokio::fs::remove_dir_all(&p).await } else { tokio::fs::remove_file(&p).await };
            gone.map_err(ServiceError::internal)?;
            continue;
        }
        let dir = st.data_dir.join("archive");
        tokio::fs::create_dir_all(&dir).await.map_err(ServiceError::internal)?;
        // the directory, and beside it the image that holds its files where there is one
        let ext =
            p.extension().filter(|_| p.is_file()).map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
        let to = dir.join(format!("home-{name}-{at}{ext}"));
        tokio::fs::rename(&p, &to).await.map_err(ServiceError::internal)?;
    }
    Ok(())
}
