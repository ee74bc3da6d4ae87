//! What a container uses, read from its cgroup on the host: CPU time, memory (the working set, as
//! `docker stats` shows it), its limit, and the processes in it.
//!
//! The container's cgroup is found from its init process (the PID Docker's inspect reports): its
//! `/proc/<pid>/cgroup` names the cgroup in each hierarchy, and `/proc/self/mountinfo` says where those
//! hierarchies are mounted, so the cgroupfs and systemd cgroup drivers, cgroup v1 (also hybrid hosts,
//! whose controllers are on v1) and v2 all work. Everything is parsed by pure functions; files are read
//! through [`Files`], so the parsing is tested on sample contents.
//!
//! Files read — v1: `memory.usage_in_bytes`, `memory.stat` (`total_inactive_file`),
//! `memory.limit_in_bytes`, `cpuacct.usage`, `cgroup.procs`; v2: `memory.current`, `memory.stat`
//! (`inactive_file`), `memory.max`, `cpu.stat` (`usage_usec`), `cgroup.procs`. The processes are those
//! directly in the container's cgroup (where Docker puts them); the figures count its sub-cgroups too.

use gpuhub_core::Bytes;
use gpuhub_driver::cgroup::cgroup_mounts;
use std::io;
use std::path::{Path, PathBuf};

/// From this many bytes on, a v1 memory limit means "no limit": the kernel reports the largest page
/// counter times the page size (9223372036854771712 with 4 KiB pages), just under 2^63 whatever the
/// page size; no real limit comes near 2^62 bytes.
pub(crate) const V1_UNLIMITED_FROM: u64 = 1 << 62;

/// `ESRCH`: reading the `/proc` entry of a process that is exiting.
const ESRCH: i32 = 3;

/// What a container's cgroup says it uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CgroupUsage {
    /// CPU time used since the cgroup was made, in seconds.
    pub cpu_seconds: f64,
    /// Usage less the inactive file cache.
    pub memory_used: Bytes,
    /// `None`: no limit.
    pub memory_limit: Option<Bytes>,
    /// PIDs of the processes in the cgroup, ascending.
    pub pids: Vec<u32>,
}

/// Where files are read: the host (the real `/proc` and cgroup file systems) or a test's contents.
pub(crate) trait Files {
    /// The whole file at `path`.
    fn read(&self, path: &Path) -> io::Result<String>;
}

/// The host's files.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostFiles;

impl Files for HostFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// The id of the Docker container a process belongs to, from its `/proc/<pid>/cgroup`: the 64-hex id in
/// a `/docker/<id>` path (the cgroupfs driver) or a `docker-<id>.scope` unit (the systemd driver), cgroup
/// v1 or v2. Where containers nest (Docker in Docker), the innermost. `None` for a process outside
/// Docker's containers.
pub fn container_id_from_cgroup(proc_pid_cgroup_text: &str) -> Option<String> {
    proc_pid_cgroup_text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        let segments: Vec<&str> = path.split('/').collect();
        let mut found = None;
        for (i, segment) in segments.iter().enumerate() {
            let scope = segment.strip_prefix("docker-").and_then(|s| s.strip_suffix(".scope"));
            if let Some(id) = scope.filter(|id| is_container_id(id)) {
                found = Some(id);
            } else if i > 0 && segments[i - 1] == "docker" && is_container_id(segment) {
                found = Some(segment);
            }
        }
        found.map(str::to_owned)
    })
}

/// Whether `s` is a full container id: 64 lowercase hex digits.
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    /// The controllers of a v1 hierarchy (`memory`, `cpu`, `cpuacct`, `name=systemd`); empty for v2's
    /// `0::` line.
    controllers: Vec<String>,
    /// The cgroup's path in its hierarchy (`/docker/<id>`).
    path: String,
}

fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let controllers = controllers.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect();
            Some(Membership { controllers, path: path.to_owned() })
        })
        .collect()
}

/// Where a process's cgroup files are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CgroupDirs {
    /// cgroup v1: the memory controller's directory and the CPU accounting controller's.
    V1 { memory: PathBuf, cpuacct: PathBuf },
    /// cgroup v2: the one directory.
    V2 { dir: PathBuf },
}

/// The directories of the cgroups a process is in (its `/proc/<pid>/cgroup`), given the mounts (the
/// reader's `/proc/self/mountinfo`): v1 when the memory controller is on a v1 hierarchy (v1 and hybrid
/// hosts), else v2. The error says what is missing.
fn locate(proc_cgroup: &str, mountinfo: &str) -> Result<CgroupDirs, String> {
    let memberships = parse_proc_cgroup(proc_cgroup);
    let mounts = cgroup_mounts(mountinfo);
    let v1_dir = |controller: &str| {
        let member = memberships.iter().find(|m| m.controllers.iter().any(|c| c == controller))?;
        let mount = mounts.iter().find(|m| m.carries(controller))?;
        Some(mount.dir_of(&member.path))
    };
    if let Some(memory) = v1_dir("memory") {
        let cpuacct = v1_dir("cpuacct").ok_or("the cpuacct controller is not mounted")??;
        return Ok(CgroupDirs::V1 { memory: memory?, cpuacct });
    }
    let member = memberships
        .iter()
        .find(|m| m.controllers.is_empty())
        .ok_or("the process is in no cgroup v2 and no v1 memory cgroup")?;
    let mount = mounts.iter().find(|m| m.controllers.is_none()).ok_or("no cgroup v2 file system is mounted")?;
    Ok(CgroupDirs::V2 { dir: mount.dir_of(&member.path)? })
}

