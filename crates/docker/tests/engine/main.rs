//! Integration tests against the real Docker engine on this machine (they build `gpuhub/busybox:latest`
//! with `scripts/build-busybox-image.sh` when it is missing). Every test uses its own names and removes
//! what it made.

mod common;
mod disk;
mod events;
mod exec;
mod gpu;
mod lifecycle;
mod mounts;
mod network;
mod usage;
