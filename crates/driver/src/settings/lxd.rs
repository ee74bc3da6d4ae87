//! `[lxd]`: how gpuhub reaches an LXD daemon on this host, and where it keeps its own files.

use serde::Deserialize;
use std::path::PathBuf;

/// The LXD engine's settings (`engine = "lxd"` with a `[lxd]` section). Unknown keys are refused. The
/// defaults find Debian's daemon (`apt-get install lxd`): its socket, the `default` project and storage pool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LxdConfig {
    /// LXD's Unix socket (default `/var/lib/lxd/unix.socket`, Debian's; the snap's is
    /// `/var/snap/lxd/common/lxd/unix.socket`).
    pub socket: PathBuf,
    /// The LXD project gpuhub's containers and images live in (default `default`).
    pub project: String,
    /// The storage pool containers' root file systems are made in (default `default`).
    pub storage_pool: String,
    /// Where gpuhub keeps each run's directory (`runs/<container>`: its start script, output and exit
    /// status, mounted at `/.gpuhub` in the container) and converts images (`images/`). Default
    /// `/var/lib/gpuhub/lxd`.
    pub state_dir: PathBuf,
    /// A managed LXD network each container gets a NIC on (`eth0`); default none: containers have
    /// loopback only, and the hub reaches their apps through LXD proxy devices.
    pub network: Option<String>,
    /// How often the engine polls LXD for its event stream, in milliseconds (default 1000).
    pub poll_ms: u64,
}

impl Default for LxdConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/var/lib/lxd/unix.socket"),
            project: "default".into(),
            storage_pool: "default".into(),
            state_dir: PathBuf::from("/var/lib/gpuhub/lxd"),
            network: None,
            poll_ms: 1000,
        }
    }
}

impl LxdConfig {
    /// What is wrong with the settings, in a sentence; `Ok` when nothing is.
    pub fn check(&self) -> Result<(), String> {
        if !self.socket.is_absolute() {
            return Err(format!("lxd.socket must be an absolute path, not {}", self.socket.display()));
        }
        if !self.state_dir.is_absolute() {
            return Err(format!("lxd.state_dir must be an absolute path, not {}", self.state_dir.display()));
        }
        if self.project.is_empty() || self.storage_pool.is_empty() {
            return Err("lxd.project and lxd.storage_pool must not be empty".into());
        }
        if self.poll_ms == 0 {
            return Err("lxd.poll_ms must be at least 1".into());
        }
        Ok(())
    }

    /// `<state_dir>/runs`.
    pub fn runs_dir(&self) -> PathBuf {
        self.state_dir.join("runs")
    }

    /// `<state_dir>/images`.
    pub fn images_dir(&self) -> PathBuf {
        self.state_dir.join("images")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_find_debians_daemon_and_unknown_keys_are_refused() {
        let c: LxdConfig = toml::from_str("").unwrap();
        assert_eq!(c, LxdConfig::default());
        assert_eq!(c.socket, PathBuf::from("/var/lib/lxd/unix.socket"));
        assert!(c.check().is_ok());
        let c: LxdConfig = toml::from_str("socket = \"/run/lxd.sock\"\nstorage_pool = \"fast\"").unwrap();
        assert_eq!((c.socket.to_str(), c.storage_pool.as_str()), (Some("/run/lxd.sock"), "fast"));
        let e = toml::from_str::<LxdConfig>("sockett = \"/x\"").unwrap_err();
        assert!(e.to_string().contains("sockett"), "{e}");
        let bad = LxdConfig { socket: "lxd.sock".into(), ..Default::default() };
        assert!(bad.check().unwrap_err().contains("absolute"));
    }
}