/// A number alone in a file (`memory.current`, `cpuacct.usage`).
fn number(what: &str, text: &str) -> Result<u64, String> {
    text.trim().parse().map_err(|_| format!("{what} holds {:?}, not a number", text.trim()))
}

/// The value of `key` in a flat keyed file (`memory.stat`, `cpu.stat`: `key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key { v.trim().parse().ok() } else { None }
    })
}

/// The PIDs in a `cgroup.procs`, ascending.
fn pids(text: &str) -> Result<Vec<u32>, String> {
    let mut pids = text
        .split_whitespace()
        .map(|p| p.parse().map_err(|_| format!("cgroup.procs holds {p:?}, not a pid")))
        .collect::<Result<Vec<u32>, String>>()?;
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// The contents of a v1 container's files.
#[derive(Debug, Clone, Copy)]
struct V1Files<'a> {
    usage_in_bytes: &'a str,
    memory_stat: &'a str,
    limit_in_bytes: &'a str,
    cpuacct_usage: &'a str,
    procs: &'a str,
}

fn parse_v1(f: V1Files<'_>) -> Result<CgroupUsage, String> {
    let usage = number("memory.usage_in_bytes", f.usage_in_bytes)?;
    let inactive = keyed(f.memory_stat, "total_inactive_file").unwrap_or(0);
    let limit = number("memory.limit_in_bytes", f.limit_in_bytes)?;
    let cpu_ns = number("cpuacct.usage", f.cpuacct_usage)?;
    Ok(CgroupUsage {
        cpu_seconds: cpu_ns as f64 / 1e9,
        memory_used: Bytes(usage.saturating_sub(inactive)),
        memory_limit: (limit < V1_UNLIMITED_FROM).then_some(Bytes(limit)),
        pids: pids(f.procs)?,
    })
}

/// The contents of a v2 container's files.
#[derive(Debug, Clone, Copy)]
struct V2Files<'a> {
    memory_current: &'a str,
    memory_stat: &'a str,
    memory_max: &'a str,
    cpu_stat: &'a str,
    procs: &'a str,
}

fn parse_v2(f: V2Files<'_>) -> Result<CgroupUsage, String> {
    let usage = number("memory.current", f.memory_current)?;
    let inactive = keyed(f.memory_stat, "inactive_file").unwrap_or(0);
    let limit = match f.memory_max.trim() {
        "max" => None,
        max => Some(Bytes(number("memory.max", max)?)),
    };
    let cpu_us = keyed(f.cpu_stat, "usage_usec").ok_or("cpu.stat has no usage_usec")?;
    Ok(CgroupUsage {
        cpu_seconds: cpu_us as f64 / 1e6,
        memory_used: Bytes(usage.saturating_sub(inactive)),
        memory_limit: limit,
        pids: pids(f.procs)?,
    })
}

/// Why a container could not be measured.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// It is gone: its process ended, its PID now belongs to another cgroup, or its cgroup was removed.
    Gone,
    /// A file could not be read or held something unexpected.
    Failed(String),
}

/// What container `container_id`, whose init process is `pid`, uses now.
pub(crate) fn read_usage(files: &dyn Files, pid: u32, container_id: &str) -> Result<CgroupUsage, ReadError> {
    let read = |path: &Path| match files.read(path) {
        Ok(text) => Ok(text),
        // an ended process's /proc entry (ENOENT, or ESRCH while it exits), or a removed cgroup's files
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(ESRCH) => Err(ReadError::Gone),
        Err(e) => Err(ReadError::Failed(format!("cannot read {}: {e}", path.display()))),
    };
    let proc_cgroup = read(&PathBuf::from(format!("/proc/{pid}/cgroup")))?;
    if !proc_cgroup.contains(container_id) {
        // the container's init ended and its PID was taken by another process
        return Err(ReadError::Gone);
    }
    let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
    let dirs = locate(&proc_cgroup, &mountinfo).map_err(ReadError::Failed)?;
    let parsed = match &dirs {
        CgroupDirs::V1 { memory, cpuacct } => parse_v1(V1Files {
            usage_in_bytes: &read(&memory.join("memory.usage_in_bytes"))?,
            memory_stat: &read(&memory.join("memory.stat"))?,
            limit_in_bytes: &read(&memory.join("memory.limit_in_bytes"))?,
            cpuacct_usage: &read(&cpuacct.join("cpuacct.usage"))?,
            procs: &read(&memory.join("cgroup.procs"))?,
        }),
        CgroupDirs::V2 { dir } => parse_v2(V2Files {
            memory_current: &read(&dir.join("memory.current"))?,
            memory_stat: &read(&dir.join("memory.stat"))?,
            memory_max: &read(&dir.join("memory.max"))?,
            cpu_stat: &read(&dir.join("cpu.stat"))?,
            procs: &read(&dir.join("cgroup.procs"))?,
        }),
    };
    parsed.map_err(ReadError::Failed)
}

#[cfg(test)]
mod tests;
