//! The client's clock, the one place it asks the time: tables say how long ago things happened, and
//! `--since` windows end now. Commands take `now` as an argument, so their tests pin it.

use chrono::{DateTime, Utc};

/// Now.
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now()
}
