//! Addresses and blocks of them in the configuration (`trusted_proxies`, `monitor.metrics_allow`).

use std::net::IpAddr;

/// An address or a CIDR block (`10.0.0.0/8`, `::1`), for `trusted_proxies` and the `/metrics`
/// allowlist: an [`ipnet::IpNet`] that also takes a bare address (a block of one), and that an
/// IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, as a dual-stack listener sees IPv4 peers) matches as
/// its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet(ipnet::IpNet);

impl std::str::FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a.trim(), Some(p.trim())),
            None => (s.trim(), None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("{s:?} is not an IP address or CIDR block"))?;
        let net = match p {
            None => ipnet::IpNet::from(addr),
            Some(p) => {
                let prefix = p.parse::<u8>().map_err(|_| format!("{s:?}: bad prefix length"))?;
                ipnet::IpNet::new(addr, prefix).map_err(|_| format!("{s:?}: bad prefix length"))?
            }
        };
        Ok(IpNet(net))
    }
}

impl IpNet {
    /// Whether `ip` lies in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}
