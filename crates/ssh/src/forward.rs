//! `direct-tcpip` channels (`ssh -L`, VS Code Remote-SSH): connections to a port of the workspace
//! container, and only of it — the gateway is not a way into the hub's own network.
//!
//! The connection goes to the container's IP on its network. A service listening only on the
//! container's loopback (`127.0.0.1`) is not reachable that way; for a loopback target the gateway then
//! falls back to a relay process inside the container (`python3`, else `nc`), run as the owner.

use crate::channel::not_running;
use crate::{Shared, Target};
use bytes::Bytes;
use futures::StreamExt;
use gpuhub_driver::{ExecSpec, MemberRef};
use russh::server::{ChannelOpenHandle, Msg};
use russh::{Channel, ChannelOpenFailure};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// SSH_OPEN_ADMINISTRATIVELY_PROHIBITED.
const PROHIBITED: u32 = 1;
/// SSH_OPEN_CONNECT_FAILED.
const CONNECT_FAILED: u32 = 2;

/// Relays stdin/stdout to 127.0.0.1:$GPUHUB_PORT inside the container. Writes `+` once connected so
/// the gateway can refuse the channel when nothing listens.
const RELAY: &str = r#"exec 2>/dev/null
if command -v python3 >/dev/null; then exec python3 -c '
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(os.environ["GPUHUB_PORT"])))
os.write(1, b"+")
def up():
    while True:
        b = os.read(0, 65536)
        if not b:
            break
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    b = s.recv(65536)
    if not b:
        break
    v = memoryview(b)
    while v:
        v = v[os.write(1, v):]
'; fi
if command -v nc >/dev/null; then printf +; exec nc 127.0.0.1 "$GPUHUB_PORT"; fi
exit 127"#;

/// Whether `host`, as the client named it, means the container's own loopback.
fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

fn refuse(code: u32, reason: String) -> ChannelOpenFailure {
    ChannelOpenFailure::Other { code, reason }
}

/// Opens a forwarded connection to `host:port` of the target's container, or refuses the channel.
pub(crate) async fn open(
    shared: Arc<Shared>,
    target: Target,
    channel: Channel<Msg>,
    host: String,
    port: u32,
    reply: ChannelOpenHandle,
) {
    match connect(&shared, &target, &host, port).await {
        Ok(Connected::Tcp(tcp)) => {
            reply.accept().await;
            let mut stream = channel.into_stream();
            let mut tcp = tcp;
            if let Err(e) = tokio::io::copy_bidirectional(&mut stream, &mut tcp).await {
                tracing::debug!(error = %e, "forwarded connection ended");
            }
        }
        Ok(Connected::Relay(handle, first)) => {
            reply.accept().await;
            relay(channel, handle, first).await;
        }
        Err(failure) => {
            tracing::debug!(workspace = %target.workspace, %host, port, ?failure, "direct-tcpip refused");
            reply.reject(failure).await;
        }
    }
}

enum Connected {
    Tcp(TcpStream),
    /// A relay process, and output it wrote after its `+`.
    Relay(gpuhub_driver::ExecHandle, Bytes),
}

async fn connect(shared: &Shared, target: &Target, host: &str, port: u32) -> Result<Connected, ChannelOpenFailure> {
    let Some(member) = target.member.as_ref() else {
        return Err(refuse(PROHIBITED, not_running(target)));
    };
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| refuse(CONNECT_FAILED, format!("invalid port {port}")))?;
    let addr = shared.engine.endpoint(member, port).await.map_err(|_| refuse(PROHIBITED, not_running(target)))?;
    let loopback = is_loopback_name(host);
    let own_name = host == addr.ip().to_string() || host == target.workspace;
    if !loopback && !own_name {
        return Err(refuse(
            PROHIBITED,
            format!("only ports of workspace {} can be forwarded (use localhost:PORT)", target.workspace),
        ));
    }
    let direct = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await;
    match direct {
        Ok(Ok(tcp)) => {
            let _ = tcp.set_nodelay(true);
            Ok(Connected::Tcp(tcp))
        }
        Ok(Err(e)) if loopback && e.kind() == std::io::ErrorKind::ConnectionRefused => {
            relay_process(shared, target, member, port).await
        }
        Ok(Err(e)) => Err(refuse(CONNECT_FAILED, format!("connect to port {port}: {e}"))),
        Err(_) => Err(refuse(CONNECT_FAILED, format!("connect to port {port}: timed out"))),
    }
}

/// Starts the in-container relay and waits for its `+`.
async fn relay_process(
    shared: &Shared,
    target: &Target,
    member: &MemberRef,
    port: u16,
) -> Result<Connected, ChannelOpenFailure> {
    let refused = || refuse(CONNECT_FAILED, format!("connect to port {port}: connection refused"));
    let spec = ExecSpec {
        command: vec!["/bin/sh".into(), "-c".into(), RELAY.into()],
        user: target.user.clone(),
        env: BTreeMap::from([("GPUHUB_PORT".to_string(), port.to_string())]),
        working_dir: None,
        tty: None,
    };
    let mut handle = shared.engine.exec(member, &spec).await.map_err(|_| refused())?;
    let first = tokio::time::timeout(Duration::from_secs(10), handle.output.next()).await;
    match first {
        Ok(Some(Ok(bytes))) if bytes.first() == Some(&b'+') => Ok(Connected::Relay(handle, bytes.slice(1..))),
        _ => Err(refused()),
    }
}

/// Bridges a channel and a relay process.
async fn relay(channel: Channel<Msg>, handle: gpuhub_driver::ExecHandle, first: Bytes) {
    let gpuhub_driver::ExecHandle { mut input, mut output, .. } = handle;
    let (mut from_client, mut to_client) = tokio::io::split(channel.into_stream());
    let down = async move {
        if !first.is_empty() && to_client.write_all(&first).await.is_err() {
            return;
        }
        while let Some(Ok(chunk)) = output.next().await {
            if to_client.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to_client.shutdown().await;
    };
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if input.write_all(&buf[..n]).await.and(input.flush().await).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = input.shutdown().await;
    };
    // The connection is over when the service side is done; the client side may linger.
    let up = tokio::spawn(up);
    down.await;
    up.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for h in ["localhost", "LOCALHOST", "127.0.0.1", "127.1.2.3", "::1", "0.0.0.0"] {
            assert!(is_loopback_name(h), "{h}");
        }
        for h in ["10.0.0.1", "example.com", "localhost.evil", "169.254.169.254"] {
            assert!(!is_loopback_name(h), "{h}");
        }
    }
}
