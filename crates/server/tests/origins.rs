//! Apps on origins of their own (`apps_domain`), on the fake engine with an app on loopback: the hub
//! hands a browser off to `<app>--<ws>--<owner>.apps.localhost` with a single-use code that opens that
//! one origin; the app session there stands for the hub session (logging out ends it) and opens no
//! other app; an app origin serves nothing of the hub; the app never sees the hub's or the app
//! session's cookie. Requests reach app hosts by name (`reqwest`'s `resolve`), as a browser would.

use gpuhub_testkit as common;

use common::{ADMIN_PASSWORD, Hub};
use reqwest::header::{COOKIE, HOST, LOCATION, SET_COOKIE};
use reqwest::{StatusCode, redirect::Policy};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const DOMAIN: &str = "apps.localhost";

/// An app on loopback that answers `seen <path> cookie=<Cookie header> auth=<has Authorization>`, and
/// keeps every Cookie header it was sent.
async fn echo_app() -> (u16, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            let cookie = req.headers().get("cookie").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            kept.lock().unwrap().push(cookie.clone());
            let auth = req.headers().contains_key("authorization");
            format!("seen {} cookie={cookie} auth={auth}", req.uri())
        }
    });
    (common::http::listen(app).await.unwrap().port(), seen)
}

/// A browser-like client (no redirects followed) that reaches `host` (an app origin) at the hub.
fn client(hub: &Hub, hosts: &[&str]) -> reqwest::Client {
    let addr = hub.server.as_ref().unwrap().addr;
    let mut b = reqwest::Client::builder().redirect(Policy::none());
    for h in hosts {
        b = b.resolve(&format!("{h}.{DOMAIN}"), addr);
    }
    b.build().unwrap()
}

/// Logs `user` in; returns the hub's session cookie (`gpuhub_session=…`).
async fn session(hub: &Hub, user: &str, password: &str) -> String {
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let c = r.headers().get(SET_COOKIE).unwrap().to_str().unwrap();
    c.split(';').next().unwrap().to_owned()
}

fn set_cookie(r: &reqwest::Response) -> Option<String> {
    r.headers().get(SET_COOKIE).map(|v| v.to_str().unwrap().to_owned())
}

