//! Host capacity: CPUs and memory this process may use, and the host name.
//!
//! CPUs are the smaller of [`std::thread::available_parallelism`] and the cgroup CPU quota; memory is the
//! smaller of `MemTotal` and the cgroup memory limit. Cgroup v2 (`cpu.max`, `memory.max`) and v1
//! (`cpu.cfs_quota_us`/`cpu.cfs_period_us`, `memory.limit_in_bytes`) are both read, in this process's own
//! cgroup (from `/proc/self/cgroup`) and each of its ancestors up to the mount root, since a limit on a
//! parent applies too. The parsers are pure functions over file contents.

use crate::GpuError;
use gpuhub_core::{Bytes, CpuMilli};
use std::path::{Component, Path, PathBuf};

const MEMINFO: &str = "/proc/meminfo";
const HOSTNAME: &str = "/proc/sys/kernel/hostname";
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const PROC_SELF_CGROUP: &str = "/proc/self/cgroup";

/// CPUs and memory available on this host to this process (and so to the containers it runs).
///
/// # Errors
/// [`GpuError::Io`] when the CPU count cannot be determined or `/proc/meminfo` cannot be read or has
/// no `MemTotal`. Unreadable or malformed cgroup files are ignored (no limit).
pub fn host_capacity() -> Result<(CpuMilli, Bytes), GpuError> {
    let parallelism = std::thread::available_parallelism()
        .map_err(|source| GpuError::io("/sys/devices/system/cpu/online", source))?
        .get() as u64;
    let meminfo = std::fs::read_to_string(MEMINFO).map_err(|source| GpuError::io(MEMINFO, source))?;
    let mem_total = parse_meminfo_total(&meminfo).ok_or_else(|| GpuError::invalid_data(MEMINFO, "no MemTotal line"))?;
    let self_cgroup = std::fs::read_to_string(PROC_SELF_CGROUP).unwrap_or_default();
    let limits = cgroup_limits(Path::new(CGROUP_ROOT), &self_cgroup);
    let (cpus, memory) = combine(parallelism, mem_total, limits);
    tracing::debug!(%cpus, %memory, parallelism, %mem_total, ?limits, "host capacity");
    Ok((cpus, memory))
}

/// The host name, from `/proc/sys/kernel/hostname`.
///
/// # Errors
/// [`GpuError::Io`] when the file cannot be read or is empty.
pub fn hostname() -> Result<String, GpuError> {
    let raw = std::fs::read_to_string(HOSTNAME).map_err(|source| GpuError::io(HOSTNAME, source))?;
    parse_hostname(&raw).ok_or_else(|| GpuError::invalid_data(HOSTNAME, "empty host name"))
}

/// Limits found in the cgroup hierarchy; `None` where unlimited or unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CgroupLimits {
    /// The CPU quota.
    pub cpus: Option<CpuMilli>,
    /// The memory limit.
    pub memory: Option<Bytes>,
}

/// Capacity from the CPU count, `MemTotal` and cgroup limits: the smaller of each pair. A CPU quota is
/// never allowed below one thousandth of a core.
pub fn combine(parallelism: u64, mem_total: Bytes, limits: CgroupLimits) -> (CpuMilli, Bytes) {
    let mut cpus = CpuMilli(parallelism.saturating_mul(1000));
    if let Some(quota) = limits.cpus {
        cpus = cpus.min(CpuMilli(quota.0.max(1)));
    }
    let memory = limits.memory.map_or(mem_total, |limit| limit.min(mem_total));
    (cpus, memory)
}

/// `MemTotal` from `/proc/meminfo` (`MemTotal:       16318432 kB`).
pub fn parse_meminfo_total(meminfo: &str) -> Option<Bytes> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut parts = line.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    let factor = match parts.next() {
        None | Some("B") => 1,
        Some(u) if u.eq_ignore_ascii_case("kB") => 1024,
        Some(_) => return None,
    };
    n.checked_mul(factor).map(Bytes)
}

/// Cgroup v2 `cpu.max` (`max 100000` or `150000 100000`): the quota, `None` when unlimited.
pub fn parse_cpu_max(cpu_max: &str) -> Option<CpuMilli> {
    let mut parts = cpu_max.split_whitespace();
    let quota = parts.next()?;
    let period = parts.next().unwrap_or("100000");
    if quota == "max" {
        return None;
    }
    quota_to_milli(quota.parse().ok()?, period.parse().ok()?)
}

/// Cgroup v1 `cpu.cfs_quota_us` (`-1` when unlimited) and `cpu.cfs_period_us`: the quota.
pub fn parse_cfs_quota(quota_us: &str, period_us: &str) -> Option<CpuMilli> {
    let quota: i64 = quota_us.trim().parse().ok()?;
    let period: u64 = period_us.trim().parse().ok()?;
    quota_to_milli(u64::try_from(quota).ok()?, period)
}

fn quota_to_milli(quota: u64, period: u64) -> Option<CpuMilli> {
    if quota == 0 || period == 0 {
        return None;
    }
    Some(CpuMilli((u128::from(quota) * 1000 / u128::from(period)).try_into().unwrap_or(u64::MAX)))
}

