//! Regression tests for the browser findings of the second security review
//! (`shared/reviews/security-2.md`, N2–N4), over HTTP and real WebSockets: each fails on the code
//! before its fix.

use gpuhub_testkit as common;

use async_trait::async_trait;
use common::*;
use futures::{SinkExt, StreamExt};
use gpuhub_driver::fake::FakeEngine;
use gpuhub_driver::{
    Capabilities, Engine, EngineError, EngineNode, EventStream, ExecHandle, ExecSpec, LogStream, MemberRef,
    MemberUsage, PullProgress, RegistryAuth, RunSpec, RunStatus,
};
use reqwest::{Method, StatusCode, redirect};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

/// The fake engine, but an exec runs until its terminal closes: nothing comes out, and what is typed
/// is kept for the test to read.
#[derive(Debug)]
struct LongExec {
    fake: Arc<FakeEngine>,
    typed: Mutex<Vec<tokio::io::DuplexStream>>,
}

#[async_trait]
impl Engine for LongExec {
    fn name(&self) -> &'static str {
        self.fake.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.fake.capabilities()
    }
    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        self.fake.inventory().await
    }
    async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        self.fake.image_exists(image).await
    }
    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: &(dyn Fn(PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        self.fake.pull(image, auth, progress).await
    }
    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        self.fake.submit(spec).await
    }
    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        self.fake.cancel(run, grace).await
    }
    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        self.fake.remove(run).await
    }
    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        self.fake.observe(run).await
    }
    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        self.fake.list_runs().await
    }
    async fn events(&self) -> Result<EventStream, EngineError> {
        self.fake.events().await
    }
    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        self.fake.logs(member, follow, tail).await
    }
    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let h = self.fake.exec(member, spec).await?;
        let (input, typed) = tokio::io::duplex(1 << 16);
        self.typed.lock().unwrap().push(typed);
        Ok(ExecHandle { input: Box::pin(input), output: futures::stream::pending().boxed(), process: h.process })
    }
    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        self.fake.endpoint(member, port).await
    }
    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        self.fake.usage(run).await
    }
}

/// A hub whose terminals stay open, apps reached on loopback.
async fn long_exec_hub(tweak: impl FnOnce(&mut gpuhub_server::config::Config)) -> (Hub, Arc<LongExec>) {
    let fake = Arc::new(FakeEngine::new().with_nodes(vec![node(4)]));
    fake.set_endpoint("127.0.0.1".parse().unwrap());
    let engine = Arc::new(LongExec { fake: fake.clone(), typed: Mutex::default() });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    tweak(&mut cfg);
    let mut hub = Hub::start_on(dir, cfg, engine.clone()).await;
    hub.runtime = fake;
    (hub, engine)
}

