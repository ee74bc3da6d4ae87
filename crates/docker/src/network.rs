//! Per-user bridge networks.

use crate::{DockerRuntime, config, error};
use bollard::models::Network;
use bollard::network::{CreateNetworkOptions, InspectNetworkOptions};
use gpuhub_driver::{LABEL_OWNER, RuntimeError};
use std::collections::HashMap;

/// The create request for a user's network: its own bridge (Docker's isolation rules drop traffic
/// between bridges, while containers on the same bridge reach each other), labelled with its owner.
pub(crate) fn create_options(name: &str) -> CreateNetworkOptions<String> {
    CreateNetworkOptions {
        name: name.to_owned(),
        check_duplicate: true,
        driver: "bridge".to_owned(),
        labels: HashMap::from([(LABEL_OWNER.to_owned(), name.to_owned())]),
        ..Default::default()
    }
}

/// Whether an existing network is one gpuhub made: a bridge of that exact name with the owner label.
/// Anything else (Docker's shared `bridge`, a network someone made by hand) must not be joined.
fn check_existing(name: &str, net: &Network) -> Result<(), RuntimeError> {
    let labelled = net.labels.as_ref().is_some_and(|l| l.contains_key(LABEL_OWNER));
    if net.driver.as_deref() == Some("bridge") && labelled {
        Ok(())
    } else {
        Err(RuntimeError::Rejected(format!("network {name} exists and is not a gpuhub bridge")))
    }
}

impl DockerRuntime {
    /// Checks, before a container joins it, that a network exists and is a gpuhub bridge (engines
    /// before API 1.44 accept a missing network at creation and fail only at start).
    pub(crate) async fn check_network(&self, name: &str) -> Result<(), RuntimeError> {
        match self.find_network(name).await? {
            Some(net) => check_existing(name, &net),
            None => Err(RuntimeError::NotFound(format!("network {name}"))),
        }
    }

    /// The network of exactly this name (Docker also resolves id prefixes, which must not count).
    async fn find_network(&self, name: &str) -> Result<Option<Network>, RuntimeError> {
        match self.docker.inspect_network(name, None::<InspectNetworkOptions<String>>).await {
            Ok(net) if net.name.as_deref() == Some(name) => Ok(Some(net)),
            Ok(_) => Ok(None),
            Err(e) if error::status(&e) == Some(404) => Ok(None),
            Err(e) => Err(error::map(e, name)),
        }
    }

    pub(crate) async fn ensure_network_impl(&self, name: &str) -> Result<(), RuntimeError> {
        if name == "none" || config::shared_network(name) {
            return Err(RuntimeError::Rejected(format!("{name:?} cannot be a user's network")));
        }
        // One creation at a time in this process; the engine's duplicate check covers other processes.
        let _guard = self.network_lock.lock().await;
        if let Some(net) = self.find_network(name).await? {
            return check_existing(name, &net);
        }
        match self.docker.create_network(create_options(name)).await {
            Ok(_) => Ok(()),
            Err(e) if error::status(&e) == Some(409) => match self.find_network(name).await? {
                Some(net) => check_existing(name, &net),
                None => Err(error::map(e, name)),
            },
            Err(e) => Err(error::map(e, name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labelled_bridge() {
        let o = create_options("gpuhub-alice");
        assert_eq!((o.name.as_str(), o.driver.as_str(), o.check_duplicate), ("gpuhub-alice", "bridge", true));
        assert_eq!(o.labels[LABEL_OWNER], "gpuhub-alice");
        assert!(!o.internal);
        assert!(o.options.is_empty(), "inter-container traffic stays Docker's default (allowed)");
    }

    #[test]
    fn joins_only_gpuhub_bridges() {
        let ours = Network {
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(LABEL_OWNER.to_owned(), "x".to_owned())])),
            ..Default::default()
        };
        assert!(check_existing("x", &ours).is_ok());
        let shared = Network { driver: Some("bridge".into()), labels: Some(HashMap::new()), ..Default::default() };
        assert!(matches!(check_existing("x", &shared), Err(RuntimeError::Rejected(_))));
        let overlay = Network { driver: Some("overlay".into()), ..ours };
        assert!(matches!(check_existing("x", &overlay), Err(RuntimeError::Rejected(_))));
    }
}
