//! Signing in through an OpenID provider in headless Chromium, end to end: a real provider
//! (`oidc-provider-mock` from PyPI) started by the test, the real `gpuhub` binary configured with
//! `[oidc]`. On gpuhub's login page alice follows "Sign in with single sign-on", authorizes at the
//! provider's own page as herself, comes back through `/login/oidc/callback` and lands on her
//! workloads, signed in; her account was made with the provider's username and groups. A callback that
//! gpuhub did not start is refused. Needs chromium, chromium-driver and oidc-provider-mock.

mod access_support;
use gpuhub_testkit::oidc_provider as provider_support;

use access_support::browser::{self, Browser};
use access_support::{Hub, WAIT, eventually};
use anyhow::{Context as _, Result, ensure};
use fantoccini::Locator;
use reqwest::{Method, StatusCode};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alice_signs_in_through_the_provider_in_a_browser() -> Result<()> {
    if !provider_support::provider_available() {
        return Ok(());
    }
    let _serial = access_support::serial().await;
    let provider = provider_support::Provider::start().await?;
    let port = access_support::free_port()?;
    let hub_url = format!("http://127.0.0.1:{port}");
    // the team queue alice's provider groups name
    let config = format!(
        "gpu_mode = \"none\"\nreconcile_secs = 600\n[oidc]\nissuer_url = \"{}\"\nclient_id = \"gpuhub\"\n\
         client_secret = \"gpuhub-client-secret\"\nredirect_url = \"{hub_url}/login/oidc/callback\"\n",
        provider.issuer
    );
    let hub = Hub::start_on(&format!("127.0.0.1:{port}"), &config).await?;
    let (s, v) = hub
        .admin
        .api(Method::POST, "/api/v1/queues", Some(serde_json::json!({"name": "vision", "members": []})))
        .await?;
    ensure!(s == StatusCode::CREATED, "queue: {s} {v}");

    let b = Browser::start().await?;
    let c = &b.client;
    c.goto(&format!("{hub_url}/workloads")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Id("sso")).await.context("no single sign-on link")?;
    browser::screenshot(c, "oidc-login").await;
    c.find(Locator::Id("sso")).await?.click().await?;
    // the provider's own page
    let sub = c.wait().at_most(WAIT).for_element(Locator::Css("input[name=sub]")).await.context("no provider form")?;
    let at = c.current_url().await?;
    ensure!(at.as_str().starts_with(&provider.issuer), "not at the provider: {at}");
    sub.send_keys("alice-subject").await?;
    browser::screenshot(c, "oidc-provider").await;
    c.find(Locator::Css("form button[type=submit]")).await?.click().await?;
    // back at gpuhub, signed in, where she was going
    eventually("alice's workloads after signing in", WAIT, Duration::from_millis(100), || async {
        let u = c.current_url().await?;
        Ok((u.as_str().starts_with(&hub_url) && u.path() == "/workloads").then_some(()))
    })
    .await?;
    // her (empty) list: the page of a signed-in user
    c.wait().at_most(WAIT).for_element(Locator::Css("p.empty")).await.context("no list after sign-in")?;
    let page = c.source().await?;
    ensure!(page.contains("alice"), "the page does not name alice");
    browser::screenshot(c, "oidc-signed-in").await;

    let (s, u) = hub.admin.api(Method::GET, "/api/v1/users/alice", None).await?;
    ensure!(s == StatusCode::OK && u["source"] == "oidc" && u["role"] == "user", "alice's account: {s} {u}");
    let (_, qs) = hub.admin.api(Method::GET, "/api/v1/queues", None).await?;
    let vision = qs.as_array().and_then(|a| a.iter().find(|q| q["name"] == "vision")).cloned().unwrap_or_default();
    ensure!(vision["members"] == serde_json::json!(["alice"]), "her provider group made her a member: {vision}");

    // a callback gpuhub did not start is refused
    c.goto(&format!("{hub_url}/login/oidc/callback?code=forged&state=forged")).await?;
    let page = c.source().await?;
    ensure!(page.contains("unknown or expired"), "a forged callback: {page}");
    drop(provider);
    Ok(())
}
