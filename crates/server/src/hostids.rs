//! The host's own accounts and groups (security review N15): gpuhub's local accounts get their UID (and
//! the same GID) from `uid_range`, and containers run as that ID on the host, so no user of gpuhub may
//! share one with an account or group of the host. At start the range must lie above the host's
//! `UID_MAX` and `GID_MAX` (`/etc/login.defs`, where `useradd` takes new accounts' IDs from) and hold no
//! account of `/etc/passwd` nor group of `/etc/group`, else the server stops naming the range and what
//! is in it. An account of the host that is a gpuhub user's own (same name and ID: a Slurm cluster's
//! accounts, made for gpuhub's users) is no overlap, nor is a team queue's group. Each new local account
//! passes over every ID the host has then ([`HostAccounts::taken`]), and a directory's `uidNumber` that
//! is another host account's is refused at sign-in ([`HostAccounts::uid_owner`]).

use gpuhub_core::user::{UidRange, User};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Where the host's account files are, unless a test names another directory.
pub const ETC: &str = "/etc";

/// `UID_MAX` and `GID_MAX` where `login.defs` does not say (shadow's defaults).
const DEFAULT_ID_MAX: u32 = 60_000;

/// Why the range cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostIdsError {
    /// An account file exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The range starts at or below the host's own accounts' IDs.
    #[error(
        "uid_range {range} starts at or below the host's {key} {max} ({path}): useradd may give those ids to \
         new host accounts; set uid_range (GPUHUB_UID_RANGE) above {max}"
    )]
    BelowMax {
        /// The configured range.
        range: UidRange,
        /// `UID_MAX` or `GID_MAX`.
        key: &'static str,
        /// Its value.
        max: u32,
        /// The `login.defs` read.
        path: PathBuf,
    },
    /// The range holds a host account or group.
    #[error(
        "uid_range {range} holds the host's {what} {name} (id {id}, {path}): gpuhub's users would share its \
         files; set uid_range (GPUHUB_UID_RANGE) clear of the host's accounts and groups"
    )]
    Overlap {
        /// The configured range.
        range: UidRange,
        /// `account` or `group`.
        what: &'static str,
        /// Its name.
        name: String,
        /// Its ID.
        id: u32,
        /// The file it is in.
        path: PathBuf,
    },
}

/// The account files of a host: `passwd`, `group` and `login.defs` in one directory.
#[derive(Debug, Clone)]
pub struct HostAccounts {
    etc: PathBuf,
}

impl Default for HostAccounts {
    fn default() -> Self {
        Self::new(ETC)
    }
}

/// What the files say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDb {
    /// Accounts: name and UID.
    pub users: Vec<(String, u32)>,
    /// Groups: name and GID.
    pub groups: Vec<(String, u32)>,
    /// The accounts' primary GIDs (`passwd`'s fourth field), with a group entry or not.
    pub primary_gids: Vec<u32>,
    /// `UID_MAX` of `login.defs`.
    pub uid_max: u32,
    /// `GID_MAX` of `login.defs`.
    pub gid_max: u32,
}

impl HostAccounts {
    /// The files in `etc`.
    pub fn new(etc: impl Into<PathBuf>) -> Self {
        Self { etc: etc.into() }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.etc.join(file)
    }

