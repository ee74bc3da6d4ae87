//! The host's process IDs: every container has a PID limit (`pids_limit`), and all of them together
//! must leave the host room to fork. A quarter of `pid_max` (at least 1024) is kept for the host; the
//! rest holds so many containers' limits, and one user's work at most half of them. A submission whose
//! members would go beyond that, counting every workload that runs or waits to, is refused (429) saying
//! why. Where the engine runs no containers on this host (Slurm), nothing is checked unless `pid_max`
//! is configured.

use super::{Kind, ServiceError};
use crate::state::AppState;
use gpuhub_core::user::User;

/// Where the host's `pid_max` is read.
const PID_MAX_FILE: &str = "/proc/sys/kernel/pid_max";

/// How many containers the host's PIDs hold at once, in all and of one user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PidBudget {
    pub pid_max: u64,
    pub pids_limit: u64,
    pub containers: u64,
    pub per_user: u64,
}

/// The budget of a host with `pid_max` for containers limited to `pids_limit` processes each; `None`
/// when there is nothing to count (no limit per container).
pub(crate) fn budget(pid_max: u64, pids_limit: i64) -> Option<PidBudget> {
    let pids_limit = u64::try_from(pids_limit).ok().filter(|l| *l > 0)?;
    let kept = (pid_max / 4).max(1024);
    let containers = pid_max.saturating_sub(kept) / pids_limit;
    Some(PidBudget { pid_max, pids_limit, containers, per_user: (containers / 2).max(containers.min(1)) })
}

/// This host's budget: `pid_max` as configured, else (where the engine runs containers here) as the
/// kernel says; `None` when nothing is to be checked.
fn host_budget(st: &AppState) -> Option<PidBudget> {
    let pid_max = match st.config.pid_max {
        Some(0) => return None,
        Some(n) => n,
        None if st.engine.name() == "docker" => {
            match std::fs::read_to_string(PID_MAX_FILE).map(|s| s.trim().parse::<u64>()) {
                Ok(Ok(n)) => n,
                _ => {
                    tracing::warn!("cannot read {PID_MAX_FILE}: containers' PID limits are not checked together");
                    return None;
                }
            }
        }
        None => return None,
    };
    budget(pid_max, st.config.pids_limit)
}

/// Refuses `members` more containers of `caller`'s when they would take the host's PIDs, or this
/// user's share of them, beyond the budget.
pub(crate) async fn check(st: &AppState, caller: &User, members: u64) -> Result<(), ServiceError> {
    let Some(b) = host_budget(st) else { return Ok(()) };
    let how = format!(
        "the host's pid_max {} less a quarter kept for the host holds {} containers of pids_limit {} ({} of one \
         user's)",
        b.pid_max, b.containers, b.pids_limit, b.per_user
    );
    let after = "submit again once some work has ended, or ask an admin to lower pids_limit";
    let all = st.store.count_active_members(None).await?;
    if all + members > b.containers {
        return Err(ServiceError::new(
            Kind::TooMany,
            format!(
                "too many containers: {how}, and {all} run or wait to; these {members} would go beyond that; {after}"
            ),
        ));
    }
    let mine = st.store.count_active_members(Some(&caller.username)).await?;
    if !caller.is_admin() && mine + members > b.per_user {
        return Err(ServiceError::new(
            Kind::TooMany,
            format!(
                "too many containers: {how}; {} has {mine} running or waiting, and these {members} would go \
                 beyond that; {after}",
                caller.username
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets() {
        let b = budget(32_768, 4096).unwrap();
        assert_eq!((b.containers, b.per_user), (6, 3), "a quarter kept: 24576 / 4096");
        let b = budget(4_194_304, 4096).unwrap();
        assert_eq!((b.containers, b.per_user), (768, 384));
        assert_eq!(budget(4096, 4096).unwrap().containers, 0, "not even one: every submission is refused");
        assert_eq!(budget(10_000, 4096).unwrap().per_user, 1, "one container is one user's");
        assert_eq!(budget(32_768, 0), None);
        assert_eq!(budget(32_768, -1), None);
    }
}