/// Cgroup memory limit: v2 `memory.max` (`max` or bytes) or v1 `memory.limit_in_bytes` (where "no
/// limit" is a huge number near `i64::MAX`, reported as `None`).
pub fn parse_memory_limit(limit: &str) -> Option<Bytes> {
    let limit = limit.trim();
    if limit == "max" {
        return None;
    }
    let n: u64 = limit.parse().ok()?;
    // v1 rounds i64::MAX down to a page multiple; anything this large is "unlimited".
    if n == 0 || n >= 1 << 62 {
        return None;
    }
    Some(Bytes(n))
}

/// `/proc/sys/kernel/hostname`, trimmed; `None` when empty.
pub fn parse_hostname(raw: &str) -> Option<String> {
    let name = raw.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// One line of `/proc/self/cgroup` (`4:memory:/docker/abc`, `0::/user.slice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupEntry {
    /// Controllers of a v1 hierarchy (`["cpu", "cpuacct"]`); empty for the v2 hierarchy.
    pub controllers: Vec<String>,
    /// Path of this process's cgroup, relative to the hierarchy's root.
    pub path: String,
}

/// Parses `/proc/self/cgroup`, skipping malformed lines.
pub fn parse_proc_self_cgroup(raw: &str) -> Vec<CgroupEntry> {
    raw.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect::<Vec<_>>();
            Some(CgroupEntry { controllers, path: path.to_owned() })
        })
        .collect()
}

/// The limits in a cgroup tree mounted at `root` (`/sys/fs/cgroup`, or a test's copy) for a process
/// whose `/proc/self/cgroup` reads `self_cgroup`: the smallest found at any level.
pub fn cgroup_limits(root: &Path, self_cgroup: &str) -> CgroupLimits {
    let entries = parse_proc_self_cgroup(self_cgroup);
    let path_of = |pred: &dyn Fn(&CgroupEntry) -> bool| {
        entries.iter().find(|e| pred(e)).map(|e| e.path.clone()).unwrap_or_else(|| "/".into())
    };
    let v2_path = path_of(&|e| e.controllers.is_empty());
    let cpu_path = path_of(&|e| e.controllers.iter().any(|c| c == "cpu"));
    let mem_path = path_of(&|e| e.controllers.iter().any(|c| c == "memory"));

    let mut limits = CgroupLimits::default();
    let mut cpu = |v: Option<CpuMilli>| limits.cpus = min_opt(limits.cpus, v);
    // v2: the unified hierarchy at the root (pure v2) or at `unified` (hybrid, usually no controllers).
    for v2_root in [root.to_path_buf(), root.join("unified")] {
        for dir in levels(&v2_root, &v2_path) {
            cpu(read(&dir.join("cpu.max")).and_then(|s| parse_cpu_max(&s)));
        }
    }
    // v1: the cpu controller, mounted alone or together with cpuacct.
    for name in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
        for dir in levels(&root.join(name), &cpu_path) {
            if let (Some(q), Some(p)) = (read(&dir.join("cpu.cfs_quota_us")), read(&dir.join("cpu.cfs_period_us"))) {
                cpu(parse_cfs_quota(&q, &p));
            }
        }
    }
    let mut mem = |v: Option<Bytes>| limits.memory = min_opt(limits.memory, v);
    for v2_root in [root.to_path_buf(), root.join("unified")] {
        for dir in levels(&v2_root, &v2_path) {
            mem(read(&dir.join("memory.max")).and_then(|s| parse_memory_limit(&s)));
        }
    }
    for dir in levels(&root.join("memory"), &mem_path) {
        mem(read(&dir.join("memory.limit_in_bytes")).and_then(|s| parse_memory_limit(&s)));
    }
    limits
}

