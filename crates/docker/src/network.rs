//! Per-user bridge networks.

use crate::{DockerRuntime, config, error};
use bollard::models::{Ipam, IpamConfig, Network};
use bollard::network::{CreateNetworkOptions, InspectNetworkOptions, ListNetworksOptions};
use gpuhub_driver::{EngineError, LABEL_OWNER};
use ipnet::{IpNet, Ipv4Net};
use std::collections::{BTreeMap, HashMap};

/// Where user networks' subnets come from when the admin names a pool (`network_pool`): each network
/// gets the first `prefix`-long block of the pool that no network of the engine overlaps, so users are
/// not limited by Docker's default address pools (about 30 bridges of /16 or /20 each), and a deleted
/// user's block is used again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkPool {
    pool: Ipv4Net,
    prefix: u8,
}

impl NetworkPool {
    /// Blocks of `/prefix` carved from `pool`; `prefix` must lie between the pool's own length and 29
    /// (a /30 leaves two addresses: the gateway and one container).
    pub fn new(pool: Ipv4Net, prefix: u8) -> Result<Self, EngineError> {
        if prefix < pool.prefix_len() || prefix > 29 {
            return Err(EngineError::Rejected(format!(
                "network_prefix {prefix} does not fit network_pool {pool}: it must be between {} and 29",
                pool.prefix_len()
            )));
        }
        Ok(Self { pool: pool.trunc(), prefix })
    }

    /// The first block of the pool that overlaps none of `used`.
    pub fn free_block(&self, used: &[IpNet]) -> Option<Ipv4Net> {
        let overlaps = |b: &Ipv4Net, u: &IpNet| match u {
            IpNet::V4(u) => b.contains(&u.network()) || u.contains(&b.network()),
            IpNet::V6(_) => false,
        };
        self.pool.subnets(self.prefix).ok()?.find(|b| !used.iter().any(|u| overlaps(b, u)))
    }
}

impl std::fmt::Display for NetworkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "/{} blocks of {}", self.prefix, self.pool)
    }
}

/// The subnets the engine's networks hold.
fn subnets(nets: &[Network]) -> Vec<IpNet> {
    nets.iter()
        .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
        .flatten()
        .filter_map(|c| c.subnet.as_deref()?.parse().ok())
        .collect()
}

/// The create request for a user's network: its own bridge (Docker's isolation rules drop traffic
/// between bridges, while containers on the same bridge reach each other), labelled with its owner and
/// installation (the caller's `labels`; the owner label defaults to the network's name).
pub(crate) fn create_options(name: &str, labels: &BTreeMap<String, String>) -> CreateNetworkOptions<String> {
    let mut all: HashMap<String, String> = labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    all.entry(LABEL_OWNER.to_owned()).or_insert_with(|| name.to_owned());
    CreateNetworkOptions {
        name: name.to_owned(),
        check_duplicate: true,
        driver: "bridge".to_owned(),
        labels: all,
        options: HashMap::from([("com.docker.network.bridge.name".to_owned(), crate::firewall::bridge_name(name))]),
        ..Default::default()
    }
}

/// [`create_options`] with the subnet `block`.
fn create_options_in(
    name: &str,
    labels: &BTreeMap<String, String>,
    block: Option<Ipv4Net>,
) -> CreateNetworkOptions<String> {
    let mut options = create_options(name, labels);
    if let Some(block) = block {
        options.ipam = Ipam {
            config: Some(vec![IpamConfig { subnet: Some(block.to_string()), ..Default::default() }]),
            ..Default::default()
        };
    }
    options
}

/// Whether an existing network is one gpuhub made for these labels: a bridge of that exact name with the
/// owner label and every label asked for (so a network another installation made is never joined).
/// Anything else (Docker's shared `bridge`, a network someone made by hand) must not be joined.
fn check_existing(name: &str, net: &Network, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
    let have = net.labels.clone().unwrap_or_default();
    let labelled = have.contains_key(LABEL_OWNER);
    if net.driver.as_deref() != Some("bridge") || !labelled {
        return Err(EngineError::Rejected(format!("network {name} exists and is not a gpuhub bridge")));
    }
    match labels.iter().find(|(k, v)| have.get(*k) != Some(*v)) {
        None => Ok(()),
        Some((k, _)) => Err(EngineError::Rejected(format!(
            "network {name} exists but was made for another owner or installation (label {k} differs)"
        ))),
    }
}

/// Docker's error when no address pool has room for another bridge, made into advice for the admin.
fn pool_exhausted(e: &bollard::errors::Error) -> Option<EngineError> {
    let text = e.to_string();
    (text.contains("non-overlapping") || text.contains("address pool")).then(|| {
        EngineError::Rejected(
            "the container engine has no free address pool for another user network (each user gets one); \
             give dockerd more or smaller pools with \"default-address-pools\" in /etc/docker/daemon.json \
             (see the README), or remove unused gpuhub networks"
                .to_owned(),
        )
    })
}

