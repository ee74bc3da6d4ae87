//! The engine's settings are engine-neutral data in [`gpuhub_driver::settings::kube`], so that the
//! configuration needs no engine crate; re-exported here under their old paths.

pub use gpuhub_driver::settings::kube::*;
