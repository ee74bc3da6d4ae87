//! A service's readiness, checked when its view is asked for: an HTTP GET of its path on its port
//! (through [`gpuhub_driver::Engine::endpoint`], as the proxy reaches it) answering below 400, or its
//! command, run in it as its owner, exiting 0. Each check is bounded by [`CHECK_TIMEOUT`].

use crate::state::AppState;
use futures::StreamExt;
use gpuhub_core::service::ReadyCheck;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{ExecSpec, MemberRef};
use std::collections::BTreeMap;
use std::time::Duration;

/// The longest one readiness check may take; a check that takes longer fails.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether running service `w` is ready now; `None` for anything else (not a service, not running).
pub async fn check(st: &AppState, w: &Workload) -> Option<bool> {
    let service = w.service.as_ref()?;
    let run = w.run_id.as_deref().filter(|_| w.state == WorkloadState::Running)?;
    let member = MemberRef::new(run, 0);
    let port = w.members.first().and_then(|m| m.ports.get(super::submit::SERVICE_APP)).copied();
    let port = port.unwrap_or(service.spec.port);
    let outcome = tokio::time::timeout(CHECK_TIMEOUT, async {
        match service.spec.ready_check() {
            ReadyCheck::Http(path) => http(st, &member, port, &path).await,
            ReadyCheck::Command(command) => command_ok(st, w, &member, command).await,
        }
    })
    .await;
    Some(outcome.unwrap_or(false))
}

async fn http(st: &AppState, member: &MemberRef, port: u16, path: &str) -> bool {
    let Ok(addr) = st.engine.endpoint(member, port).await else { return false };
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build();
    let Ok(client) = client else { return false };
    match client.get(format!("http://{addr}{path}")).send().await {
        Ok(resp) => resp.status().as_u16() < 400,
        Err(_) => false,
    }
}

async fn command_ok(st: &AppState, w: &Workload, member: &MemberRef, command: Vec<String>) -> bool {
    let Ok(owner) = st.store.get_user(&w.owner).await else { return false };
    let home = format!("/home/{}", w.owner);
    let spec = ExecSpec {
        command,
        user: format!("{}:{}", owner.uid, owner.uid),
        env: BTreeMap::from([("HOME".to_owned(), home.clone())]),
        working_dir: Some(home),
        tty: None,
    };
    let Ok(mut exec) = st.engine.exec(member, &spec).await else { return false };
    // the output ends when the process does
    while let Some(chunk) = exec.output.next().await {
        if chunk.is_err() {
            break;
        }
    }
    matches!(exec.wait().await, Ok(0))
}