impl DockerRuntime {
    /// Checks, before a container joins it, that a network exists and is a gpuhub bridge (engines
    /// before API 1.44 accept a missing network at creation and fail only at start).
    pub(crate) async fn check_network(&self, name: &str) -> Result<(), EngineError> {
        match self.find_network(name).await? {
            Some(net) => check_existing(name, &net, &BTreeMap::new()),
            None => Err(EngineError::NotFound(format!("network {name}"))),
        }
    }

    /// The network of exactly this name (Docker also resolves id prefixes, which must not count).
    async fn find_network(&self, name: &str) -> Result<Option<Network>, EngineError> {
        match self.docker.inspect_network(name, None::<InspectNetworkOptions<String>>).await {
            Ok(net) if net.name.as_deref() == Some(name) => Ok(Some(net)),
            Ok(_) => Ok(None),
            Err(e) if error::status(&e) == Some(404) => Ok(None),
            Err(e) => Err(error::map(e, name)),
        }
    }

    /// Keeps the network's bridge off the host's services (when asked to), by its interface name.
    async fn isolate(&self, name: &str, net: &Network) -> Result<(), EngineError> {
        if !self.isolate_host {
            return Ok(());
        }
        let bridge = net
            .options
            .as_ref()
            .and_then(|o| o.get("com.docker.network.bridge.name").cloned())
            .or_else(|| net.id.as_deref().map(|id| format!("br-{}", &id[..12.min(id.len())])))
            .ok_or_else(|| EngineError::Engine(format!("network {name} has no bridge interface")))?;
        crate::firewall::isolate(&bridge).await
    }

