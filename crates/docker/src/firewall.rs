//! Keeps users' containers away from the host's own services (security review finding 8).
//!
//! A container reaches the host through its bridge's gateway address, so a service listening on the
//! host's `0.0.0.0` (gpuhub's API and SSH gateway, a database) answered it. Each gpuhub bridge therefore
//! gets a fixed interface name, and two `iptables` rules in `INPUT` for that interface: replies to
//! connections the host opened (the hub's proxy reaching an app) pass, everything else a container sends
//! to the host is rejected. A rule in `DOCKER-USER` rejects the link-local range (cloud metadata services)
//! too. Traffic to the outside world is left to Docker's own rules and the admin's policy.

use gpuhub_driver::EngineError;
use tokio::process::Command;

/// The Linux interface name of a gpuhub network's bridge: `gh-` and 12 hex digits of a hash of the
/// network's name (interface names hold at most 15 bytes).
pub(crate) fn bridge_name(network: &str) -> String {
    // FNV-1a: stable across releases and platforms, unlike the standard library's hasher
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in network.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("gh-{:012x}", h & 0xffff_ffff_ffff)
}

/// The rules for one bridge, as `(chain, rule)`, in the order they must end up (first = top).
pub(crate) fn rules(bridge: &str) -> Vec<(&'static str, Vec<String>)> {
    let r = |chain: &'static str, s: &str| (chain, s.split(' ').map(|p| p.replace("BR", bridge)).collect());
    vec![
        r("INPUT", "-i BR -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT"),
        r("INPUT", "-i BR -j REJECT"),
        r("DOCKER-USER", "-i BR -d 169.254.0.0/16 -j REJECT"),
    ]
}

async fn iptables(args: &[String]) -> Result<bool, EngineError> {
    let out = Command::new("iptables").arg("-w").args(args).output().await.map_err(|e| {
        EngineError::Engine(format!(
            "cannot run iptables to keep containers off the host's services: {e} (set isolate_host = false to run without)"
        ))
    })?;
    Ok(out.status.success())
}

/// Adds the rules of `bridge` that are missing (idempotent; a restart or another server adds nothing).
pub(crate) async fn isolate(bridge: &str) -> Result<(), EngineError> {
    // inserted bottom-up at position 1, so that the list ends in its own order above other rules
    for (chain, rule) in rules(bridge).into_iter().rev() {
        let mut check = vec!["-C".to_owned(), chain.to_owned()];
        check.extend(rule.iter().cloned());
        if iptables(&check).await? {
            continue;
        }
        let mut insert = vec!["-I".to_owned(), chain.to_owned(), "1".to_owned()];
        insert.extend(rule);
        if !iptables(&insert).await? {
            return Err(EngineError::Engine(format!(
                "iptables refused a rule keeping containers on {bridge} off the host: {}",
                insert.join(" ")
            )));
        }
    }
    Ok(())
}

/// Whether `name` is an interface name [`bridge_name`] makes.
fn is_bridge_name(name: &str) -> bool {
    name.strip_prefix("gh-").is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The rules of `chain` in an `iptables -S` listing that belong to a gpuhub bridge for which `exists`
/// says no, as the arguments that delete them (`-D CHAIN …`).
pub(crate) fn stale_rules(listing: &str, chain: &str, exists: impl Fn(&str) -> bool) -> Vec<Vec<String>> {
    let prefix = format!("-A {chain} ");
    listing
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let args: Vec<&str> = rest.split_whitespace().collect();
            let iface = args.windows(2).find(|w| w[0] == "-i").map(|w| w[1])?;
            (is_bridge_name(iface) && !exists(iface))
                .then(|| ["-D", chain].into_iter().chain(args.iter().copied()).map(str::to_owned).collect())
        })
        .collect()
}

/// Removes the rules of gpuhub bridges that no longer exist (their networks were deleted, by gpuhub
/// or by `docker network prune`), so that they do not pile up. Best effort: failures are logged.
pub(crate) async fn sweep() {
    for chain in ["INPUT", "DOCKER-USER"] {
        let listing = match Command::new("iptables").args(["-w", "-S", chain]).output().await {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            _ => continue,
        };
        let exists = |iface: &str| std::path::Path::new("/sys/class/net").join(iface).exists();
        for delete in stale_rules(&listing, chain, exists) {
            match iptables(&delete).await {
                Ok(true) => tracing::info!(rule = %delete.join(" "), "removed the rule of a deleted gpuhub bridge"),
                _ => tracing::warn!(rule = %delete.join(" "), "could not remove the rule of a deleted gpuhub bridge"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_fit_and_are_stable() {
        let a = bridge_name("gpuhub-0123456789ab-u-alice");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("gh-"));
        assert_eq!(a, bridge_name("gpuhub-0123456789ab-u-alice"));
        assert_ne!(a, bridge_name("gpuhub-0123456789ab-u-bob"));
    }

    #[test]
    fn replies_pass_before_the_rejection() {
        let r = rules("gh-x");
        assert_eq!(r[0].1.join(" "), "-i gh-x -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT");
        assert_eq!(r[1].1.join(" "), "-i gh-x -j REJECT");
        assert_eq!(r[2].0, "DOCKER-USER");
    }

    #[test]
    fn rules_of_vanished_bridges_are_found() {
        let listing = "-P INPUT ACCEPT\n\
            -A INPUT -i gh-0123456789ab -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
            -A INPUT -i gh-0123456789ab -j REJECT --reject-with icmp-port-unreachable\n\
            -A INPUT -i gh-ffffffffffff -j REJECT --reject-with icmp-port-unreachable\n\
            -A INPUT -i docker0 -j ACCEPT\n\
            -A INPUT -i gh-notours -j REJECT\n";
        let stale = stale_rules(listing, "INPUT", |iface| iface == "gh-ffffffffffff");
        let stale: Vec<String> = stale.iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            stale,
            [
                "-D INPUT -i gh-0123456789ab -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                "-D INPUT -i gh-0123456789ab -j REJECT --reject-with icmp-port-unreachable",
            ]
        );
        assert!(stale_rules(listing, "DOCKER-USER", |_| false).is_empty());
    }
}
