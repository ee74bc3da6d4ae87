use super::*;
use std::collections::HashMap;

const ID: &str = "fb00a137a47385a04318349b3eaaf317feb467fa8c8b982271a6f9ac0e410c0c";
const MIB: u64 = 1 << 20;

/// A process of a container on a cgroup v1 host with the cgroupfs driver (hybrid: a v2 line too), as
/// Docker 20.10 on Debian makes it.
fn v1_cgroupfs() -> String {
    [
        "9:name=systemd:/docker/ID",
        "8:pids:/docker/ID",
        "7:blkio:/docker/ID",
        "4:memory:/docker/ID",
        "3:cpuset:/docker/ID",
        "2:cpuacct:/docker/ID",
        "1:cpu:/docker/ID",
        "0::/docker/ID",
        "",
    ]
    .join("\n")
    .replace("ID", ID)
}

/// The mounts of a hybrid host: each v1 controller on its own hierarchy, v2 at `unified`.
const MOUNTINFO_V1: &str = "\
24 31 0:22 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

/// The mounts of a systemd v1 host: cpu and cpuacct together, optional fields before the separator.
const MOUNTINFO_V1_SYSTEMD: &str = "\
25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
31 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
33 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory
";

/// The mounts of a pure cgroup v2 host.
const MOUNTINFO_V2: &str = "\
22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
25 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

/// `memory.stat` of a v1 container holding about 200 MiB of anonymous memory and 2 MiB of inactive
/// page cache (figures from this host).
const V1_STAT: &str = "\
cache 1961984
rss 209907712
inactive_file 1957888
active_file 4096
hierarchical_memory_limit 268435456
total_cache 1961984
total_rss 209907712
total_inactive_anon 94208
total_inactive_file 1957888
total_active_file 4096
";

/// `memory.stat` of a v2 container.
const V2_STAT: &str = "\
anon 209715200
file 5242880
kernel_stack 32768
inactive_anon 209715200
active_anon 0
inactive_file 4194304
active_file 1048576
";

const V2_CPU_STAT: &str = "\
usage_usec 2500000
user_usec 2000000
system_usec 500000
nr_periods 0
nr_throttled 0
throttled_usec 0
";

#[test]
fn finds_container_ids() {
    assert_eq!(container_id_from_cgroup(&v1_cgroupfs()).as_deref(), Some(ID));
    let systemd =
        format!("12:memory:/system.slice/docker-{ID}.scope\n1:name=systemd:/system.slice/docker-{ID}.scope\n");
    assert_eq!(container_id_from_cgroup(&systemd).as_deref(), Some(ID));
    assert_eq!(container_id_from_cgroup(&format!("0::/system.slice/docker-{ID}.scope\n")).as_deref(), Some(ID));
    assert_eq!(container_id_from_cgroup(&format!("0::/docker/{ID}\n")).as_deref(), Some(ID));
    // Docker in Docker: the innermost container
    let inner = "a".repeat(64);
    assert_eq!(container_id_from_cgroup(&format!("0::/docker/{ID}/docker/{inner}\n")), Some(inner));
    // a process the container runs in a sub-cgroup of its own
    assert_eq!(
        container_id_from_cgroup(&format!("0::/system.slice/docker-{ID}.scope/init.scope\n")).as_deref(),
        Some(ID)
    );
    // not in a container, or not one of Docker's
    for text in [
        "0::/user.slice/user-1000.slice/session-2.scope\n",
        "0::/system.slice/docker.service\n",
        "4:memory:/\n",
        &format!("0::/kubepods/besteffort/pod1/{ID}\n"),
        &format!("0::/docker/{}\n", &ID[..63]),
        &format!("0::/docker/{}\n", ID.to_uppercase()),
        &format!("0::/system.slice/docker-{ID}x.scope\n"),
        "",
        "garbage",
    ] {
        assert_eq!(container_id_from_cgroup(text), None, "{text:?}");
    }
}

