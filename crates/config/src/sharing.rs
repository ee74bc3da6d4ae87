//! How shares of GPUs are enforced: `gpu_sharing` (`mps`, `guard`, `none`; per GPU `[[gpus]] sharing`),
//! `[guard]` (the memory guard's grace) and `[mps]` (gpuhub's own MPS control daemons).

use super::{Config, ConfigError};
use gpuhub_core::node::{GpuDevice, GpuSharing};
use serde::Deserialize;
use std::path::PathBuf;

/// The GPU memory guard (`[guard]`), for GPUs in the `guard` mode (and as a backstop under `mps`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardConfig {
    /// Seconds a share may stay above its GPU memory grant after its owner is warned before it is
    /// stopped with `gpu-memory-exceeded` (`GPUHUB_GUARD_GRACE_SECS`; 0 stops at once).
    pub grace_secs: u64,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self { grace_secs: 60 }
    }
}

/// gpuhub's MPS control daemons (`[mps]`), one per GPU in the `mps` mode.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MpsConfig {
    /// The `nvidia-cuda-mps-control` program (`GPUHUB_MPS_CONTROL`); unset: the one on `PATH`.
    pub control: Option<PathBuf>,
    /// Where each daemon's pipe, log and shared-memory directories are (`GPUHUB_MPS_DIR`); unset:
    /// `/run/gpuhub/mps`. Every user must be able to enter it (MPS starts each user's server as that
    /// user), so never inside the 0700 data directory.
    pub dir: Option<PathBuf>,
    /// Put each GPU in the EXCLUSIVE_PROCESS compute mode (`nvidia-smi -c`) while its daemon runs, so a
    /// client that unsets `CUDA_MPS_PIPE_DIRECTORY` in its container cannot run on the GPU past MPS
    /// (`GPUHUB_MPS_EXCLUSIVE_PROCESS`; on by default, as NVIDIA's device plugin does).
    pub exclusive_process: bool,
}

impl Default for MpsConfig {
    fn default() -> Self {
        Self { control: None, dir: None, exclusive_process: true }
    }
}

/// The default of `[mps] dir`.
pub const DEFAULT_MPS_DIR: &str = "/run/gpuhub/mps";

/// The largest grace accepted: a day.
const MAX_GRACE_SECS: u64 = 86_400;

/// The settings that cannot work: a grace beyond a day, `mps` where gpuhub does not place on this host.
pub(super) fn check(cfg: &Config) -> Result<(), ConfigError> {
    if cfg.guard.grace_secs > MAX_GRACE_SECS {
        return Err(ConfigError::Invalid {
            key: "guard.grace_secs".into(),
            reason: format!("{} is more than a day ({MAX_GRACE_SECS})", cfg.guard.grace_secs),
        });
    }
    let mps = cfg.gpu_sharing == Some(GpuSharing::Mps) || cfg.gpus.iter().any(|g| g.sharing == Some(GpuSharing::Mps));
    if mps && !matches!(cfg.engine, super::EngineKind::Docker | super::EngineKind::Lxd) {
        return Err(ConfigError::Invalid {
            key: "gpu_sharing".into(),
            reason: "mps is run by gpuhub only where it places work on this host (engine = \"docker\" or \"lxd\"); \
                     on Slurm, share GPUs through Slurm's own gres (shard or mps)"
                .into(),
        });
    }
    Ok(())
}

impl Config {
    /// The mode in force for the GPUs of this host: each GPU's own `[[gpus]] sharing` (matched by UUID,
    /// else by index when the GPUs come from NVML), else `gpu_sharing`, else `guard` where NVML measures
    /// the GPUs (`nvml`) and `none` where nothing could measure them.
    pub fn resolve_sharing(&self, gpus: &mut [GpuDevice], nvml: bool) {
        let default = self.gpu_sharing.unwrap_or(if nvml { GpuSharing::Guard } else { GpuSharing::Unenforced });
        for g in gpus {
            let own = self
                .gpus
                .iter()
                .find(|c| c.uuid == g.uuid)
                .or_else(|| nvml.then(|| self.gpus.iter().find(|c| c.index == g.index)).flatten())
                .and_then(|c| c.sharing);
            g.sharing = Some(own.or(g.sharing).unwrap_or(default));
        }
    }

