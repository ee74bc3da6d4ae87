//! Team folders: the directory of each team queue with a `team_gid` (`<teams_dir>/<queue>`, root-owned,
//! its group the queue's, mode 2770: members' files keep the group), made when the queue gets one and
//! again before work mounts it; and the checks a workload's `teams` must pass.

use super::ServiceError;
use crate::state::AppState;
use gpuhub_core::queue::QueueDef;
use gpuhub_core::team::TeamMount;
use gpuhub_core::user::User;
use std::path::{Path, PathBuf};

/// The most team folders one workload mounts.
const MAX_TEAMS: usize = 16;

/// `<teams_dir>/<queue>`.
pub fn folder(st: &AppState, queue: &str) -> PathBuf {
    st.config.teams().join(queue)
}

/// Makes `path` a team folder of group `gid`: `root:gid`, mode 2770 (set-group-id, so that what members
/// make there is the team's).
pub fn ensure_folder(path: &Path, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
        // members' processes reach the folder through its parent
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))?;
    }
    std::fs::create_dir_all(path)?;
    std::os::unix::fs::chown(path, Some(0), Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o2770))
}

/// Claims `q`'s `team_gid` for it: refused when another queue's folder has that group (its members would
/// share that folder) or it is an account's own group; otherwise its folder is made.
pub async fn claim_gid(st: &AppState, q: &QueueDef) -> Result<(), ServiceError> {
    let Some(gid) = q.team_gid else { return Ok(()) };
    let queues = st.store.list_queues().await?;
    if let Some(other) = queues.iter().find(|o| o.name != q.name && o.team_gid == Some(gid)) {
        return Err(ServiceError::conflict(format!(
            "invalid team_gid: {gid} is the team group of queue {}",
            other.name
        ))
        .at("team_gid"));
    }
    if let Some(user) = st.store.user_with_gid(gid).await? {
        return Err(ServiceError::conflict(format!(
            "invalid team_gid: {gid} is the group of account {user}: a team group must be no account's own \
             (its folder would open to all of that account's work)"
        ))
        .at("team_gid"));
    }
    ensure_folder(&folder(st, &q.name), gid).map_err(ServiceError::internal)
}

/// The team folders `names` asks for on behalf of `caller`: each a queue with a team folder whose
/// members include the caller. Refused (422 on `teams`) naming what is wrong and the teams the caller
/// may mount.
pub async fn resolve(st: &AppState, caller: &User, names: &[String]) -> Result<Vec<TeamMount>, ServiceError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let refuse = |why: String| Err(ServiceError::invalid_at("teams", format!("invalid teams: {why}")));
    if !st.engine.capabilities().volumes {
        return refuse(format!("the {} engine mounts no team folders", st.engine.name()));
    }
    if names.len() > MAX_TEAMS {
        return refuse(format!("{} named, more than the limit of {MAX_TEAMS}", names.len()));
    }
    let queues = st.store.list_queues().await?;
    let member = |q: &QueueDef| q.members.as_ref().is_none_or(|m| m.contains(&caller.username));
    let yours: Vec<&str> =
        queues.iter().filter(|q| q.team_gid.is_some() && member(q)).map(|q| q.name.as_str()).collect();
    let yours = if yours.is_empty() { "none".to_owned() } else { yours.join(", ") };
    let mut out: Vec<TeamMount> = Vec::new();
    for n in names {
        if out.iter().any(|t| &t.queue == n) {
            return refuse(format!("{n} is named twice"));
        }
        let Some(q) = queues.iter().find(|q| &q.name == n) else {
            return refuse(format!("no queue named {n:?} (your teams: {yours})"));
        };
        let Some(gid) = q.team_gid else {
            return refuse(format!("queue {n} has no team folder (your teams: {yours})"));
        };
        // admins too: a team folder is its members' (an admin adds themselves to mount it)
        if !member(q) {
            return refuse(format!("{} is not a member of team {n} (your teams: {yours})", caller.username));
        }
        let path = folder(st, n);
        ensure_folder(&path, gid).map_err(|e| ServiceError::internal(format!("team folder {n}: {e}")))?;
        out.push(TeamMount { queue: n.clone(), path: path.display().to_string(), gid });
    }
    Ok(out)
}
