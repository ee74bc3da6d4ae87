//! A real OpenID provider for tests: `oidc-provider-mock` (PyPI) started on a free port with users
//! alice (`alice-subject`: username alice, groups vision and students) and bob (`bob-subject`: groups
//! gpuhub-admins). Used by the identity crate's tests and gpuhub's end-to-end tests.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use gpuhub_identity::{OidcClient, OidcConfig};
use reqwest::StatusCode;

pub const REDIRECT_URL: &str = "http://gpuhub.invalid/auth/oidc/callback";

/// Whether the tests should run; panics with install instructions when the provider is missing.
pub fn provider_available() -> bool {
    if std::env::var("GPUHUB_SKIP_OIDC_TESTS").as_deref() == Ok("1") {
        eprintln!("GPUHUB_SKIP_OIDC_TESTS=1: OpenID Connect tests skipped");
        return false;
    }
    let importable = Command::new("python3")
        .args(["-c", "import oidc_provider_mock"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        importable,
        "python3 cannot import oidc_provider_mock: these tests run a real OpenID provider. Install it with \
         `python3 -m pip install oidc-provider-mock` (or run scripts/setup-debian.sh), or set \
         GPUHUB_SKIP_OIDC_TESTS=1 to skip them"
    );
    true
}

/// A running oidc-provider-mock; killed on drop.
#[derive(Debug)]
pub struct Provider {
    pub child: Child,
    pub log: tempfile::NamedTempFile,
    pub issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    pub async fn start() -> Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = tempfile::NamedTempFile::new()?;
        let alice = serde_json::json!({
            "sub": "alice-subject", "preferred_username": "alice", "email": "alice@example.org",
            "groups": ["vision", "students"],
        });
        let bob = serde_json::json!({"sub": "bob-subject", "preferred_username": "bob", "groups": ["gpuhub-admins"]});
        let child = Command::new("python3")
            .args(["-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--user-claims", &alice.to_string(), "--user-claims", &bob.to_string()])
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()
            .context("starting python3 -m oidc_provider_mock")?;
        let mut provider = Provider { child, log, issuer: format!("http://127.0.0.1:{port}") };
        provider.wait_ready().await?;
        Ok(provider)
    }

    /// Polls the discovery document until it is served, the provider exits, or 30 s pass.
    pub async fn wait_ready(&mut self) -> Result<()> {
        let url = format!("{}/.well-known/openid-configuration", self.issuer);
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("oidc-provider-mock exited ({status}): {}", self.log());
            }
            match http.get(&url).send().await {
                Ok(r) if r.status() == StatusCode::OK => return Ok(()),
                _ if Instant::now() > deadline => bail!("oidc-provider-mock not ready after 30 s: {}", self.log()),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub async fn client(&self) -> OidcClient {
        let config = OidcConfig::new(&self.issuer, "gpuhub", "gpuhub-client-secret", REDIRECT_URL);
        OidcClient::discover(&config).await.unwrap()
    }
}

/// Starts the provider, or `None` when `GPUHUB_SKIP_OIDC_TESTS=1` says to skip.
pub async fn provider() -> Option<Provider> {
    if !provider_available() {
        return None;
    }
    Some(Provider::start().await.unwrap())
}
