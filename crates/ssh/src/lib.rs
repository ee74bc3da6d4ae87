//! gpuhub's SSH gateway: `ssh -p 2222 <workspace>@hub` lands in the user's workspace container, as the
//! owner's UID, without an sshd in the image and without a published port.
//!
//! The gateway speaks SSH (russh) and turns each session request into a process started through the
//! engine ([`Engine`]):
//! - `pty-req` + `shell`: a login shell (`bash -l` when the image has it, else `sh -l`) on a PTY of the
//!   client's size; `window-change` resizes it;
//! - `exec`: `sh -c CMD`, with the process's exit status passed back;
//! - `subsystem sftp`: the image's `sftp-server` (so `scp` and `sftp` work), or a clear message when the
//!   image has none;
//! - `direct-tcpip` (`ssh -L`, VS Code Remote-SSH): a TCP connection to a port of the container itself.
//!
//! Nothing runs as root: every process is an exec as [`Target::user`]. Known limits, from the
//! [`Runtime`] trait: without a TTY a process's stderr arrives on the client's stdout (the exec stream
//! merges them), signals from the client are not passed on, and a process whose client vanished keeps
//! running until its stdin's end makes it exit (Docker does not kill execs).
//!
//! Who may log in where is the server's decision, asked through [`GatewayBackend`]; authentication is by
//! public key only.

mod channel;
mod forward;
mod handler;
mod hostkey;
mod sftp;

use async_trait::async_trait;
use gpuhub_driver::{Engine, MemberRef};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::task::JoinSet;

pub use hostkey::load_or_generate_host_key;
/// An SSH public key (re-exported from `ssh-key`, as used by russh).
pub use russh::keys::PublicKey;

/// What the server decided about a login: the workspace container to enter and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The account that logged in (the key's owner; an admin entering someone's workspace).
    pub login: String,
    /// The workspace owner's username.
    pub owner: String,
    /// The workspace name (used in messages).
    pub workspace: String,
    /// `uid:gid` the processes run as (the owner's).
    pub user: String,
    /// The home directory inside the container (`HOME`, and the working directory of shells).
    pub home: String,
    /// The member to enter (member 0 of the workspace's run); `None` when the workspace is not running.
    pub member: Option<MemberRef>,
    /// Why this login enters nothing, said on every channel, which then ends with status 1 (a
    /// workspace of the caller's own that does not exist: the key is theirs, so the name may be told).
    pub problem: Option<String>,
    /// Kept alive as long as the connection (and its channels) live: the hub counts an open SSH
    /// session as use of the workspace while it holds this.
    pub lease: Lease,
}

/// Something a backend wants kept alive for as long as a connection lives (see [`Target::lease`]).
/// Leases carry no data the gateway reads, so any two compare equal.
#[derive(Clone, Default)]
pub struct Lease(Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>);

impl Lease {
    /// A lease holding `v` until the last clone is dropped.
    pub fn new(v: impl std::any::Any + Send + Sync) -> Self {
        Self(Some(std::sync::Arc::new(v)))
    }
}

impl PartialEq for Lease {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Lease {}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Lease(held)" } else { "Lease(none)" })
    }
}

/// Why a login is refused. The client only ever sees a refusal; the reason is logged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Denied {
    /// No such user or workspace, or the key is not one of the user's, or the user may not enter it.
    #[error("public key not authorized for {0}")]
    NotAuthorized(String),
    /// The server could not decide (its store failed).
    #[error("authorization failed: {0}")]
    Backend(String),
}

/// The server's side of the gateway: who may log in as `ssh_user` with `key`, and into which container.
#[async_trait]
pub trait GatewayBackend: Send + Sync + std::fmt::Debug {
    /// Decides a login. `ssh_user` is what the client asked for (`<workspace>`, or `<user>.<workspace>`
    /// for admins entering someone's workspace); `key` is the offered key (see [`fingerprint`]). Called
    /// once when the key is offered and again after the client proved it holds the private key.
    async fn authorize(&self, ssh_user: &str, key: &PublicKey) -> Result<Target, Denied>;

