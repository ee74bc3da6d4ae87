//! `[slurm]`: how gpuhub reaches a Slurm cluster and maps its own queues and users onto it.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The Slurm engine's settings (`engine = "slurm"` with a `[slurm]` section). Unknown keys are refused.
/// Nothing here is secret (munge authenticates the hub to Slurm; its key is not gpuhub's).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// The cluster's `slurm.conf`, given to every Slurm command as `SLURM_CONF` (default: unset, the
    /// commands' own default, `/etc/slurm/slurm.conf`).
    pub conf: Option<PathBuf>,
    /// Where `sbatch`, `squeue`, `sinfo`, `sacct`, `scontrol`, `scancel` and `srun` are (default: found
    /// on `PATH`). The batch scripts gpuhub submits call `srun` and `scancel` from here too, so the
    /// directory must hold them on the compute nodes as well.
    pub bin_dir: Option<PathBuf>,
    /// The Slurm partition runs go to when their queue names none (default: the cluster's default).
    pub partition: Option<String>,
    /// The Slurm account (`--account`, the association charged) when the queue names none.
    pub account: Option<String>,
    /// The Slurm QOS (`--qos`) when the queue names none.
    pub qos: Option<String>,
    /// gpuhub queue name → where its runs go in Slurm. A queue missing here, and the default queue
    /// (`""`), use the top-level `partition`, `account` and `qos`; so do the parts a mapping leaves out.
    pub queues: BTreeMap<String, QueueMapping>,
    /// gpuhub username → the cluster (Unix) account its runs run as. The account's UID and GID come
    /// from the hub host's user database (`getent passwd`), which must agree with the nodes'.
    pub accounts: BTreeMap<String, String>,
    /// Map a user missing from `accounts` to the cluster account of the same name (default: false, an
    /// unmapped user's runs are refused).
    pub map_usernames: bool,
    /// Where gpuhub keeps OCI bundles: `images/<image>` (an image's unpacked root file system, made
    /// from the local Docker daemon's image with skopeo and umoci on first use) and `runs/<run>` (a
    /// run's `config.json`: its mounts, environment and working directory). Must be the same path on
    /// the hub and every compute node (shared storage), readable by the job users.
    pub bundle_dir: PathBuf,
    /// Where members' output goes: `<log_dir>/<account>/job-<id>.m<i>.log` (and `.exit`, the member's
    /// exit status), written on the nodes by Slurm as the job's user and read by the hub. Must be the
    /// same path on the hub and every node (shared storage).
    pub log_dir: PathBuf,
    /// The OCI runtime `oci.conf` runs containers with (`crun` or `runc`); exec runs it too.
    pub oci_runtime: OciRuntime,
    /// The runtime's state directory on the nodes, as `oci.conf` passes it (`--root`): exec finds a
    /// member's container there.
    pub oci_root: PathBuf,
    /// A static init on every node (Debian's `tini-static`: `/usr/bin/tini-static`), run as each member's
    /// PID 1 as `docker --init` does: it passes SIGTERM on to the member's process and reaps orphans.
    /// Without it (the default) the member's own process is PID 1 of its container, which ignores
    /// SIGTERM unless it handles it, so a stop waits the whole grace before it kills.
    pub init: Option<PathBuf>,
    /// Shards (`--gres=shard`) per GPU, as the cluster's `gres.conf` counts them: a share of `milli`
    /// milli-GPU asks for `ceil(milli × shards_per_gpu / 1000)` shards (default 4).
    pub shards_per_gpu: u32,
    /// Whether the cluster keeps accounting (`slurmdbd`, the default: `sacct` has every ended job and
    /// step, so exit codes survive a hub restart of any length) or not (`none`: ended jobs are known
    /// only while slurmctld keeps them, `MinJobAge`, and members' exit codes from their `.exit` files).
    pub accounting: Accounting,
    /// How often the engine polls Slurm for its event stream, in milliseconds (default 2000).
    pub poll_ms: u64,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            conf: None,
            bin_dir: None,
            partition: None,
            account: None,
            qos: None,
            queues: BTreeMap::new(),
            accounts: BTreeMap::new(),
            map_usernames: false,
            bundle_dir: PathBuf::from("/var/lib/gpuhub/slurm/bundles"),
            log_dir: PathBuf::from("/var/lib/gpuhub/slurm/logs"),
            oci_runtime: OciRuntime::Crun,
            oci_root: PathBuf::from("/run/gpuhub-oci"),
            init: None,
            shards_per_gpu: 4,
            accounting: Accounting::Slurmdbd,
            poll_ms: 2000,
        }
    }
}

/// Where one gpuhub queue's runs go in Slurm; an unset part falls back to the top-level setting.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueMapping {
    /// `--partition`.
    #[serde(default)]
    pub partition: Option<String>,
    /// `--account`.
    #[serde(default)]
    pub account: Option<String>,
    /// `--qos`.
    #[serde(default)]
    pub qos: Option<String>,
}

/// The OCI runtime of the cluster's `oci.conf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OciRuntime {
    /// crun, rootless: the job's user is itself inside the container.
    #[default]
    Crun,
    /// runc, rootless: the job's user is UID 0 inside (runc insists on mapping root).
    Runc,
}

impl OciRuntime {
    /// The command's name.
    pub fn command(self) -> &'static str {
        match self {
            OciRuntime::Crun => "crun",
            OciRuntime::Runc => "runc",
        }
    }
}