#[test]
fn locates_v1_cgroups_of_both_drivers() {
    assert_eq!(
        locate(&v1_cgroupfs(), MOUNTINFO_V1).unwrap(),
        CgroupDirs::V1 {
            memory: PathBuf::from(format!("/sys/fs/cgroup/memory/docker/{ID}")),
            cpuacct: PathBuf::from(format!("/sys/fs/cgroup/cpuacct/docker/{ID}")),
        },
        "hybrid: v1 controllers win over the unified hierarchy"
    );
    let scope = format!("/system.slice/docker-{ID}.scope");
    let systemd = format!("4:memory:{scope}\n3:cpu,cpuacct:{scope}\n1:name=systemd:{scope}\n0::{scope}\n");
    assert_eq!(
        locate(&systemd, MOUNTINFO_V1_SYSTEMD).unwrap(),
        CgroupDirs::V1 {
            memory: PathBuf::from(format!("/sys/fs/cgroup/memory{scope}")),
            cpuacct: PathBuf::from(format!("/sys/fs/cgroup/cpu,cpuacct{scope}")),
        }
    );
    let no_cpuacct = MOUNTINFO_V1.lines().filter(|l| !l.contains("cpuacct")).collect::<Vec<_>>().join("\n");
    assert!(locate(&v1_cgroupfs(), &no_cpuacct).unwrap_err().contains("cpuacct"));
}

#[test]
fn locates_v2_cgroups() {
    let scope = format!("0::/system.slice/docker-{ID}.scope\n");
    assert_eq!(
        locate(&scope, MOUNTINFO_V2).unwrap(),
        CgroupDirs::V2 { dir: PathBuf::from(format!("/sys/fs/cgroup/system.slice/docker-{ID}.scope")) }
    );
    assert!(locate(&scope, MOUNTINFO_V1.lines().take(2).collect::<String>().as_str()).is_err(), "nothing mounted");
    assert!(locate("", MOUNTINFO_V2).is_err(), "in no cgroup");
    // a mount whose root is a cgroup (a cgroup namespace, a bind mount): paths are relative to it
    let nested = "30 25 0:23 /system.slice /mnt/cg rw - cgroup2 cgroup2 rw\n";
    assert_eq!(
        locate(&scope, nested).unwrap(),
        CgroupDirs::V2 { dir: PathBuf::from(format!("/mnt/cg/docker-{ID}.scope")) }
    );
    assert!(locate("0::/user.slice/x\n", nested).unwrap_err().contains("outside"));
    assert!(locate("0::/system.slice/../etc\n", MOUNTINFO_V2).unwrap_err().contains("leaves"));
    // escaped mount points
    let spaced = "30 25 0:23 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
    assert_eq!(locate("0::/a\n", spaced).unwrap(), CgroupDirs::V2 { dir: PathBuf::from("/mnt/my cgroups/a") });
}

#[test]
fn parses_v1_figures() {
    let files = V1Files {
        usage_in_bytes: "211046400\n",
        memory_stat: V1_STAT,
        limit_in_bytes: "268435456\n",
        cpuacct_usage: "1525517748\n",
        procs: "4703\n4676\n4702\n4704\n",
    };
    let u = parse_v1(files).unwrap();
    assert_eq!(u.memory_used, Bytes(211046400 - 1957888), "the inactive file cache does not count");
    assert_eq!(u.memory_limit, Some(Bytes(256 * MIB)));
    assert!((u.cpu_seconds - 1.525517748).abs() < 1e-9, "{}", u.cpu_seconds);
    assert_eq!(u.pids, [4676, 4702, 4703, 4704]);

    // no limit: the kernel's largest page counter in bytes (4 KiB and 64 KiB pages)
    for unlimited in ["9223372036854771712\n", "9223372036854710272\n"] {
        assert_eq!(parse_v1(V1Files { limit_in_bytes: unlimited, ..files }).unwrap().memory_limit, None);
    }
    // more inactive cache than usage (they are read one after the other): none used, not a wrap
    let odd = parse_v1(V1Files { usage_in_bytes: "1000\n", ..files }).unwrap();
    assert_eq!(odd.memory_used, Bytes(0));
    // a stat without the total: nothing subtracted
    assert_eq!(parse_v1(V1Files { memory_stat: "cache 5\n", ..files }).unwrap().memory_used, Bytes(211046400));
    assert_eq!(parse_v1(V1Files { procs: "", ..files }).unwrap().pids, Vec::<u32>::new());
    assert!(parse_v1(V1Files { usage_in_bytes: "lots\n", ..files }).unwrap_err().contains("memory.usage_in_bytes"));
    assert!(parse_v1(V1Files { cpuacct_usage: "", ..files }).unwrap_err().contains("cpuacct.usage"));
    assert!(parse_v1(V1Files { procs: "12 x\n", ..files }).unwrap_err().contains("cgroup.procs"));
}