/// An app on loopback whose every path is a WebSocket echo.
async fn echo_app() -> u16 {
    use axum::extract::ws::{WebSocket, WebSocketUpgrade};
    let app = axum::Router::new().fallback(|ws: WebSocketUpgrade| async {
        ws.on_upgrade(|mut s: WebSocket| async move {
            while let Some(Ok(m)) = s.recv().await {
                if s.send(m).await.is_err() {
                    break;
                }
            }
        })
    });
    common::http::listen(app).await.unwrap().port()
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

/// Signs in with a password and returns the session cookie (`name=value`) the browser would send.
async fn session(hub: &Hub, user: &str, password: &str) -> String {
    let r = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": user, "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let set = r.headers()["set-cookie"].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// A user with a running workspace `nb` serving the echo app as `echo`; their token and cookie.
async fn user_with_workspace(hub: &Hub, admin: &str, name: &str, port: u16) -> (String, String) {
    let token = hub.user(admin, name).await;
    let body = json!({"name": "nb", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB"}, "apps": [{"name": "echo", "port": port}]});
    hub.submit(&token, body).await;
    hub.wait_state(&token, "nb", "running").await;
    (token, session(hub, name, &format!("{name}-password")).await)
}

/// `ws://` for a path of the hub.
fn ws_url(hub: &Hub, path: &str) -> String {
    format!("{}{path}", hub.url.replacen("http://", "ws://", 1))
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket handshake to `path` with these headers: the socket, or the refusal's status.
async fn open_ws(hub: &Hub, path: &str, headers: &[(&str, &str)]) -> Result<Ws, StatusCode> {
    let mut req = ws_url(hub, path).into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(r)) => Err(StatusCode::from_u16(r.status().as_u16()).unwrap()),
        Err(e) => panic!("{path}: {e}"),
    }
}

/// Waits until `ws` closes (a close frame, the end, or an error), at most five seconds.
async fn closes(ws: &mut Ws, what: &str) {
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "{what}: still open five seconds after the revocation");
}

/// The hub's own origin, as its pages' scripts send it.
fn origin(hub: &Hub) -> String {
    hub.url.clone()
}

/// N2: every hub page refuses to be framed — the terminal's page and assets, the portal's pages, the
/// login page, the API.
#[tokio::test]
async fn n2_every_hub_page_refuses_framing() {
    let (hub, _) = long_exec_hub(|_| {}).await;
    let admin = hub.admin().await;
    let (_, cookie) = user_with_workspace(&hub, &admin, "alice", echo_app().await).await;
    let http = no_redirects();
    for path in [
        "/terminal/alice/nb/",
        "/terminal/alice/nb/xterm.js",
        "/workloads",
        "/workloads/nb",
        "/account",
        "/nodes",
        "/login",
        "/api/v1/health",
        "/api/v1/me",
        "/no-such-page",
    ] {
        let r = http.get(format!("{}{path}", hub.url)).header("cookie", &cookie).send().await.unwrap();
        let h = r.headers();
        assert_eq!(h.get("x-frame-options").map(|v| v.to_str().unwrap()), Some("DENY"), "{path}: {h:?}");
        let csp = h.get("content-security-policy").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp:?}");
    }
}

/// N2: the terminal's WebSocket takes the hub's own origin only: another origin (an app's, any site's)
/// is refused, and so is a browser cookie without an `Origin`; a bearer token needs none.
#[tokio::test]
async fn n2_terminal_websocket_takes_the_hubs_own_origin_only() {
    let (hub, _) = long_exec_hub(|c| c.apps_domain = Some("apps.localhost".into())).await;
    let admin = hub.admin().await;
    let (token, cookie) = user_with_workspace(&hub, &admin, "alice", echo_app().await).await;
    let path = "/terminal/alice/nb/ws";
    let port = hub.url.rsplit(':').next().unwrap().to_owned();
    let app_origin = format!("http://echo--nb--mallory.apps.localhost:{port}");
    for foreign in ["https://evil.example", app_origin.as_str(), "null"] {
        let r = open_ws(&hub, path, &[("cookie", &cookie), ("origin", foreign)]).await;
        assert_eq!(r.err(), Some(StatusCode::FORBIDDEN), "origin {foreign}");
    }
    let r = open_ws(&hub, path, &[("cookie", &cookie)]).await;
    assert_eq!(r.err(), Some(StatusCode::FORBIDDEN), "a cookie without an Origin");
    let own = origin(&hub);
    assert!(open_ws(&hub, path, &[("cookie", &cookie), ("origin", &own)]).await.is_ok(), "the hub's own origin");
    let bearer = format!("Bearer {token}");
    assert!(open_ws(&hub, path, &[("authorization", &bearer)]).await.is_ok(), "a bearer token, no Origin");
}

/// Opens `user`'s terminal and echo app WebSockets with `cookie` (path mode), and checks both carry
/// bytes: typed bytes reach the shell, the app echoes.
async fn open_both(hub: &Hub, engine: &LongExec, user: &str, cookie: &str) -> (Ws, Ws) {
    let own = origin(hub);
    let headers = [("cookie", cookie), ("origin", own.as_str())];
    let before = engine.typed.lock().unwrap().len();
    let mut term = open_ws(hub, &format!("/terminal/{user}/nb/ws"), &headers).await.expect("the terminal opens");
    term.send(Message::Binary(b"echo hi\n".to_vec().into())).await.unwrap();
    let mut typed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(t) = engine.typed.lock().unwrap().drain(before..).next() {
                return t;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the terminal's shell started");
    let mut buf = [0u8; 8];
    typed.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"echo hi\n");
    let mut app = open_ws(hub, &format!("/w/{user}/nb/echo/socket"), &headers).await.expect("the app opens");
    app.send(Message::Text("ping".into())).await.unwrap();
    let echoed = tokio::time::timeout(Duration::from_secs(5), app.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echoed, Message::Text("ping".into()));
    (term, app)
}

/// N3: a revocation ends the open WebSockets of the session, token or account it concerns — the
/// terminal and a proxied app's — within a moment: disabling the account, revoking the session, a
/// password change (which ends every other session too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n3_revocation_closes_open_terminal_and_app_websockets() {
    let (hub, engine) = long_exec_hub(|_| {}).await;
    let admin = hub.admin().await;
    let port = echo_app().await;

    // disabling the account (its work kept running)
    let (_, cookie) = user_with_workspace(&hub, &admin, "alice", port).await;
    let (mut term, mut app) = open_both(&hub, &engine, "alice", &cookie).await;
    let (s, v) = hub
        .call(
            Method::PATCH,
            "/api/v1/users/alice",
            Some(&admin),
            Some(json!({"disabled": true, "keep_workloads": true})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    closes(&mut term, "alice's terminal after her account was disabled").await;
    closes(&mut app, "alice's app after her account was disabled").await;

    // revoking the session the sockets were opened with
    let (bob, cookie) = user_with_workspace(&hub, &admin, "bob", port).await;
    let (mut term, mut app) = open_both(&hub, &engine, "bob", &cookie).await;
    let (_, tokens) = hub.call(Method::GET, "/api/v1/me/tokens", Some(&bob), None).await;
    let sessions: Vec<&Value> = tokens.as_array().unwrap().iter().filter(|t| t["kind"] == "session").collect();
    let id = sessions.last().unwrap()["id"].as_str().unwrap();
    let (s, v) = hub.call(Method::DELETE, &format!("/api/v1/me/tokens/{id}"), Some(&bob), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    closes(&mut term, "bob's terminal after its session was revoked").await;
    closes(&mut app, "bob's app after its session was revoked").await;

    // a password change, made with the API token: the browser session and its sockets end
    let (carol, cookie) = user_with_workspace(&hub, &admin, "carol", port).await;
    let other = session(&hub, "carol", "carol-password").await;
    let (mut term, mut app) = open_both(&hub, &engine, "carol", &cookie).await;
    let change = json!({"current_password": "carol-password", "new_password": "carol-new-password-1"});
    let (s, v) = hub.call(Method::POST, "/api/v1/me/password", Some(&carol), Some(change)).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    closes(&mut term, "carol's terminal after her password changed").await;
    closes(&mut app, "carol's app after her password changed").await;
    for c in [&cookie, &other] {
        let r = no_redirects().get(format!("{}/account", hub.url)).header("cookie", c).send().await.unwrap();
        assert!(r.status().is_redirection(), "another session of carol still opens her account: {}", r.status());
    }
    let (s, _) = hub.call(Method::GET, "/api/v1/me", Some(&carol), None).await;
    assert_eq!(s, StatusCode::OK, "the token that changed the password is kept");
}

/// N4: a request carrying two session cookies (one set by an app for the parent domain with a longer
/// path comes first) is refused, and the cookie cleared; neither is taken.
#[tokio::test]
async fn n4_two_session_cookies_are_refused() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    hub.user(&admin, "mallory").await;
    let alice = session(&hub, "alice", "alice-password").await;
    let mallory = session(&hub, "mallory", "mallory-password").await;
    let both = format!("{mallory}; {alice}");
    let http = no_redirects();
    for path in ["/account", "/workloads", "/terminal/alice/nb/"] {
        let r = http.get(format!("{}{path}", hub.url)).header("cookie", &both).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{path}");
        let clear = r.headers().get("set-cookie").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        assert!(clear.starts_with("gpuhub_session=;") && clear.contains("Max-Age=0"), "{path}: {clear:?}");
    }
    let r = http.get(format!("{}/account", hub.url)).header("cookie", &alice).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "one session cookie still opens the portal");
}

/// N4: with `secure_cookies`, the session cookie is `__Host-gpuhub_session` (`Secure`, `Path=/`, no
/// `Domain`: no other host, an app's included, can set or shadow it), and only that name is read.
#[tokio::test]
async fn n4_secure_session_cookie_has_the_host_prefix() {
    let hub = Hub::start_with(|c| c.secure_cookies = true).await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    let r = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": "alice", "password": "alice-password"}))
        .send()
        .await
        .unwrap();
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set.starts_with("__Host-gpuhub_session="), "{set}");
    assert!(set.contains("; Secure") && set.contains("Path=/;") && !set.contains("Domain"), "{set}");
    let value = set.split(';').next().unwrap().split_once('=').unwrap().1.to_owned();
    let http = no_redirects();
    let r = http.get(format!("{}/account", hub.url)).header("cookie", format!("__Host-gpuhub_session={value}"));
    assert_eq!(r.send().await.unwrap().status(), StatusCode::OK);
    let r = http.get(format!("{}/account", hub.url)).header("cookie", format!("gpuhub_session={value}"));
    assert!(r.send().await.unwrap().status().is_redirection(), "the unprefixed name is not read");
}