/// Whether the cluster keeps job accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accounting {
    /// slurmdbd: `sacct` answers for ended jobs.
    #[default]
    Slurmdbd,
    /// None: only slurmctld's memory of ended jobs (`MinJobAge`).
    None,
}

/// Where a run of one gpuhub queue goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
}

impl SlurmConfig {
    /// The partition, account and QOS of gpuhub queue `queue` (`""`: the default queue).
    pub fn placement(&self, queue: &str) -> Placement {
        let m = self.queues.get(queue).cloned().unwrap_or_default();
        Placement {
            partition: m.partition.or_else(|| self.partition.clone()),
            account: m.account.or_else(|| self.account.clone()),
            qos: m.qos.or_else(|| self.qos.clone()),
        }
    }

    /// The cluster account gpuhub user `username` runs as, if any.
    pub fn cluster_account(&self, username: &str) -> Option<String> {
        match self.accounts.get(username) {
            Some(a) => Some(a.clone()),
            None if self.map_usernames && !username.is_empty() => Some(username.to_owned()),
            None => None,
        }
    }

    /// The partitions gpuhub sends work to (empty: it names none, so the cluster's default).
    pub fn partitions(&self) -> Vec<String> {
        let mut out: Vec<String> = self.partition.iter().cloned().collect();
        out.extend(self.queues.values().filter_map(|q| q.partition.clone()));
        out.sort();
        out.dedup();
        out
    }

    /// The path of Slurm command `name` (`sbatch`): in `bin_dir`, or the bare name, found on `PATH`.
    pub fn command(&self, name: &str) -> String {
        match &self.bin_dir {
            Some(dir) => dir.join(name).to_string_lossy().into_owned(),
            None => name.to_owned(),
        }
    }

    /// Settings that cannot work, in words.
    pub fn check(&self) -> Result<(), String> {
        if self.shards_per_gpu == 0 {
            return Err("slurm.shards_per_gpu must be at least 1".into());
        }
        if self.poll_ms < 100 {
            return Err("slurm.poll_ms must be at least 100".into());
        }
        if let Some(init) = self.init.as_ref().filter(|p| !p.is_absolute()) {
            return Err(format!("slurm.init must be an absolute path, not {}", init.display()));
        }
        for (what, p) in [("bundle_dir", &self.bundle_dir), ("log_dir", &self.log_dir), ("oci_root", &self.oci_root)] {
            if !p.is_absolute() {
                return Err(format!("slurm.{what} must be an absolute path, not {}", p.display()));
            }
            if p.to_str().is_none_or(|s| s.chars().any(|c| c.is_whitespace() || "'\"\\$`%".contains(c))) {
                return Err(format!("slurm.{what} must not contain spaces, quotes, `$`, `%` or backslashes"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_a_full_section() {
        let c: SlurmConfig = toml::from_str("").unwrap();
        assert_eq!(c, SlurmConfig::default());
        assert_eq!((c.shards_per_gpu, c.poll_ms, c.accounting), (4, 2000, Accounting::Slurmdbd));
        let c: SlurmConfig = toml::from_str(
            r#"
            conf = "/var/lib/gpuhub-slurm-dev/slurm.conf"
            partition = "gpu"
            account = "research"
            accounts = { alice = "alice01" }
            map_usernames = true
            bundle_dir = "/shared/bundles"
            log_dir = "/shared/logs"
            oci_runtime = "runc"
            init = "/usr/bin/tini-static"
            accounting = "none"
            [queues.short]
            partition = "debug"
            qos = "quick"
            "#,
        )
        .unwrap();
        assert_eq!(c.oci_runtime, OciRuntime::Runc);
        assert_eq!(c.init.as_deref(), Some(std::path::Path::new("/usr/bin/tini-static")));
        assert_eq!(c.accounting, Accounting::None);
        assert_eq!(
            c.placement("short"),
            Placement { partition: Some("debug".into()), account: Some("research".into()), qos: Some("quick".into()) }
        );
        assert_eq!(c.placement("").partition.as_deref(), Some("gpu"));
        assert_eq!(c.placement("unknown").partition.as_deref(), Some("gpu"));
        assert_eq!(c.cluster_account("alice").as_deref(), Some("alice01"));
        assert_eq!(c.cluster_account("bob").as_deref(), Some("bob"));
        assert_eq!(c.partitions(), ["debug", "gpu"]);
        c.check().unwrap();
    }

    #[test]
    fn refusals() {
        assert!(toml::from_str::<SlurmConfig>("partitoin = \"gpu\"").is_err(), "unknown key");
        assert!(toml::from_str::<SlurmConfig>("[queues.a]\nnode = \"x\"").is_err());
        assert!(toml::from_str::<SlurmConfig>("oci_runtime = \"docker\"").is_err());
        let c = SlurmConfig::default();
        assert_eq!(c.cluster_account("alice"), None, "unmapped without map_usernames");
        assert!(SlurmConfig { shards_per_gpu: 0, ..Default::default() }.check().is_err());
        assert!(SlurmConfig { log_dir: "logs".into(), ..Default::default() }.check().is_err());
        assert!(SlurmConfig { bundle_dir: "/a b".into(), ..Default::default() }.check().is_err());
        assert!(SlurmConfig { init: Some("tini".into()), ..Default::default() }.check().is_err());
        let c = SlurmConfig { bin_dir: Some("/opt/slurm/bin".into()), ..Default::default() };
        assert_eq!(c.command("sbatch"), "/opt/slurm/bin/sbatch");
        assert_eq!(SlurmConfig::default().command("sbatch"), "sbatch");
    }
}
