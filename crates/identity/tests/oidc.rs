//! `OidcClient` against a real OpenID provider: the `oidc-provider-mock` Python package (PyPI), which
//! each test starts on a free port with users alice and bob and their claims. The browser's part is
//! played with reqwest: the provider's authorization form is submitted for a subject, and the
//! redirect to gpuhub's callback is read from the Location header instead of followed.
//!
//! Needs `python3 -m pip install oidc-provider-mock` (scripts/setup-debian.sh does it); without it
//! the tests fail saying so, unless GPUHUB_SKIP_OIDC_TESTS=1.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use gpuhub_identity::{IdentityError, OidcClient, OidcConfig, PendingLogin};
use reqwest::{StatusCode, Url, redirect};

const REDIRECT_URL: &str = "http://gpuhub.invalid/auth/oidc/callback";

/// Whether the tests should run; panics with install instructions when the provider is missing.
fn provider_available() -> bool {
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
struct Provider {
    child: Child,
    log: tempfile::NamedTempFile,
    issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    async fn start() -> Result<Self> {
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
    async fn wait_ready(&mut self) -> Result<()> {
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

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    async fn client(&self) -> OidcClient {
        let config = OidcConfig::new(&self.issuer, "gpuhub", "gpuhub-client-secret", REDIRECT_URL);
        OidcClient::discover(&config).await.unwrap()
    }
}

async fn provider() -> Option<Provider> {
    if !provider_available() {
        return None;
    }
    Some(Provider::start().await.unwrap())
}

/// Plays the browser: opens the authorization URL, submits the provider's form as `subject`, and
/// returns the `code` and `state` of the redirect to gpuhub's callback.
async fn authorize(authorize_url: &str, subject: &str) -> Result<(String, String)> {
    let browser = reqwest::Client::builder().redirect(redirect::Policy::none()).build()?;
    let form = browser.get(authorize_url).send().await?;
    let status = form.status();
    let page = form.text().await?;
    ensure!(status == StatusCode::OK && page.contains("name=\"sub\""), "no authorization form ({status}): {page}");
    let answer = browser.post(authorize_url).form(&[("sub", subject)]).send().await?;
    ensure!(answer.status().is_redirection(), "authorization answered {}: {}", answer.status(), answer.text().await?);
    let location = answer.headers().get("location").context("redirect without Location")?.to_str()?;
    let location = Url::parse(location)?;
    ensure!(location.as_str().starts_with(REDIRECT_URL), "redirected to {location}, not to the callback");
    let param = |name: &str| location.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
    let code = param("code").with_context(|| format!("no code in {location}"))?;
    let state = param("state").with_context(|| format!("no state in {location}"))?;
    Ok((code, state))
}

#[tokio::test]
async fn alice_signs_in_with_her_username_and_groups() {
    let Some(provider) = provider().await else { return };
    let client = provider.client().await;
    let (url, pending) = client.begin();
    let url_parsed = Url::parse(&url).unwrap();
    let query: Vec<(String, String)> = url_parsed.query_pairs().into_owned().collect();
    let get = |k: &str| query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("code_challenge_method"), Some("S256"));
    assert_eq!(get("state"), Some(pending.state.as_str()));
    assert_eq!(get("nonce"), Some(pending.nonce.as_str()));
    assert!(get("scope").unwrap().split(' ').any(|s| s == "openid"));

    let (code, state) = authorize(&url, "alice-subject").await.unwrap();
    assert_eq!(state, pending.state);
    let alice = client.finish(pending, &code, &state).await.unwrap();
    assert_eq!(alice.subject, "alice-subject");
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.email.as_deref(), Some("alice@example.org"));
    assert_eq!(alice.groups, ["students", "vision"]);
    assert!(!alice.is_admin);

    let (url, pending) = client.begin();
    let (code, state) = authorize(&url, "bob-subject").await.unwrap();
    let bob = client.finish(pending, &code, &state).await.unwrap();
    assert_eq!((bob.username.as_str(), bob.is_admin), ("bob", true));
}

#[tokio::test]
async fn a_wrong_state_is_refused_before_the_code_is_spent() {
    let Some(provider) = provider().await else { return };
    let client = provider.client().await;
    let (url, pending) = client.begin();
    let (code, state) = authorize(&url, "alice-subject").await.unwrap();
    let got = client.finish(pending.clone(), &code, "forged-state").await;
    assert!(matches!(got, Err(IdentityError::StateMismatch)), "{got:?}");
    // another login's pending state is no better
    let (_, other) = client.begin();
    let got = client.finish(other, &code, &state).await;
    assert!(matches!(got, Err(IdentityError::StateMismatch)), "{got:?}");
    assert_eq!(client.finish(pending, &code, &state).await.unwrap().username, "alice");
}

#[tokio::test]
async fn a_replayed_code_is_refused() {
    let Some(provider) = provider().await else { return };
    let client = provider.client().await;
    let (url, pending) = client.begin();
    let (code, state) = authorize(&url, "alice-subject").await.unwrap();
    client.finish(pending.clone(), &code, &state).await.unwrap();
    let got = client.finish(pending, &code, &state).await;
    assert!(matches!(got, Err(IdentityError::CodeExchange(_))), "{got:?}");
}

#[tokio::test]
async fn an_id_token_for_another_nonce_is_refused() {
    let Some(provider) = provider().await else { return };
    let client = provider.client().await;
    let (url, pending) = client.begin();
    let (code, state) = authorize(&url, "alice-subject").await.unwrap();
    let (_, other) = client.begin();
    let swapped = PendingLogin { nonce: other.nonce, ..pending };
    let got = client.finish(swapped, &code, &state).await;
    match got {
        Err(IdentityError::InvalidIdToken(m)) => assert!(m.to_lowercase().contains("nonce"), "{m}"),
        other => panic!("expected an invalid id token, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_username_claim_is_an_error_naming_it() {
    let Some(provider) = provider().await else { return };
    let mut config = OidcConfig::new(&provider.issuer, "gpuhub", "secret", REDIRECT_URL);
    config.username_claim = "employee_number".into();
    let client = OidcClient::discover(&config).await.unwrap();
    let (url, pending) = client.begin();
    let (code, state) = authorize(&url, "alice-subject").await.unwrap();
    let got = client.finish(pending, &code, &state).await;
    assert!(matches!(&got, Err(IdentityError::MissingClaim(c)) if c == "employee_number"), "{got:?}");
}

#[tokio::test]
async fn discovery_of_a_dead_issuer_fails() {
    if !provider_available() {
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = OidcConfig::new(format!("http://127.0.0.1:{port}"), "gpuhub", "secret", REDIRECT_URL);
    let got = OidcClient::discover(&config).await;
    assert!(matches!(got, Err(IdentityError::Provider(_))), "{got:?}");
}
