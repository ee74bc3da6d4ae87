//! gpuhub's engine on a Slurm cluster: [`SlurmEngine`], the [`gpuhub_driver::Engine`] over the Slurm
//! commands, parsed: `sbatch --parsable`, `squeue` (text; `--json` for GPU indices), `sinfo --json`,
//! `sacct -P`, `scontrol show job -d`, `scancel`, `srun`. Only this crate knows Slurm.
//!
//! Slurm places; gpuhub submits and follows. A run is one job named `gpuhub-<instance12>-<workload>`
//! whose `--comment` carries gpuhub's labels as JSON (how `list_runs` finds runs again after a restart);
//! its id is the job id. The job has one node per member; the batch script gpuhub writes
//! ([`script`]) starts member i as job step `m<i>` on node i, in the run's image through Slurm's OCI
//! container support (`--container` with a bundle gpuhub prepared, [`bundle`]), with the rank variables.
//! A whole GPU is `--gres=gpu:N`, a share `--gres=shard:N`. Jobs run as the cluster account the gpuhub
//! user maps to (`sbatch --uid --gid`, submitted by the hub as root).
//!
//! Every call to the outside goes through [`cli::SlurmCli`]: [`cli::ProcessCli`] runs the commands,
//! [`fake::FakeCli`] answers tests from a script and records what was run.
//!
//! GPU shares under MPS are Slurm's own (`gres/mps`, with Slurm's MPS daemons): gpuhub refuses nothing
//! here, and its own MPS supervisor (`gpuhub-mps`, one daemon per GPU with the pipe and shared-memory
//! directories mounted into each share's container) is for engines where gpuhub places (Docker), since
//! it must know a share's GPU before the run starts. Members of Slurm runs get no
//! [`gpuhub_driver::MemberSpec::mounts`].
//!
//! What needs storage shared between the hub and the nodes: `bundle_dir` (the hub writes bundles, the
//! nodes run them) and `log_dir` (the nodes write members' output, the hub reads it). Members' ports
//! are reached at their node's address, from the hub's network, with no shared file system.

pub mod bundle;
pub mod cli;
mod clock;
pub mod config;
mod engine;
pub mod error;
mod events;
mod exec;
pub mod fake;
mod logs;
pub mod parse;
mod runs;
pub mod script;
pub mod status;

pub use config::{Accounting, OciRuntime, QueueMapping, SlurmConfig};
pub use engine::{COMMAND_TIMEOUT, MAX_MEMBERS, SlurmEngine};
pub use events::{Tracked, Tracker};
pub use logs::{stream_file, tail_offset};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
