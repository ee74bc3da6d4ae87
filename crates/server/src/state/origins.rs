//! The app origins' state, shared in the [`AppState`](super::AppState): the handoff codes waiting to be
//! redeemed and the app sessions made of them (what is done with them is `crate::origins`').

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// A handoff code waiting to be redeemed.
pub(crate) struct Handoff {
    /// The hash of the hub session it was minted for.
    pub(crate) session: String,
    /// The app origin's label it is valid on.
    pub(crate) label: String,
    /// Where on that origin the visitor goes (path and query).
    pub(crate) next: String,
    /// The hash of the browser's bind cookie on that origin, once the hub bound the code to it (a
    /// code is redeemed only by the browser that asked for it).
    pub(crate) bind: Option<String>,
    pub(crate) expires: DateTime<Utc>,
}

/// An app session: a cookie on one app origin, standing for a hub session.
pub(crate) struct AppSession {
    pub(crate) session: String,
    pub(crate) label: String,
    pub(crate) expires: DateTime<Utc>,
}

/// The app origins of this hub: the domain, the codes handed off, the sessions made of them.
pub struct AppOrigins {
    pub(crate) domain: String,
    pub(crate) https: bool,
    pub(crate) public: Option<String>,
    pub(crate) handoffs: Mutex<HashMap<String, Handoff>>,
    pub(crate) sessions: Mutex<HashMap<String, AppSession>>,
}

/// The codes and sessions are secrets: only how many there are is shown.
impl std::fmt::Debug for AppOrigins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppOrigins")
            .field("domain", &self.domain)
            .field("https", &self.https)
            .field("public", &self.public)
            .field("handoffs", &self.handoffs.lock().map(|m| m.len()).unwrap_or(0))
            .field("sessions", &self.sessions.lock().map(|m| m.len()).unwrap_or(0))
            .finish()
    }
}
