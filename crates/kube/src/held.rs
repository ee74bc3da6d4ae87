//! What the engine keeps between calls for its port-forwards ([`crate::forward`]) and its usage
//! figures ([`crate::metrics`]): plain data, so that the engine holds it without naming the modules
//! that work on it (they name the engine).

use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::Notify;

/// The engine's clock: when to ask the metrics API again ([`crate::KubeEngine::with_clock`] sets
/// another in tests).
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The local ends of the forwards, by pod name and port: the address, its run, and what closes it.
pub(crate) type Forwards = Arc<Mutex<HashMap<(String, u16), Forward>>>;

#[derive(Debug)]
pub(crate) struct Forward {
    pub(crate) addr: SocketAddr,
    pub(crate) run: String,
    pub(crate) close: Arc<Notify>,
}

/// Whether the metrics API answers, and each pod's CPU time so far.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) available: AtomicBool,
    /// While it does not answer: when it is asked again (by the engine's clock; `None`: at the next
    /// look).
    pub(crate) next_probe: Mutex<Option<SystemTime>>,
    /// By pod uid (or name): its run, the last sample's timestamp and the CPU seconds summed up to it.
    pub(crate) cpu: Mutex<HashMap<String, (String, Timestamp, f64)>>,
}

/// The gangs gpuhub admits itself ([`crate::gang`]): one admission at a time (so that two never count
/// the same free room), and why each gang not admitted waits, by run.
#[derive(Debug, Default)]
pub(crate) struct Gangs {
    pub(crate) admitting: tokio::sync::Mutex<()>,
    pub(crate) waiting: Mutex<HashMap<String, String>>,
}