fn location(r: &reqwest::Response) -> String {
    r.headers().get(LOCATION).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

/// The hub's answer to a browser opening `path` with `cookie`.
async fn open(hub: &Hub, http: &reqwest::Client, path: &str, cookie: &str) -> reqwest::Response {
    http.get(format!("{}{path}", hub.url)).header(COOKIE, cookie).header("accept", "text/html").send().await.unwrap()
}

/// The hub's handoff for `path`, as a browser goes through it: the hub's redirect to the app origin's
/// bind step, which sets the bind cookie there and sends its hash to the hub's mint, which sends the
/// browser on to the handoff. The app origin's handoff URL and the bind cookie (`gpuhub_bind=…`).
async fn handoff(hub: &Hub, http: &reqwest::Client, path: &str, cookie: &str) -> (String, String) {
    let r = open(hub, http, path, cookie).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path}: {:?}", r.text().await);
    assert!(set_cookie(&r).is_none(), "the hub sets no cookie on a handoff");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let bind = location(&r);
    assert!(bind.contains(".apps.localhost:") && bind.contains("/_gpuhub/bind?code="), "{bind}");
    let r = http.get(&bind).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = set_cookie(&r).expect("a bind cookie");
    assert!(set.starts_with("gpuhub_bind=") && set.contains("HttpOnly") && set.contains("Path=/_gpuhub/"), "{set}");
    let bind_cookie = set.split(';').next().unwrap().to_owned();
    let mint = location(&r);
    assert!(mint.starts_with(&format!("{}/_gpuhub/mint?code=", hub.url.replace("127.0.0.1", "localhost"))), "{mint}");
    let r = http.get(&mint).header(COOKIE, cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "{mint}");
    (location(&r), bind_cookie)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_live_on_their_own_origins_entered_by_a_single_use_handoff() {
    let (port, seen) = echo_app().await;
    let hub = Hub::start_with(|c| c.apps_domain = Some(DOMAIN.into())).await;
    hub.runtime.set_endpoint("127.0.0.1".parse().unwrap());
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let _bob = hub.user(&admin, "bob").await;
    let apps = json!([{"name": "web", "port": port}, {"name": "other", "port": port}]);
    let body = json!({"name": "nb", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 0}, "apps": apps});
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "nb", "running").await;
    let (web, other) = ("web--nb--alice", "other--nb--alice");
    let http = client(&hub, &[web, other]);
    let alice_cookie = session(&hub, "alice", "alice-password").await;
    let hub_port = hub.server.as_ref().unwrap().addr.port();

    // the hub hands alice's browser off to the app's own origin, with a code and nothing else
    let (to, bind) = handoff(&hub, &http, "/w/alice/nb/web/tree?x=1", &alice_cookie).await;
    let prefix = format!("http://{web}.{DOMAIN}:{hub_port}/_gpuhub/handoff?code=");
    assert!(to.starts_with(&prefix), "handoff to {to}");
    // the code opens that origin: a host-only, HttpOnly cookie, then back to where alice was going
    let r = http.get(&to).header(COOKIE, &bind).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/w/alice/nb/web/tree?x=1");
    let set = set_cookie(&r).expect("an app session cookie");
    assert!(set.starts_with("gpuhub_app=") && set.contains("HttpOnly") && set.contains("SameSite=Lax"), "{set}");
    assert!(!set.to_ascii_lowercase().contains("domain="), "the app cookie is host-only: {set}");
    let app_cookie = set.split(';').next().unwrap().to_owned();
    let on = |label: &str, path: &str| format!("http://{label}.{DOMAIN}:{hub_port}{path}");
    let r = http.get(on(web, "/w/alice/nb/web/tree?x=1")).header(COOKIE, &app_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.unwrap();
    assert!(text.starts_with("seen /w/alice/nb/web/tree?x=1 cookie= auth=false"), "{text}");
    // ... once: the same code again, or a stale one, is refused
    let r = http.get(&to).header(COOKIE, &bind).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(set_cookie(&r).is_none());

    // a code opens nothing in another browser than the one that asked for it (security review N2): not
    // at the handoff without the bind cookie, not at the hub's mint with another hub session
    let (to, _) = handoff(&hub, &http, "/w/alice/nb/web/", &alice_cookie).await;
    let r = http.get(&to).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "no bind cookie");
    assert!(set_cookie(&r).is_none());
    let (_, other_bind) = handoff(&hub, &http, "/w/alice/nb/web/", &alice_cookie).await;
    let (to, _) = handoff(&hub, &http, "/w/alice/nb/web/", &alice_cookie).await;
    let r = http.get(&to).header(COOKIE, &other_bind).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "another handoff's bind cookie");
    let r = open(&hub, &http, "/w/alice/nb/web/", &alice_cookie).await;
    let r = http.get(location(&r)).send().await.unwrap();
    let mint = location(&r);
    let eve_cookie = session(&hub, "bob", "bob-password").await;
    let r = http.get(&mint).header(COOKIE, &eve_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "the mint with another hub session");
    let r = http.get(&mint).header(COOKIE, &alice_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "and the code is spent");

    // the app sees neither cookie, whatever else the browser sends along
    let both = format!("{app_cookie}; {alice_cookie}; mine=1");
    let r = http.get(on(web, "/w/alice/nb/web/")).header(COOKIE, &both).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("cookie=mine=1 auth=false"));
    assert!(seen.lock().unwrap().iter().all(|c| !c.contains("gpuhub_")), "{:?}", seen.lock().unwrap());

    // a code for one app is no good on another app's origin, and one app's cookie opens no other app
    let (to, bind) = handoff(&hub, &http, "/w/alice/nb/web/", &alice_cookie).await;
    let moved = to.replacen(web, other, 1);
    let r = http.get(&moved).header(COOKIE, &bind).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a code on another origin");
    let r = http.get(on(other, "/w/alice/nb/other/")).header(COOKIE, &app_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "web's cookie on other's origin");
    // an app origin serves its own app and nothing of the hub: not another app's path, not the API
    for path in ["/w/alice/nb/other/", "/api/v1/me", "/api/v1/workloads", "/login", "/terminal/alice/nb/", "/metrics"] {
        let r = http.get(on(web, path)).header(COOKIE, &both).bearer_auth(&alice).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path} on the app origin");
        let v: Value = r.json().await.unwrap();
        assert!(v["detail"].as_str().unwrap().contains("serves its own app only"), "{path}: {v}");
    }
    // the bare origin goes to its app
    let r = http.get(on(web, "/")).send().await.unwrap();
    assert_eq!(location(&r), "/w/alice/nb/web/");

    // without a session, a browser is sent to the hub (which logs it in and hands it off again); an
    // API client is told
    let r = http.get(on(web, "/w/alice/nb/web/a?b=c")).header("accept", "text/html").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), format!("http://localhost:{hub_port}/w/alice/nb/web/a?b=c"));
    let r = http.get(on(web, "/w/alice/nb/web/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // a bearer token opens the app origin too (a script or the CLI, never a browser by itself)
    let r = http.get(on(web, "/w/alice/nb/web/")).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("auth=false"), "the token is not passed on");
    // a cross-site WebSocket handshake is refused
    let r = http
        .get(on(web, "/w/alice/nb/web/ws"))
        .header(COOKIE, &app_cookie)
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // bob's session gets no code for alice's app (404, as if it did not exist), and alice's app
    // session is no good with bob's hub cookie either
    let bob_cookie = session(&hub, "bob", "bob-password").await;
    let r = open(&hub, &http, "/w/alice/nb/web/", &bob_cookie).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = http.get(on(web, "/w/alice/nb/web/")).header(COOKIE, &bob_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // the hub's origin serves no app to a browser session: it hands off instead (with a bearer token,
    // non-browser clients are still proxied there)
    let r = hub.http.get(format!("{}/w/alice/nb/web/", hub.url)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // logging out at the hub ends the app session made of it
    let r = hub.http.post(format!("{}/api/v1/logout", hub.url)).header(COOKIE, &alice_cookie).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = http.get(on(web, "/w/alice/nb/web/")).header(COOKIE, &app_cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // and a request naming the hub's own host is the hub's, whatever the app domain
    let r = hub.http.get(format!("{}/api/v1/health", hub.url)).header(HOST, format!("localhost:{hub_port}"));
    assert_eq!(r.send().await.unwrap().status(), StatusCode::OK);
}