/// `mount/path`, then each ancestor down to `mount` itself. A path that climbs out of the mount (a
/// cgroup namespace's `/../..`) yields only `mount`.
fn levels(mount: &Path, path: &str) -> Vec<PathBuf> {
    let rel = Path::new(path);
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                parts.clear();
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(parts.len() + 1);
    for n in (0..=parts.len()).rev() {
        let mut dir = mount.to_path_buf();
        dir.extend(&parts[..n]);
        out.push(dir);
    }
    out
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::quantity::{GIB, MIB};

    const MEMINFO_SAMPLE: &str =
        "MemTotal:       24684084 kB\nMemFree:         1234567 kB\nMemAvailable:   20000000 kB\n";

    #[test]
    fn meminfo() {
        assert_eq!(parse_meminfo_total(MEMINFO_SAMPLE), Some(Bytes(24_684_084 * 1024)));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\nMemTotal: 2048 kB\n"), Some(Bytes(2 * MIB)));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: 1 MB\n"), None);
    }

    #[test]
    fn cpu_max_v2() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(CpuMilli(1500)));
        assert_eq!(parse_cpu_max("200000 100000"), Some(CpuMilli(2000)));
        assert_eq!(parse_cpu_max("50000 200000"), Some(CpuMilli(250)));
        assert_eq!(parse_cpu_max("100000"), Some(CpuMilli(1000)));
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("x 100000"), None);
        assert_eq!(parse_cpu_max("100000 0"), None);
    }

    #[test]
    fn cfs_quota_v1() {
        assert_eq!(parse_cfs_quota("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs_quota("250000\n", "100000\n"), Some(CpuMilli(2500)));
        assert_eq!(parse_cfs_quota("1000", "100000"), Some(CpuMilli(10)));
        assert_eq!(parse_cfs_quota("garbage", "100000"), None);
    }

    #[test]
    fn memory_limits() {
        assert_eq!(parse_memory_limit("max\n"), None);
        assert_eq!(parse_memory_limit("4294967296\n"), Some(Bytes(4 * GIB)));
        assert_eq!(parse_memory_limit("9223372036854771712\n"), None);
        assert_eq!(parse_memory_limit("nope"), None);
    }

    #[test]
    fn hostnames() {
        assert_eq!(parse_hostname("gpu-box-1\n").as_deref(), Some("gpu-box-1"));
        assert_eq!(parse_hostname("\n"), None);
    }

    #[test]
    fn proc_self_cgroup() {
        let e = parse_proc_self_cgroup("4:memory:/docker/abc\n2:cpu,cpuacct:/\n0::/user.slice/x.scope\nbad\n");
        assert_eq!(
            e,
            [
                CgroupEntry { controllers: vec!["memory".into()], path: "/docker/abc".into() },
                CgroupEntry { controllers: vec!["cpu".into(), "cpuacct".into()], path: "/".into() },
                CgroupEntry { controllers: vec![], path: "/user.slice/x.scope".into() },
            ]
        );
    }

    #[test]
    fn combines_with_limits() {
        let none = CgroupLimits::default();
        assert_eq!(combine(8, Bytes(64 * GIB), none), (CpuMilli(8000), Bytes(64 * GIB)));
        let some = CgroupLimits { cpus: Some(CpuMilli(1500)), memory: Some(Bytes(4 * GIB)) };
        assert_eq!(combine(8, Bytes(64 * GIB), some), (CpuMilli(1500), Bytes(4 * GIB)));
        let loose = CgroupLimits { cpus: Some(CpuMilli(32_000)), memory: Some(Bytes(128 * GIB)) };
        assert_eq!(combine(8, Bytes(64 * GIB), loose), (CpuMilli(8000), Bytes(64 * GIB)));
    }

    #[test]
    fn levels_walk_up_to_the_mount() {
        let m = Path::new("/sys/fs/cgroup/memory");
        assert_eq!(levels(m, "/"), [m.to_path_buf()]);
        assert_eq!(levels(m, "/a/b"), [m.join("a/b"), m.join("a"), m.to_path_buf()]);
        assert_eq!(levels(m, "/../../x"), [m.to_path_buf()]);
    }

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[test]
    fn reads_a_v2_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "cgroup.controllers", "cpu memory\n");
        write(root, "cpu.max", "max 100000\n");
        write(root, "system.slice/cpu.max", "300000 100000\n");
        write(root, "system.slice/gpuhub.service/cpu.max", "max 100000\n");
        write(root, "system.slice/gpuhub.service/memory.max", "8589934592\n");
        let limits = cgroup_limits(root, "0::/system.slice/gpuhub.service\n");
        assert_eq!(limits, CgroupLimits { cpus: Some(CpuMilli(3000)), memory: Some(Bytes(8 * GIB)) });
        // a process in the root cgroup (a container with its own cgroup namespace) sees no limit
        assert_eq!(cgroup_limits(root, "0::/\n"), CgroupLimits::default());
    }

    #[test]
    fn reads_a_v1_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
        write(root, "cpu,cpuacct/cpu.cfs_period_us", "100000\n");
        write(root, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
        write(root, "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
        write(root, "memory/memory.limit_in_bytes", "2147483648\n");
        write(root, "memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
        let limits = cgroup_limits(root, "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n");
        assert_eq!(limits, CgroupLimits { cpus: Some(CpuMilli(1500)), memory: Some(Bytes(2 * GIB)) });
        // inside a container the hierarchy root is its own cgroup, and /proc/self/cgroup still names
        // the host path, which does not exist here
        let limits = cgroup_limits(root, "4:memory:/elsewhere\n2:cpu,cpuacct:/elsewhere\n");
        assert_eq!(limits, CgroupLimits { cpus: None, memory: Some(Bytes(2 * GIB)) });
    }

    #[test]
    fn this_host() {
        let (cpus, memory) = host_capacity().unwrap();
        assert!(cpus.0 >= 1, "{cpus}");
        assert!(memory.0 >= 16 * MIB, "{memory}");
        let parallelism = std::thread::available_parallelism().unwrap().get() as u64;
        assert!(cpus.0 <= parallelism * 1000);
        assert!(!hostname().unwrap().is_empty());
    }
}