    /// Names of accounts whose access just ended (disabled or deleted): every open connection whose
    /// [`Target::login`] or [`Target::owner`] is named is closed at once. `None`: nothing is revoked.
    fn revocations(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// What can go wrong running the gateway.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The host key file could not be read, parsed, created or written.
    #[error("host key {path}: {reason}")]
    HostKey {
        /// The host key file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// A public key line could not be parsed.
    #[error("invalid ssh public key: {0}")]
    InvalidKey(String),
    /// A proof of possession (an `ssh-keygen -Y sign` signature) is malformed or not the key's.
    #[error("invalid signature: {0}")]
    BadSignature(String),
    /// Accepting connections failed.
    #[error("accepting ssh connections: {0}")]
    Accept(std::io::Error),
}

/// Parses one `authorized_keys`-style line (`ssh-ed25519 AAAA… comment`), as users paste it.
pub fn parse_public_key(line: &str) -> Result<PublicKey, SshError> {
    let line = line.trim();
    if line.is_empty() || line.contains('\n') {
        return Err(SshError::InvalidKey("expected one line: `<type> <base64> [comment]`".into()));
    }
    PublicKey::from_openssh(line).map_err(|e| SshError::InvalidKey(e.to_string().to_lowercase()))
}

/// The namespace (`ssh-keygen -Y sign -n …`) of the signature that proves a user holds the private half
/// of a key they register.
pub const REGISTRATION_NAMESPACE: &str = "gpuhub-ssh-key";

/// Checks that `signature` (the armored output of `ssh-keygen -Y sign -n gpuhub-ssh-key`) was made over
/// `message` by the private half of `key`: registering someone else's public key is thereby impossible.
pub fn verify_possession(key: &PublicKey, message: &[u8], signature: &str) -> Result<(), SshError> {
    let bad = |e: russh::keys::ssh_key::Error| SshError::BadSignature(e.to_string().to_lowercase());
    let sig = russh::keys::ssh_key::SshSig::from_pem(signature.trim()).map_err(bad)?;
    key.verify(REGISTRATION_NAMESPACE, message, &sig).map_err(bad)
}

/// The OpenSSH SHA-256 fingerprint of a key (`SHA256:…`, as `ssh-keygen -lf` prints it).
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(russh::keys::HashAlg::Sha256).to_string()
}

/// The key in OpenSSH one-line form without comment (`ssh-ed25519 AAAA…`).
pub fn openssh_line(key: &PublicKey) -> String {
    let mut key = key.clone();
    key.set_comment("");
    key.to_openssh().unwrap_or_default().trim().to_string()
}

/// Tunables of the gateway; [`GatewayOptions::default`] suits production.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// Delay before any authentication refusal (constant, so refusals do not leak which users exist).
    pub auth_rejection_time: Duration,
    /// Connections idle this long are closed.
    pub inactivity_timeout: Option<Duration>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self { auth_rejection_time: Duration::from_millis(300), inactivity_timeout: Some(Duration::from_secs(3600)) }
    }
}

/// State shared by every connection of a gateway.
#[derive(Debug)]
pub(crate) struct Shared {
    pub backend: Arc<dyn GatewayBackend>,
    pub engine: Arc<dyn Engine>,
}

/// The SSH gateway: a bound listener plus everything a connection needs. Call [`SshGateway::run`].
#[derive(Debug)]
pub struct SshGateway {
    listener: TcpListener,
    config: Arc<russh::server::Config>,
    shared: Arc<Shared>,
}

impl SshGateway {
    /// Binds `addr` (for example the config's `ssh_listen`, default `127.0.0.1:2222`; port 0 picks one),
    /// loading the ed25519 host key from `host_key_path` or generating and saving it (mode 0600) there.
    pub async fn bind(
        addr: impl ToSocketAddrs + std::fmt::Debug,
        host_key_path: &Path,
        backend: Arc<dyn GatewayBackend>,
        engine: Arc<dyn Engine>,
    ) -> Result<Self, SshError> {
        Self::bind_with(addr, host_key_path, backend, engine, GatewayOptions::default()).await
    }

    /// [`SshGateway::bind`] with explicit [`GatewayOptions`].
    pub async fn bind_with(
        addr: impl ToSocketAddrs + std::fmt::Debug,
        host_key_path: &Path,
        backend: Arc<dyn GatewayBackend>,
        engine: Arc<dyn Engine>,
        options: GatewayOptions,
    ) -> Result<Self, SshError> {
        let shown = format!("{addr:?}");
        let listener = TcpListener::bind(addr).await.map_err(|source| SshError::Bind { addr: shown, source })?;
        Self::on_listener(listener, host_key_path, backend, engine, options)
    }

