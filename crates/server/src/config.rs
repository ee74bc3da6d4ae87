//! The server's configuration is the `gpuhub-config` crate's, re-exported under its old path
//! (`gpuhub_server::config::Config`): typed settings layered defaults → file → `GPUHUB_*`. What the
//! server does with them is here: the queue and priority policy in [`crate::queues::policy`], what
//! each part takes at start in [`crate::setup`].

pub use gpuhub_config::*;
