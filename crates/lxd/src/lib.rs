//! The LXD engine: gpuhub's engine interface on an LXD daemon on this host, over LXD's REST API on its
//! Unix socket. Each run is one unprivileged system container made from the run's image (converted once
//! from the hub's Docker daemon into an LXD image), with the user's UID and GID mapped 1:1 (`raw.idmap`)
//! so that homes and datasets, bind-mounted as disk devices, are written as the user; CPU, memory and
//! process limits (`limits.*`); GPUs (whole, or a share's one GPU) as device nodes, a share's limits in
//! its environment and an MPS share's daemon mounted as disk devices; apps reached through LXD proxy
//! devices on 127.0.0.1 (containers need no network); workspaces saved as LXD images (`lxc publish` of a
//! snapshot). Every process of a container (by its cgroup) is the member's, for the GPU memory guard.
//!
//! An application image has no init: the container's init is a start script (`/bin/sh`, so the image
//! needs a shell) run as the member's user, which runs the command, keeps its output in the run's
//! directory on the host and writes its exit status there when it ends; the container stops with it.
//! See [`spec::init_script`].

pub mod api;
pub mod config;
mod engine;
mod events;
mod exec;
pub mod images;
mod logs;
mod procs;
mod pull;
mod runs;
pub mod spec;

pub use config::LxdConfig;
pub use engine::{KILLED, LxdEngine};

/// Label listing the GPU UUIDs a member's container was given (comma-separated).
pub const LABEL_GPUS: &str = "gpuhub.gpus";