    /// Removes a network gpuhub made (a gang's private one); a missing one is fine.
    pub async fn remove_network(&self, name: &str) -> Result<(), EngineError> {
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if error::status(&e) == Some(404) => Ok(()),
            Err(e) => Err(error::map(e, name)),
        }
    }

    /// Removes a user's network once none of their containers is on it (a deleted user's), only if it
    /// is a gpuhub bridge carrying every label of `labels` (its owner and installation); a missing one is
    /// fine. Its host-isolation rules go with the next network's creation (`firewall::sweep`).
    pub async fn remove_user_network(&self, name: &str, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
        match self.find_network(name).await? {
            None => Ok(()),
            Some(net) => {
                check_existing(name, &net, labels)?;
                self.remove_network(name).await
            }
        }
    }

    pub(crate) async fn ensure_network_impl(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        if name == "none" || config::shared_network(name) {
            return Err(EngineError::Rejected(format!("{name:?} cannot be a user's network")));
        }
        // One creation at a time in this process; the engine's duplicate check covers other processes.
        let _guard = self.network_lock.lock().await;
        if let Some(net) = self.find_network(name).await? {
            check_existing(name, &net, labels)?;
            return self.isolate(name, &net).await;
        }
        match self.create_network(name, labels).await? {
            Ok(()) => match self.find_network(name).await? {
                Some(net) => {
                    if self.isolate_host {
                        crate::firewall::sweep().await;
                    }
                    self.isolate(name, &net).await
                }
                None => Err(EngineError::NotFound(format!("network {name}"))),
            },
            Err(e) if error::status(&e) == Some(409) => match self.find_network(name).await? {
                Some(net) => check_existing(name, &net, labels),
                None => Err(error::map(e, name)),
            },
            Err(e) => Err(pool_exhausted(&e).unwrap_or_else(|| error::map(e, name))),
        }
    }

    /// Creates the network: in the first free block of the admin's pool where there is one (again in
    /// the next, a few times, when another process took that block meanwhile), else wherever the
    /// engine's own pools say. The outer error is gpuhub's refusal (the pool is full), the inner the
    /// engine's answer.
    async fn create_network(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Result<(), bollard::errors::Error>, EngineError> {
        let Some(pool) = self.network_pool else {
            return Ok(self.docker.create_network(create_options_in(name, labels, None)).await.map(drop));
        };
        let mut tries = 0;
        loop {
            let nets = match self.docker.list_networks(None::<ListNetworksOptions<String>>).await {
                Ok(nets) => nets,
                Err(e) => return Ok(Err(e)),
            };
            let block = pool.free_block(&subnets(&nets)).ok_or_else(|| {
                EngineError::Rejected(format!(
                    "the network pool ({pool}) has no free block for another user network: widen network_pool, \
                     lengthen network_prefix, or remove unused gpuhub networks"
                ))
            })?;
            match self.docker.create_network(create_options_in(name, labels, Some(block))).await {
                Err(e) if tries < 3 && e.to_string().contains("overlaps") => tries += 1,
                r => return Ok(r.map(drop)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labelled_bridge() {
        let labels =
            BTreeMap::from([(LABEL_OWNER.to_owned(), "alice".to_owned()), ("gpuhub.instance".into(), "i1".into())]);
        let o = create_options("gpuhub-alice", &labels);
        assert_eq!((o.name.as_str(), o.driver.as_str(), o.check_duplicate), ("gpuhub-alice", "bridge", true));
        assert_eq!(o.labels[LABEL_OWNER], "alice");
        assert_eq!(o.labels["gpuhub.instance"], "i1");
        assert_eq!(create_options("n", &BTreeMap::new()).labels[LABEL_OWNER], "n");
        assert!(!o.internal);
        assert_eq!(o.options.len(), 1, "inter-container traffic stays Docker's default (allowed): {:?}", o.options);
        assert!(o.options["com.docker.network.bridge.name"].starts_with("gh-"));
    }

    /// Security review N11: one user network a Docker address pool ran out at about 30 users; carved from
    /// the admin's pool, a /16 holds 1,024 networks of /26, and a freed block is used again.
    #[test]
    fn user_networks_are_carved_from_the_pool() {
        let pool = NetworkPool::new("10.200.0.0/16".parse().unwrap(), 26).unwrap();
        let net = |s: &str| -> IpNet { s.parse().unwrap() };
        assert_eq!(pool.free_block(&[]).unwrap().to_string(), "10.200.0.0/26");
        let used = [net("10.200.0.0/26"), net("10.200.0.64/26"), net("172.17.0.0/16"), net("fd00::/64")];
        assert_eq!(pool.free_block(&used).unwrap().to_string(), "10.200.0.128/26");
        // a freed block is taken first; a larger network overlapping the pool's start is stepped over
        assert_eq!(pool.free_block(&[net("10.200.0.64/26")]).unwrap().to_string(), "10.200.0.0/26");
        assert_eq!(pool.free_block(&[net("10.200.0.0/24")]).unwrap().to_string(), "10.200.1.0/26");
        assert_eq!(pool.free_block(&[net("10.0.0.0/8")]), None, "a network over the whole pool");
        assert_eq!(pool.pool.subnets(26).unwrap().count(), 1024);
        // full: every block taken
        let small = NetworkPool::new("10.9.0.0/28".parse().unwrap(), 29).unwrap();
        assert_eq!(small.free_block(&[net("10.9.0.0/29"), net("10.9.0.8/29")]), None);
        // the prefix must fit the pool and leave room for containers
        assert!(NetworkPool::new("10.9.0.0/16".parse().unwrap(), 15).is_err());
        assert!(NetworkPool::new("10.9.0.0/16".parse().unwrap(), 30).is_err());
        assert_eq!(NetworkPool::new("10.9.3.7/16".parse().unwrap(), 24).unwrap().pool.to_string(), "10.9.0.0/16");
        // the engine's networks' subnets, whatever else they hold
        let nets: Vec<Network> = serde_json::from_value(serde_json::json!([
            {"Name": "a", "IPAM": {"Config": [{"Subnet": "10.200.0.0/26", "Gateway": "10.200.0.1"}]}},
            {"Name": "host", "IPAM": {"Config": []}},
            {"Name": "b", "IPAM": {"Config": [{"Subnet": "not a subnet"}]}}
        ]))
        .unwrap();
        assert_eq!(subnets(&nets), [net("10.200.0.0/26")]);
        let o = create_options_in("n", &BTreeMap::new(), Some("10.200.0.64/26".parse().unwrap()));
        assert_eq!(o.ipam.config.unwrap()[0].subnet.as_deref(), Some("10.200.0.64/26"));
        assert!(create_options_in("n", &BTreeMap::new(), None).ipam.config.is_none());
    }

    #[test]
    fn joins_only_gpuhub_bridges() {
        let ours = Network {
            driver: Some("bridge".into()),
            labels: Some(HashMap::from([(LABEL_OWNER.to_owned(), "x".to_owned())])),
            ..Default::default()
        };
        let none = BTreeMap::new();
        assert!(check_existing("x", &ours, &none).is_ok());
        // another installation's network of the same name is not joined
        let mine = BTreeMap::from([("gpuhub.instance".to_owned(), "i1".to_owned())]);
        assert!(matches!(check_existing("x", &ours, &mine), Err(EngineError::Rejected(_))));
        let shared = Network { driver: Some("bridge".into()), labels: Some(HashMap::new()), ..Default::default() };
        assert!(matches!(check_existing("x", &shared, &none), Err(EngineError::Rejected(_))));
        let overlay = Network { driver: Some("overlay".into()), ..ours };
        assert!(matches!(check_existing("x", &overlay, &none), Err(EngineError::Rejected(_))));
    }
}
