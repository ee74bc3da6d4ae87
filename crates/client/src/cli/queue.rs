//! The options of `gpuhub queue`: a queue's settings as options, and their merge patch.

use clap::{Args, Subcommand};
use gpuhub_core::Bytes;
use gpuhub_core::queue::{LimitPatch, QueuePatch};

/// Subcommands of `gpuhub queue`.
#[derive(Debug, Clone, Subcommand)]
pub enum QueueCommand {
    /// List the team queues (as `gpuhub queues`).
    #[command(visible_alias = "list")]
    Ls,
    /// Create a team queue (admin).
    Add {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        settings: Box<QueueSettings>,
    },
    /// Change a team queue (admin): only the options given change; `none` unsets one.
    Set {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        settings: Box<QueueSettings>,
    },
    /// Remove a team queue (admin); refused while work in it is queued or running.
    Rm {
        /// The queue's name.
        name: String,
    },
}

/// A queue's settings as options. A limit is `gpus=2,cpus=16,memory=64GiB`: the resources it names
/// change (`gpus=none`: no longer limited), the others stay; `none` alone removes the whole limit.
#[derive(Debug, Clone, Default, Args)]
pub struct QueueSettings {
    /// What the team is guaranteed (`gpus=2,cpus=16,memory=64GiB`; `none`: nothing).
    #[arg(long, value_name = "LIMIT", value_parser = parse_limit)]
    pub guarantee: Option<Limit>,
    /// How much beyond its guarantee it may borrow (`none`: no limit).
    #[arg(long, value_name = "LIMIT", value_parser = parse_limit)]
    pub borrow_limit: Option<Limit>,
    /// The most one user may hold in it (`gpus=2`; `none`: no limit).
    #[arg(long, value_name = "LIMIT", value_parser = parse_limit)]
    pub user_limit: Option<Limit>,
    /// Fair-share weight relative to the other queues.
    #[arg(long, value_name = "W")]
    pub weight: Option<f64>,
    /// Who may submit, comma-separated (`none`: everyone).
    #[arg(long, value_name = "USERS", value_parser = parse_list)]
    pub members: Option<List>,
    /// The priority classes its users may ask for, comma-separated (`none`: none).
    #[arg(long, value_name = "CLASSES", value_parser = parse_list)]
    pub priority_classes: Option<List>,
    /// The group id of its team folder, mounted read-write at /team/NAME by members who ask (`none`: no
    /// team folder).
    #[arg(long, value_name = "GID", value_parser = parse_gid)]
    pub team_gid: Option<Gid>,
    /// The longest a workload in it may run (`24h`; `none`: 366 days).
    #[arg(long, value_name = "DURATION", value_parser = parse_max_runtime)]
    pub max_runtime: Option<MaxRuntime>,
    /// The most a workload in it may ask to write outside its mounts (`50GiB`; `none`: no maximum).
    #[arg(long, value_name = "SIZE", value_parser = parse_max_disk)]
    pub max_disk: Option<MaxDisk>,
}

/// A `--max-disk` option: `None` is `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxDisk(pub Option<Bytes>);

pub(crate) fn parse_max_disk(s: &str) -> Result<MaxDisk, String> {
    if s == "none" {
        return Ok(MaxDisk(None));
    }
    Bytes::parse(s).map(|b| MaxDisk(Some(b))).map_err(|e| e.to_string())
}

/// A `--max-runtime` option: `None` is `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MaxRuntime(pub Option<gpuhub_core::Seconds>);

pub(crate) fn parse_max_runtime(s: &str) -> Result<MaxRuntime, String> {
    if s == "none" {
        return Ok(MaxRuntime(None));
    }
    gpuhub_core::Seconds::parse(s).map(|d| MaxRuntime(Some(d))).map_err(|e| e.to_string())
}

/// A `--team-gid` option: `None` is `none`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gid(pub Option<u32>);

pub(crate) fn parse_gid(s: &str) -> Result<Gid, String> {
    if s == "none" {
        return Ok(Gid(None));
    }
    s.parse().map(|g| Gid(Some(g))).map_err(|_| format!("{s:?} is not a group id (or none)"))
}

/// A limit option: `None` is `none`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit(pub Option<LimitPatch>);

/// A list option: `None` is `none`.
#[derive(Debug, Clone, PartialEq)]
pub struct List(pub Option<Vec<String>>);

pub(crate) fn parse_limit(s: &str) -> Result<Limit, String> {
    if s.trim() == "none" {
        return Ok(Limit(None));
    }
    let mut p = LimitPatch::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected RESOURCE=AMOUNT"))?;
        let v = v.trim();
        let none = v == "none";
        let num = || v.parse::<f64>().map_err(|_| format!("{part:?}: {v:?} is not a number"));
        match k.trim() {
            "gpus" => p.gpus = Some(if none { None } else { Some(num()?) }),
            "cpus" => p.cpus = Some(if none { None } else { Some(num()?) }),
            "memory" => p.memory = Some(if none { None } else { Some(Bytes::parse(v).map_err(|e| e.to_string())?) }),
            other => return Err(format!("unknown resource {other:?} (gpus, cpus, memory)")),
        }
    }
    Ok(Limit(Some(p)))
}

pub(crate) fn parse_list(s: &str) -> Result<List, String> {
    if s.trim() == "none" {
        return Ok(List(None));
    }
    Ok(List(Some(s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(str::to_owned).collect())))
}

impl QueueSettings {
    /// The merge patch these options make.
    pub fn patch(&self) -> QueuePatch {
        QueuePatch {
            guarantee: self.guarantee.clone().map(|l| l.0),
            borrow_limit: self.borrow_limit.clone().map(|l| l.0),
            user_limit: self.user_limit.clone().map(|l| l.0),
            weight: self.weight.map(Some),
            members: self.members.clone().map(|l| l.0),
            priority_classes: self.priority_classes.clone().map(|l| l.0),
            team_gid: self.team_gid.map(|g| g.0),
            max_runtime: self.max_runtime.map(|m| m.0),
            max_disk: self.max_disk.map(|m| m.0),
        }
    }
}