    /// A file's text; a missing file reads as empty.
    fn text(&self, file: &str) -> Result<String, HostIdsError> {
        let path = self.path(file);
        match std::fs::read_to_string(&path) {
            Ok(t) => Ok(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(source) => Err(HostIdsError::Read { path, source }),
        }
    }

    /// Reads the three files.
    pub fn read(&self) -> Result<HostDb, HostIdsError> {
        let defs = self.text("login.defs")?;
        let passwd = self.text("passwd")?;
        Ok(HostDb {
            users: entries(&passwd),
            primary_gids: passwd.lines().filter_map(|l| l.split(':').nth(3)?.trim().parse().ok()).collect(),
            groups: entries(&self.text("group")?),
            uid_max: login_def(&defs, "UID_MAX").unwrap_or(DEFAULT_ID_MAX),
            gid_max: login_def(&defs, "GID_MAX").unwrap_or(DEFAULT_ID_MAX),
        })
    }

    /// Refuses a `range` at or below `UID_MAX`/`GID_MAX` or holding a host account or group that is not
    /// a gpuhub user's own (`users`: same name and ID) nor a team's group (`team_gids`).
    pub fn check(&self, range: UidRange, users: &[User], team_gids: &[u32]) -> Result<(), HostIdsError> {
        self.above_max(range)?;
        let db = self.read()?;
        let own_user = |name: &str, id: u32| users.iter().any(|u| u.username == name && u.uid == id);
        let own_group =
            |name: &str, id: u32| team_gids.contains(&id) || users.iter().any(|u| u.username == name && u.gid == id);
        let overlap = |what, file: &str, (name, id): &(String, u32)| HostIdsError::Overlap {
            range,
            what,
            name: name.clone(),
            id: *id,
            path: self.path(file),
        };
        if let Some(e) = db.users.iter().find(|(n, id)| range.contains(*id) && !own_user(n, *id)) {
            return Err(overlap("account", "passwd", e));
        }
        if let Some(e) = db.groups.iter().find(|(n, id)| range.contains(*id) && !own_group(n, *id)) {
            return Err(overlap("group", "group", e));
        }
        Ok(())
    }

    /// Refuses a `range` at or below `UID_MAX`/`GID_MAX` (checked before anything is made: it needs no
    /// store).
    pub fn above_max(&self, range: UidRange) -> Result<(), HostIdsError> {
        let db = self.read()?;
        for (key, max) in [("UID_MAX", db.uid_max), ("GID_MAX", db.gid_max)] {
            if range.first <= max {
                return Err(HostIdsError::BelowMax { range, key, max, path: self.path("login.defs") });
            }
        }
        Ok(())
    }

    /// gpuhub users (of any source, made before the range was checked) whose UID is a host account of
    /// another name: one line each, for a warning at start.
    pub fn shared_uids(&self, users: &[User]) -> Result<Vec<String>, HostIdsError> {
        let db = self.read()?;
        Ok(users
            .iter()
            .filter_map(|u| {
                let (name, _) = db.users.iter().find(|(n, id)| *id == u.uid && *n != u.username)?;
                Some(format!("{} has uid {}, which is the host's account {name}", u.username, u.uid))
            })
            .collect())
    }

    /// Every UID and GID the host's accounts and groups have now: what a new local account passes over.
    pub fn taken(&self) -> BTreeSet<u32> {
        match self.read() {
            Ok(db) => db.users.iter().chain(&db.groups).map(|(_, id)| *id).chain(db.primary_gids).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the host's accounts; new uids are not checked against them");
                BTreeSet::new()
            }
        }
    }

    /// The host account other than `username` whose UID is `uid`, if any (a directory's `uidNumber`
    /// that would share a host account's files).
    pub fn uid_owner(&self, uid: u32, username: &str) -> Result<Option<String>, HostIdsError> {
        Ok(self.read()?.users.into_iter().find(|(n, id)| *id == uid && n != username).map(|(n, _)| n))
    }

    /// The `passwd` file, for messages.
    pub fn passwd_path(&self) -> PathBuf {
        self.path("passwd")
    }
}

/// `name:x:id:…` lines (`passwd`, `group`): name and ID; comments and malformed lines skipped.
fn entries(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?.trim();
            let id = f.nth(1)?.trim().parse().ok()?;
            (!name.is_empty()).then(|| (name.to_owned(), id))
        })
        .collect()
}

/// The value of `key` in `login.defs` (`UID_MAX  60000`), the last one written winning.
fn login_def(text: &str, key: &str) -> Option<u32> {
    text.lines().rev().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(key)).then(|| w.next()?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests;
