//! A service's readiness check, made against one of its runs: an HTTP GET of its path on its port
//! (through [`Engine::endpoint`], as the hub's proxy reaches it) answering below 400, or its command,
//! run in it as its owner, exiting 0. Each check is bounded by [`CHECK_TIMEOUT`]. The API checks the
//! serving run when a service's view is read; a rolling update checks its new run before switching.

use futures::StreamExt;
use gpuhub_core::service::ReadyCheck;
use gpuhub_driver::{Engine, ExecSpec, MemberRef};
use gpuhub_store::Store;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The longest one readiness check may take; a check that takes longer fails.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether `check` passes now on member 0 of run `run` of `owner`'s service, which serves `port`.
pub async fn check(engine: &dyn Engine, store: &Store, owner: &str, check: &ReadyCheck, run: &str, port: u16) -> bool {
    let member = MemberRef::new(run, 0);
    let outcome = tokio::time::timeout(CHECK_TIMEOUT, async {
        match check {
            ReadyCheck::Http(path) => http(engine, &member, port, path).await,
            ReadyCheck::Command(command) => command_ok(engine, store, owner, &member, command.clone()).await,
        }
    })
    .await;
    outcome.unwrap_or(false)
}

/// An HTTP/1.0 GET of `path`: whether the status line says below 400.
async fn http(engine: &dyn Engine, member: &MemberRef, port: u16, path: &str) -> bool {
    let Ok(addr) = engine.endpoint(member, port).await else { return false };
    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else { return false };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: gpuhub-ready\r\n\r\n");
    if conn.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    // the status line is in the first bytes: `HTTP/1.x NNN …`
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 64];
    while head.len() < 12 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    status(&head).is_some_and(|s| s < 400)
}

/// The status code of an HTTP response that begins with `head`.
fn status(head: &[u8]) -> Option<u16> {
    let line = std::str::from_utf8(head.get(..12)?).ok()?;
    line.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
}

async fn command_ok(engine: &dyn Engine, store: &Store, owner: &str, member: &MemberRef, command: Vec<String>) -> bool {
    let Ok(user) = store.get_user(owner).await else { return false };
    let home = format!("/home/{owner}");
    let spec = ExecSpec {
        command,
        user: format!("{}:{}", user.uid, user.uid),
        env: BTreeMap::from([("HOME".to_owned(), home.clone())]),
        working_dir: Some(home),
        tty: None,
    };
    let Ok(mut exec) = engine.exec(member, &spec).await else { return false };
    // the output ends when the process does
    while let Some(chunk) = exec.output.next().await {
        if chunk.is_err() {
            break;
        }
    }
    matches!(exec.wait().await, Ok(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_lines_are_read() {
        assert_eq!(super::status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(super::status(b"HTTP/1.0 404 Not Found"), Some(404));
        assert_eq!(super::status(b"HTTP/1.1 20"), None);
        assert_eq!(super::status(b"SSH-2.0-OpenSSH_9.2p1"), None);
    }
}