#[test]
fn parses_v2_figures() {
    let files = V2Files {
        memory_current: "214958080\n",
        memory_stat: V2_STAT,
        memory_max: "268435456\n",
        cpu_stat: V2_CPU_STAT,
        procs: "812\n790\n",
    };
    let u = parse_v2(files).unwrap();
    assert_eq!(u.memory_used, Bytes(214958080 - 4194304));
    assert_eq!(u.memory_limit, Some(Bytes(256 * MIB)));
    assert!((u.cpu_seconds - 2.5).abs() < 1e-9, "{}", u.cpu_seconds);
    assert_eq!(u.pids, [790, 812]);
    assert_eq!(parse_v2(V2Files { memory_max: "max\n", ..files }).unwrap().memory_limit, None);
    assert!(parse_v2(V2Files { cpu_stat: "nr_periods 0\n", ..files }).unwrap_err().contains("usage_usec"));
    assert!(parse_v2(V2Files { memory_max: "-1\n", ..files }).unwrap_err().contains("memory.max"));
}

/// Files from a map; anything else is missing.
#[derive(Debug, Default)]
struct FakeFiles(HashMap<PathBuf, Result<String, io::ErrorKind>>);

impl FakeFiles {
    fn with(mut self, path: impl Into<PathBuf>, text: &str) -> Self {
        self.0.insert(path.into(), Ok(text.to_owned()));
        self
    }
}

impl Files for FakeFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        match self.0.get(path) {
            Some(Ok(text)) => Ok(text.clone()),
            Some(Err(kind)) => Err(io::Error::from(*kind)),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
}

fn v2_host() -> FakeFiles {
    let dir = format!("/sys/fs/cgroup/system.slice/docker-{ID}.scope");
    FakeFiles::default()
        .with("/proc/42/cgroup", &format!("0::/system.slice/docker-{ID}.scope\n"))
        .with("/proc/self/mountinfo", MOUNTINFO_V2)
        .with(format!("{dir}/memory.current"), "214958080\n")
        .with(format!("{dir}/memory.stat"), V2_STAT)
        .with(format!("{dir}/memory.max"), "max\n")
        .with(format!("{dir}/cpu.stat"), V2_CPU_STAT)
        .with(format!("{dir}/cgroup.procs"), "42\n43\n")
}

#[test]
fn reads_through_the_seam() {
    let u = read_usage(&v2_host(), 42, ID).unwrap();
    assert_eq!((u.memory_used, u.memory_limit, u.pids), (Bytes(214958080 - 4194304), None, vec![42, 43]));

    let mem = format!("/sys/fs/cgroup/memory/docker/{ID}");
    let v1 = FakeFiles::default()
        .with("/proc/7/cgroup", &v1_cgroupfs())
        .with("/proc/self/mountinfo", MOUNTINFO_V1)
        .with(format!("{mem}/memory.usage_in_bytes"), "211046400\n")
        .with(format!("{mem}/memory.stat"), V1_STAT)
        .with(format!("{mem}/memory.limit_in_bytes"), "268435456\n")
        .with(format!("{mem}/cgroup.procs"), "7\n")
        .with(format!("/sys/fs/cgroup/cpuacct/docker/{ID}/cpuacct.usage"), "1000000000\n");
    let u = read_usage(&v1, 7, ID).unwrap();
    assert_eq!((u.memory_limit, u.pids, u.cpu_seconds), (Some(Bytes(256 * MIB)), vec![7], 1.0));
}

#[test]
fn an_ended_container_is_gone_and_other_failures_are_errors() {
    // its process ended
    assert!(matches!(read_usage(&v2_host(), 41, ID), Err(ReadError::Gone)));
    // its PID now belongs to a process of another container
    assert!(matches!(read_usage(&v2_host(), 42, &"b".repeat(64)), Err(ReadError::Gone)));
    // its cgroup was removed between two reads
    let mut removed = v2_host();
    removed.0.retain(|p, _| !p.ends_with("cpu.stat"));
    assert!(matches!(read_usage(&removed, 42, ID), Err(ReadError::Gone)));
    // a file that cannot be read, or holds nonsense
    let mut denied = v2_host();
    denied.0.insert(
        format!("/sys/fs/cgroup/system.slice/docker-{ID}.scope/memory.stat").into(),
        Err(io::ErrorKind::PermissionDenied),
    );
    assert!(matches!(read_usage(&denied, 42, ID), Err(ReadError::Failed(m)) if m.contains("memory.stat")));
    let garbled = v2_host().with(format!("/sys/fs/cgroup/system.slice/docker-{ID}.scope/memory.current"), "?\n");
    assert!(matches!(read_usage(&garbled, 42, ID), Err(ReadError::Failed(m)) if m.contains("memory.current")));
    let unmounted = v2_host().with("/proc/self/mountinfo", "");
    assert!(matches!(read_usage(&unmounted, 42, ID), Err(ReadError::Failed(_))));
}