    /// Where gpuhub's MPS daemons keep their directories: `[mps] dir`, or `/run/gpuhub/mps`.
    pub fn mps_dir(&self) -> PathBuf {
        self.mps.dir.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_MPS_DIR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::Bytes;

    fn gpu(uuid: &str, index: u32, sharing: Option<GpuSharing>) -> GpuDevice {
        GpuDevice { uuid: uuid.into(), index, model: "H200".into(), memory: Bytes(141 << 30), device: None, sharing }
    }

    #[test]
    fn each_gpu_gets_its_own_mode_or_the_default() {
        let cfg = Config::from_toml(
            r#"
            gpu_sharing = "guard"
            [[gpus]]
            uuid = "GPU-b"
            index = 1
            model = "H200"
            memory = "141GiB"
            sharing = "mps"
            "#,
        )
        .unwrap();
        let mut found = vec![gpu("GPU-a", 0, None), gpu("GPU-b", 1, None)];
        cfg.resolve_sharing(&mut found, true);
        assert_eq!(
            found.iter().map(|g| g.sharing).collect::<Vec<_>>(),
            [Some(GpuSharing::Guard), Some(GpuSharing::Mps)]
        );
        // NVML names GPUs by UUIDs the file may not know: the index matches then
        let mut nvml = vec![gpu("GPU-real-0", 0, None), gpu("GPU-real-1", 1, None)];
        cfg.resolve_sharing(&mut nvml, true);
        assert_eq!(nvml[1].sharing, Some(GpuSharing::Mps));
        // without a mode: guard where NVML measures, none where nothing can
        let auto = Config::default();
        let mut g = vec![gpu("GPU-a", 0, None)];
        auto.resolve_sharing(&mut g, true);
        assert_eq!(g[0].sharing, Some(GpuSharing::Guard));
        auto.resolve_sharing(&mut g, false);
        assert_eq!(g[0].sharing, Some(GpuSharing::Guard), "a mode already resolved stays");
        let mut g = vec![gpu("GPU-a", 0, None)];
        auto.resolve_sharing(&mut g, false);
        assert_eq!(g[0].sharing, Some(GpuSharing::Unenforced));
    }

    #[test]
    fn variables_and_refusals() {
        let env = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        let c = Config::load(None, env("GPUHUB_GPU_SHARING", "mps")).unwrap();
        assert_eq!(c.gpu_sharing, Some(GpuSharing::Mps));
        let e = Config::load(None, env("GPUHUB_GPU_SHARING", "hami")).unwrap_err().to_string();
        assert!(e.contains("GPUHUB_GPU_SHARING") && e.contains("expected mps, guard or none"), "{e}");
        let c = Config::load(None, env("GPUHUB_GUARD_GRACE_SECS", "5")).unwrap();
        assert_eq!(c.guard.grace_secs, 5);
        let e = Config::load(None, env("GPUHUB_GUARD_GRACE_SECS", "100000")).unwrap_err().to_string();
        assert!(e.contains("more than a day"), "{e}");
        let c = Config::load(None, env("GPUHUB_MPS_CONTROL", "/opt/nv/nvidia-cuda-mps-control")).unwrap();
        assert_eq!(c.mps.control.as_deref(), Some(std::path::Path::new("/opt/nv/nvidia-cuda-mps-control")));
        assert_eq!(c.mps_dir(), std::path::Path::new("/run/gpuhub/mps"));
        assert!(c.mps.exclusive_process);
        let c = Config::load(None, env("GPUHUB_MPS_EXCLUSIVE_PROCESS", "false")).unwrap();
        assert!(!c.mps.exclusive_process);
        let e = Config::from_toml("gpu_sharing = \"mps\"\nengine = \"slurm\"\n")
            .map(|c| c.check())
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("only where it places work"), "{e}");
        let c = Config::from_toml("gpu_sharing = \"mps\"\nengine = \"lxd\"\n").map(|c| c.check());
        assert!(matches!(c, Ok(Ok(()))), "lxd runs shares on this host, as docker: {c:?}");
        assert!(Config::from_toml("[guard]\ngrace = 5\n").is_err(), "unknown keys are refused");
    }
}
