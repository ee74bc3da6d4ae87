//! Bookings of whole GPUs for a team queue during a window.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A booking of GPUs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReservationView {
    pub id: String,
    pub queue: String,
    pub gpus: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The admin who made it; `config` for bookings of the configuration file.
    pub created_by: String,
}
