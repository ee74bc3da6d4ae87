//! Mapping of the engine's container descriptions (inspect and list) onto [`ContainerInfo`].

use crate::container::{ContainerInfo, ContainerStatus};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, ContainerSummary, EndpointSettings};
use std::collections::{BTreeMap, HashMap};

/// The description `docker inspect` gives.
pub(crate) fn from_inspect(c: ContainerInspectResponse) -> ContainerInfo {
    let state = c.state.unwrap_or_default();
    let exit_code = state.exit_code.unwrap_or(0);
    let status = match state.status {
        Some(ContainerStateStatusEnum::CREATED) | Some(ContainerStateStatusEnum::EMPTY) | None => {
            if state.running == Some(true) { ContainerStatus::Running } else { ContainerStatus::Created }
        }
        Some(ContainerStateStatusEnum::RUNNING)
        | Some(ContainerStateStatusEnum::PAUSED)
        | Some(ContainerStateStatusEnum::RESTARTING) => ContainerStatus::Running,
        Some(ContainerStateStatusEnum::EXITED)
        | Some(ContainerStateStatusEnum::DEAD)
        | Some(ContainerStateStatusEnum::REMOVING) => ContainerStatus::Exited(exit_code),
    };
    let mode = c.host_config.and_then(|h| h.network_mode);
    let networks = c.network_settings.and_then(|n| n.networks);
    ContainerInfo {
        id: c.id.unwrap_or_default(),
        name: c.name.unwrap_or_default().trim_start_matches('/').to_owned(),
        labels: c.config.and_then(|c| c.labels).map(sorted).unwrap_or_default(),
        ip: (status == ContainerStatus::Running).then(|| ip(networks.as_ref(), mode.as_deref())).flatten(),
        status,
    }
}

/// The description `docker ps` gives. `None` when its status text does not say how it ended (then
/// the caller inspects it).
pub(crate) fn from_summary(c: ContainerSummary) -> Option<ContainerInfo> {
    let status = match c.state.as_deref() {
        Some("created") => ContainerStatus::Created,
        Some("running") | Some("paused") | Some("restarting") => ContainerStatus::Running,
        _ => ContainerStatus::Exited(exit_code_of(c.status.as_deref()?)?),
    };
    let mode = c.host_config.and_then(|h| h.network_mode);
    let networks = c.network_settings.and_then(|n| n.networks);
    Some(ContainerInfo {
        id: c.id.unwrap_or_default(),
        name: c.names.unwrap_or_default().first().map(|n| n.trim_start_matches('/').to_owned()).unwrap_or_default(),
        labels: c.labels.map(sorted).unwrap_or_default(),
        ip: (status == ContainerStatus::Running).then(|| ip(networks.as_ref(), mode.as_deref())).flatten(),
        status,
    })
}

/// The exit code in a status text such as `Exited (3) 2 seconds ago`.
fn exit_code_of(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split_once(')')?.0.parse().ok()
}

/// The address on the container's own network (its network mode), else the first address it has.
fn ip(networks: Option<&HashMap<String, EndpointSettings>>, mode: Option<&str>) -> Option<String> {
    let networks = networks?;
    let addr = |e: &EndpointSettings| e.ip_address.clone().filter(|a| !a.is_empty());
    mode.and_then(|m| networks.get(m)).and_then(addr).or_else(|| {
        let mut names: Vec<&String> = networks.keys().collect();
        names.sort();
        names.into_iter().find_map(|n| addr(&networks[n]))
    })
}

fn sorted(m: HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{ContainerState, ContainerSummaryNetworkSettings, HostConfig, NetworkSettings};

    fn endpoint(ip: &str) -> EndpointSettings {
        EndpointSettings { ip_address: Some(ip.to_owned()), ..Default::default() }
    }

    #[test]
    fn parses_exit_codes_from_status_text() {
        assert_eq!(exit_code_of("Exited (3) 2 seconds ago"), Some(3));
        assert_eq!(exit_code_of("Exited (137) About a minute ago"), Some(137));
        assert_eq!(exit_code_of("Up 3 seconds"), None);
        assert_eq!(exit_code_of("Exited (x)"), None);
    }

    #[test]
    fn summary_of_exited_and_running() {
        let exited = ContainerSummary {
            id: Some("abc".into()),
            names: Some(vec!["/job".into()]),
            state: Some("exited".into()),
            status: Some("Exited (3) 1 second ago".into()),
            labels: Some(HashMap::from([("gpuhub.workload".to_owned(), "w".to_owned())])),
            ..Default::default()
        };
        let info = from_summary(exited).unwrap();
        assert_eq!((info.name.as_str(), info.status, info.ip), ("job", ContainerStatus::Exited(3), None));
        assert_eq!(info.labels["gpuhub.workload"], "w");
        let running = ContainerSummary {
            state: Some("running".into()),
            host_config: Some(bollard::models::ContainerSummaryHostConfig {
                network_mode: Some("net-b".into()),
                ..Default::default()
            }),
            network_settings: Some(ContainerSummaryNetworkSettings {
                networks: Some(HashMap::from([
                    ("net-a".to_owned(), endpoint("10.0.0.2")),
                    ("net-b".to_owned(), endpoint("10.0.1.2")),
                ])),
            }),
            ..Default::default()
        };
        assert_eq!(from_summary(running).unwrap().ip.as_deref(), Some("10.0.1.2"));
        let odd = ContainerSummary { state: Some("dead".into()), status: Some("Dead".into()), ..Default::default() };
        assert_eq!(from_summary(odd), None);
    }

    #[test]
    fn inspect_states() {
        let with = |status, running, code| ContainerInspectResponse {
            name: Some("/c".into()),
            state: Some(ContainerState {
                status: Some(status),
                running: Some(running),
                exit_code: Some(code),
                ..Default::default()
            }),
            host_config: Some(HostConfig { network_mode: Some("n".into()), ..Default::default() }),
            network_settings: Some(NetworkSettings {
                networks: Some(HashMap::from([("n".to_owned(), endpoint("172.30.0.5"))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let running = from_inspect(with(ContainerStateStatusEnum::RUNNING, true, 0));
        assert_eq!((running.name.as_str(), running.status), ("c", ContainerStatus::Running));
        assert_eq!(running.ip.as_deref(), Some("172.30.0.5"));
        let exited = from_inspect(with(ContainerStateStatusEnum::EXITED, false, 3));
        assert_eq!((exited.status, exited.ip), (ContainerStatus::Exited(3), None));
        assert_eq!(from_inspect(with(ContainerStateStatusEnum::CREATED, false, 0)).status, ContainerStatus::Created);
    }
}
