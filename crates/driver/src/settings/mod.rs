//! Each engine's settings, as plain data the configuration reads (`[slurm]`, `[lxd]`, `[kubernetes]`):
//! they live here, beside the engine-neutral interface, so that the configuration (`gpuhub-config`)
//! and the server need no engine crate. Each engine's constructor takes its settings from here; the
//! engine crates re-export them (`gpuhub_slurm::SlurmConfig` is [`slurm::SlurmConfig`]).

pub mod kube;
pub mod lxd;
pub mod slurm;