    /// A gateway on a listener bound already (so that what the backend needs can be made knowing the
    /// address first).
    pub fn on_listener(
        listener: TcpListener,
        host_key_path: &Path,
        backend: Arc<dyn GatewayBackend>,
        engine: Arc<dyn Engine>,
        options: GatewayOptions,
    ) -> Result<Self, SshError> {
        let key = load_or_generate_host_key(host_key_path)?;
        let config = russh::server::Config {
            server_id: russh::SshId::Standard("SSH-2.0-gpuhub".into()),
            methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
            auth_rejection_time: options.auth_rejection_time,
            auth_rejection_time_initial: Some(Duration::ZERO),
            keys: vec![key],
            inactivity_timeout: options.inactivity_timeout,
            keepalive_interval: Some(Duration::from_secs(30)),
            nodelay: true,
            window_size: 4 * 1024 * 1024,
            max_auth_attempts: 6,
            ..Default::default()
        };
        let shared = Arc::new(Shared { backend, engine });
        Ok(Self { listener, config: Arc::new(config), shared })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound tcp listener has an address")
    }

    /// Serves connections until `shutdown` completes; then stops accepting and drops the open
    /// connections (their processes in containers see their stdin close).
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), SshError> {
        let mut sessions = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
                accepted = self.listener.accept() => {
                    let (socket, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) if is_transient(&e) => {
                            tracing::warn!(error = %e, "ssh accept failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        Err(e) => return Err(SshError::Accept(e)),
                    };
                    let _ = socket.set_nodelay(true);
                    let who = Arc::new(std::sync::Mutex::new(None));
                    let handler = handler::Connection::new(self.shared.clone(), peer, who.clone());
                    let config = self.config.clone();
                    let revoked = self.shared.backend.revocations();
                    sessions.spawn(async move {
                        match russh::server::run_stream(config, socket, handler).await {
                            Ok(session) => serve_until_revoked(session, peer, who, revoked).await,
                            Err(e) => tracing::debug!(%peer, error = %e, "ssh handshake failed"),
                        }
                    });
                }
            }
        }
        sessions.shutdown().await;
        Ok(())
    }
}

/// Who a connection acts for once authenticated: the login and the workspace owner.
pub(crate) type Who = Arc<std::sync::Mutex<Option<(String, String)>>>;

/// Runs a connection to its end, or closes it when the account it acts for is revoked.
async fn serve_until_revoked(
    session: russh::server::RunningSession<handler::Connection>,
    peer: SocketAddr,
    who: Who,
    mut revoked: Option<tokio::sync::broadcast::Receiver<String>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let handle = session.handle();
    tokio::pin!(session);
    loop {
        let next = async {
            match revoked.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ended = &mut session => {
                if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "ssh connection ended");
                }
                return;
            }
            name = next => {
                let hit = match &name {
                    Ok(n) => who.lock().unwrap().as_ref().is_some_and(|(login, owner)| login == n || owner == n),
                    // missed names: close to be safe only if this connection authenticated at all
                    Err(RecvError::Lagged(_)) => who.lock().unwrap().is_some(),
                    Err(RecvError::Closed) => {
                        revoked = None;
                        false
                    }
                };
                if hit {
                    tracing::info!(%peer, "closing ssh connection: the account's access was revoked");
                    let _ = handle
                        .disconnect(russh::Disconnect::ByApplication, "your access was revoked".into(), "en".into())
                        .await;
                    return;
                }
            }
        }
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionAborted | ConnectionReset | Interrupted | WouldBlock)
        || e.raw_os_error().is_some_and(|c| c == 24 || c == 23) // EMFILE, ENFILE
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH8AEj/Nz9zHuq2dT08fudab7gZbkHR+UCm0GtEye43Y alice@laptop";

    #[test]
    fn keys_parse_and_fingerprint_like_ssh_keygen() {
        let key = parse_public_key(&format!("  {LINE}\n")).unwrap();
        assert_eq!(fingerprint(&key), "SHA256:yECmAHxBpVEy2eIlzyM+GqhrPxFEOHsBghIKjbZCmyw");
        assert_eq!(openssh_line(&key), LINE.trim_end_matches(" alice@laptop"));
        for bad in ["", "ssh-ed25519", "ssh-ed25519 AAAA", "hello world", &format!("{LINE}\n{LINE}")] {
            assert!(matches!(parse_public_key(bad), Err(SshError::InvalidKey(_))), "{bad:?}");
        }
    }
}
