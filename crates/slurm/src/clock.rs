//! The engine's clock, the one place it asks the time: how soon a pending job's estimated start is,
//! against Slurm's own wall-clock estimate. The status functions take `now` as an argument, so their
//! tests pin it.

use chrono::{DateTime, Utc};

/// Now.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
}
