//! The engine's nodes as the controller last saw them, shared with the API (`GET /api/v1/nodes`,
//! admission checks). Refreshed at start and at every reconciliation; a failed refresh keeps the last
//! nodes and records the engine's error, which the API shows.

use crate::EngineNode;
use chrono::{DateTime, Utc};
use gpuhub_core::node::NodeCapacity;
use std::sync::{Arc, RwLock};

/// What the engine reported last.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Its nodes.
    pub nodes: Vec<EngineNode>,
    /// Why the last refresh failed, if it did.
    pub error: Option<String>,
    /// When it was last refreshed successfully.
    pub at: Option<DateTime<Utc>>,
}

/// The shared inventory; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Inventory(Arc<RwLock<Snapshot>>);

impl Inventory {
    /// An inventory that starts out knowing `nodes`.
    pub fn with(nodes: Vec<EngineNode>, at: DateTime<Utc>) -> Self {
        Self(Arc::new(RwLock::new(Snapshot { nodes, error: None, at: Some(at) })))
    }

    /// The last snapshot.
    pub fn snapshot(&self) -> Snapshot {
        self.0.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// The capacity of every node that takes work.
    pub fn capacities(&self) -> Vec<NodeCapacity> {
        let s = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.nodes.iter().filter(|n| n.up).map(|n| n.capacity.clone()).collect()
    }

    /// Records a successful refresh.
    pub fn set(&self, nodes: Vec<EngineNode>, at: DateTime<Utc>) {
        let mut s = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *s = Snapshot { nodes, error: None, at: Some(at) };
    }

    /// Records a failed refresh (the nodes seen before stay).
    pub fn fail(&self, error: String) {
        self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner).error = Some(error);
    }
}
