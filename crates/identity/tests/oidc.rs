//! `OidcClient` against a real OpenID provider: the `oidc-provider-mock` Python package (PyPI), which
//! each test starts on a free port with users alice and bob and their claims. The browser's part is
//! played with reqwest: the provider's authorization form is submitted for a subject, and the
//! redirect to gpuhub's callback is read from the Location header instead of followed.
//!
//! Needs `python3 -m pip install oidc-provider-mock` (scripts/setup-debian.sh does it); without it
//! the tests fail saying so, unless GPUHUB_SKIP_OIDC_TESTS=1.

use gpuhub_testkit::oidc_provider as provider_support;

use anyhow::{Context, Result, ensure};
use gpuhub_identity::{IdentityError, OidcClient, OidcConfig, PendingLogin};
use provider_support::*;
use reqwest::{StatusCode, Url, redirect};
use std::net::TcpListener;

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
