//! Team folders: a read-write directory per team queue that has one, owned by the queue's group
//! (`team_gid`, mode 2770), which workloads of the queue's members mount at `/team/<queue>` and whose
//! processes carry that group as a supplementary group. A volume in engine-neutral terms, like datasets.

use serde::{Deserialize, Serialize};

/// Where workloads find their team folders.
pub const TEAMS_DIR: &str = "/team";

/// The lowest group id a team folder may have: below are the system's groups.
pub const MIN_TEAM_GID: u32 = 1000;

/// A team folder a workload mounts: the queue, its directory on the host when the workload was
/// submitted, and its group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TeamMount {
    pub queue: String,
    pub path: String,
    pub gid: u32,
}

impl TeamMount {
    /// Where the workload sees it.
    pub fn target(&self) -> String {
        format!("{TEAMS_DIR}/{}", self.queue)
    }
}

/// Whether `gid` may own a team folder: not a system group (below [`MIN_TEAM_GID`]) and not `nogroup`.
pub fn check_gid(gid: u32) -> Result<(), String> {
    if gid < MIN_TEAM_GID {
        return Err(format!("{gid} is a system group (team groups are from {MIN_TEAM_GID} up)"));
    }
    if (65_534..=65_535).contains(&gid) {
        return Err(format!("{gid} is nogroup"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_gids() {
        let t = TeamMount { queue: "vision".into(), path: "/d/teams/vision".into(), gid: 60001 };
        assert_eq!(t.target(), "/team/vision");
        assert!(check_gid(60001).is_ok());
        assert!(check_gid(0).unwrap_err().contains("system group"));
        assert!(check_gid(999).is_err());
        assert!(check_gid(65534).is_err());
    }
}
