//! The newcomer's review (`shared/reviews/newcomer-2.md`): each bug with a test that fails on the code
//! before its fix.

use gpuhub_testkit as common;

use common::*;
use reqwest::{Method, StatusCode, redirect};

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

/// Bug 9: the login form needed JavaScript; without it the browser sent it with GET and the password
/// landed in the URL. The form posts to `/login` itself, which signs in (a session only) and returns
/// to `next` on this site; a wrong password shows the page again with the reason; another site's form
/// is refused.
#[tokio::test]
async fn the_login_form_works_without_javascript() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    let page = hub.http.get(format!("{}/login?next=/usage", hub.url)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<form id="f" method="post" action="/login">"#), "{page}");
    assert!(page.contains(r#"<input type="hidden" name="next" value="/usage">"#), "{page}");

    let http = no_redirects();
    let post = |body: &'static str| {
        http.post(format!("{}/login", hub.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", hub.url.as_str())
            .body(body)
    };
    let r = post("username=alice&password=alice-password&next=%2Fusage").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/usage");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("gpuhub_session="), "{cookie}");
    // the session opens the portal
    let r = http.get(format!("{}/usage", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // only this site's paths
    let r = post("username=alice&password=alice-password&next=%2F%2Fevil.example%2F").send().await.unwrap();
    assert_eq!(r.headers()["location"], "/");

    // a wrong password: the page again, with the reason, and no session
    let r = post("username=alice&password=wrong&next=%2Fusage").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get("set-cookie").is_none());
    let page = r.text().await.unwrap();
    assert!(page.contains("invalid username or password"), "{page}");
    assert!(page.contains(r#"name="next" value="/usage""#), "{page}");

    // another site's form
    let r = http
        .post(format!("{}/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", "https://evil.example")
        .body("username=alice&password=alice-password")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get("set-cookie").is_none());
}

/// Bug 5: the app link of a queued workspace answered the API's JSON 503 with advice that did not apply
/// ("start it with `gpuhub start`"). A browser gets a page that says it waits and reloads itself; the
/// API's answer says the same and when to try again; one that ended still says to start it.
#[tokio::test]
async fn a_queued_workspace_app_link_says_it_waits() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let workspace = |name: &str, gpus: u32| {
        let mut body = job(name, gpus);
        body["kind"] = serde_json::json!("workspace");
        body["command"] = serde_json::json!(["sleep", "infinity"]);
        body["apps"] = serde_json::json!([{"name": "lab", "port": 8888}]);
        body
    };
    hub.submit(&alice, workspace("hold", 2)).await;
    hub.wait_state(&alice, "hold", "running").await;
    hub.submit(&alice, workspace("nb", 1)).await;
    hub.wait_for(&alice, "nb", 10, |v| v["state"] == "queued" && v.get("explanation").is_some()).await;

    let open = |accept: &'static str| {
        hub.http.get(format!("{}/w/alice/nb/lab/", hub.url)).bearer_auth(&alice).header("accept", accept)
    };
    let r = open("text/html,application/xhtml+xml").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["refresh"], "5");
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let page = r.text().await.unwrap();
    assert!(page.contains("workspace nb is queued, not running yet"), "{page}");
    assert!(!page.contains("gpuhub start"), "{page}");

    let r = open("application/json").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "5");
    assert_eq!(r.headers()["content-type"], "application/problem+json");

    // one that ended: start it again, and no reload
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/hold/stop", Some(&alice), None).await;
    assert!(s.is_success(), "{v}");
    hub.wait_state(&alice, "hold", "stopped").await;
    let r = hub
        .http
        .get(format!("{}/w/alice/hold/lab/", hub.url))
        .bearer_auth(&alice)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().get("refresh").is_none());
    assert!(r.text().await.unwrap().contains("start it with `gpuhub start hold`"));
}

/// A portal session for `user` through the login form.
async fn portal_cookie(hub: &Hub, user: &str, password: &str) -> String {
    let r = no_redirects()
        .post(format!("{}/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", hub.url.as_str())
        .body(format!("username={user}&password={password}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
}

/// Bug 6: the action buttons were not part of the live-updated part of a workload's page, so a stale
/// Stop button on an ended workload led to a 409 page. They are swapped in with the rest.
#[tokio::test]
async fn a_workload_page_s_actions_follow_its_state() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let cookie = portal_cookie(&hub, "alice", "alice-password").await;
    let mut body = job("nb", 0);
    body["kind"] = serde_json::json!("workspace");
    body["command"] = serde_json::json!(["sleep", "infinity"]);
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "nb", "running").await;
    let live = || async {
        let r = hub
            .http
            .get(format!("{}/workloads/nb?fragment=live", hub.url))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    };
    let running = live().await;
    assert!(running.contains("/workloads/nb/stop") && !running.contains("/workloads/nb/start"), "{running}");
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/nb/stop", Some(&alice), None).await;
    assert!(s.is_success(), "{v}");
    hub.wait_state(&alice, "nb", "stopped").await;
    let stopped = live().await;
    assert!(stopped.contains("/workloads/nb/start") && !stopped.contains("/workloads/nb/stop"), "{stopped}");
}

/// Bug 3: a workspace submitted without a command ran the image's default (`/bin/bash` for the
/// JupyterLab image), which ends at once without a terminal, while its page still offered the app's
/// link. A workspace with no command now runs one that waits until it is stopped; a job keeps the
/// image's default.
#[tokio::test]
async fn a_workspace_without_a_command_stays_up() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut body = job("nb", 0);
    body["kind"] = serde_json::json!("workspace");
    body.as_object_mut().unwrap().remove("command");
    let v = hub.submit(&alice, body).await;
    let want: Vec<&str> = gpuhub_server::service::WORKSPACE_KEEP_ALIVE.to_vec();
    assert_eq!(v["command"], serde_json::json!(want), "{v}");
    hub.wait_state(&alice, "nb", "running").await;
    let spec = hub.runtime.submitted().into_iter().last().unwrap();
    assert_eq!(spec.command, want);

    let mut body = job("j", 0);
    body.as_object_mut().unwrap().remove("command");
    let v = hub.submit(&alice, body).await;
    assert_eq!(v["command"], serde_json::json!([]), "{v}");
}

/// The keep-alive command waits, and ends at once with 0 when stopped (a real shell).
#[test]
fn the_keep_alive_command_waits_and_ends_on_sigterm() {
    let [sh, c, script] = gpuhub_server::service::WORKSPACE_KEEP_ALIVE;
    let mut child = std::process::Command::new(sh).args([c, script]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "it waits");
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap();
    let sleep: u32 = children.split_whitespace().next().expect("the shell waits on its sleep").parse().unwrap();
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // and its sleep ends with it (gone, or a zombie until its new parent reaps it)
    let alive = || {
        std::fs::read_to_string(format!("/proc/{sleep}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    for _ in 0..100 {
        if !alive() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the shell's sleep (pid {sleep}) was left behind");
}

/// alice, whose workspace `hold` holds both GPUs, so that her job `waits` (one GPU) is queued.
async fn alice_with_one_waiting(hub: &Hub) -> String {
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut hold = job("hold", 2);
    hold["kind"] = serde_json::json!("workspace");
    hold["command"] = serde_json::json!(["sleep", "infinity"]);
    hub.submit(&alice, hold).await;
    hub.wait_state(&alice, "hold", "running").await;
    hub.submit(&alice, job("waits", 1)).await;
    hub.wait_state(&alice, "waits", "queued").await;
    alice
}

/// Issue 27 (load): a followed log of a workload that has not started answered nothing, not even its
/// header, until the workload started, which a client cannot tell from a hang. The header comes at
/// once; the body waits, and ends when the workload ends without having run.
#[tokio::test]
async fn a_followed_log_of_queued_work_answers_at_once() {
    let hub = Hub::start().await;
    let alice = alice_with_one_waiting(&hub).await;

    let send = hub.http.get(format!("{}/api/v1/workloads/waits/logs?follow=true", hub.url)).bearer_auth(&alice).send();
    let mut resp = tokio::time::timeout(std::time::Duration::from_secs(10), send)
        .await
        .expect("the header comes while the workload waits")
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    // nothing yet: it waits
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), resp.chunk()).await;
    assert!(early.is_err(), "no output before it runs: {early:?}");

    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/waits/stop", Some(&alice), None).await;
    assert!(s.is_success(), "{v}");
    let end = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut out = Vec::new();
        while let Some(c) = resp.chunk().await.unwrap() {
            out.extend_from_slice(&c);
        }
        out
    })
    .await
    .expect("the body ends once the workload ended without a run");
    assert!(end.is_empty(), "{}", String::from_utf8_lossy(&end));
}

/// Reads a log body to its end, failing the test when the connection breaks inside it.
async fn whole_body(mut resp: reqwest::Response) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(c) = resp.chunk().await.expect("the body ends cleanly, not cut inside a chunk") {
            out.extend_from_slice(&c);
        }
    });
    read.await.expect("the body ends");
    String::from_utf8(out).unwrap()
}

/// CI's Schemathesis run saw "the server declared chunked encoding but sent an invalid chunk": a log
/// whose engine stream failed part-way (its container removed under the reader) cut the connection.
/// Now the body ends with a line that says why, and cleanly.
#[tokio::test]
async fn a_log_that_fails_part_way_ends_with_a_line_that_says_why() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut w = job("talks", 0);
    w["command"] = serde_json::json!(["sleep", "infinity"]);
    hub.submit(&alice, w).await;
    hub.wait_state(&alice, "talks", "running").await;
    let run = hub.run(&alice, "talks").await;
    hub.runtime.push_log(&run, "first line\n");
    hub.runtime.push_log_failure(&run, "no such container: removed");
    hub.runtime.push_log(&run, "never read\n");

    for query in ["", "?follow=true", "?tail=983040&limit_bytes=4130850"] {
        let resp = hub
            .http
            .get(format!("{}/api/v1/workloads/talks/logs{query}", hub.url))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{query}");
        let body = whole_body(resp).await;
        assert!(body.starts_with("first line\n"), "{query}: {body}");
        assert!(body.contains("[gpuhub: the log stopped early:") && body.contains("removed"), "{query}: {body}");
        assert!(!body.contains("never read"), "{query}: {body}");
    }
}

/// A followed log of work that is deleted while it waits ends, cleanly and empty.
#[tokio::test]
async fn a_followed_log_of_work_deleted_while_it_waits_ends_cleanly() {
    let hub = Hub::start().await;
    let alice = alice_with_one_waiting(&hub).await;

    let resp = hub
        .http
        .get(format!("{}/api/v1/workloads/waits/logs?follow=true", hub.url))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let (s, v) = hub.call(Method::DELETE, "/api/v1/workloads/waits", Some(&alice), None).await;
    assert!(s.is_success(), "{v}");
    assert_eq!(whole_body(resp).await, "");
}

/// Issue 21 (newcomer-2, "the initial admin password changed at first login"): a password the server
/// generated (printed at its first start and left in `initial-admin-password`) opens nothing but its
/// own change: the API answers 403 saying how, the portal sends every page to the Account page saying
/// why; once changed, everything opens, the file is gone and nothing is required after a restart.
/// An admin password set by the operator (`GPUHUB_ADMIN_PASSWORD`, as every other test) needs no change.
#[tokio::test]
async fn a_generated_admin_password_must_be_changed_before_anything_else() {
    let hub = Hub::start_with(|c| c.admin_password = None).await;
    let file = hub.dir.path().join("data").join("initial-admin-password");
    let first = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    let token = hub.login("admin", &first).await;
    for (method, path) in
        [(Method::GET, "/api/v1/workloads"), (Method::GET, "/api/v1/users"), (Method::GET, "/api/v1/nodes")]
    {
        let (s, v) = hub.call(method, path, Some(&token), None).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("gpuhub passwd"), "{path}: {v}");
    }
    let body = serde_json::json!({"username": "bob", "password": "bob-password"});
    let (s, _) = hub.call(Method::POST, "/api/v1/users", Some(&token), Some(body.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, me) = hub.call(Method::GET, "/api/v1/me", Some(&token), None).await;
    assert_eq!((s, me["username"].as_str()), (StatusCode::OK, Some("admin")));
    let state = &hub.server.as_ref().unwrap().state;
    let kept = state.store.get_setting("password_change_required").await.unwrap();
    assert_eq!(kept.as_deref(), Some("admin"), "kept in the store, so a restart asks again");

    // the portal: every page leads to the Account page and its password form, which says why
    let http = no_redirects();
    let r = http
        .post(format!("{}/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", hub.url.as_str())
        .body(format!("username=admin&password={first}&next=%2Fworkloads"))
        .send()
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    for page in ["/workloads", "/admin/users", "/new", "/"] {
        let r = http.get(format!("{}{page}", hub.url)).header("cookie", &cookie).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{page}");
        let to = r.headers()["location"].to_str().unwrap().to_owned();
        assert!(to.starts_with("/account?error="), "{page} → {to}");
    }
    let account = http.get(format!("{}/account?error=Choose", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(account.status(), StatusCode::OK);
    assert!(account.text().await.unwrap().contains(r#"action="/account/password""#));

    // changed: everything opens, the file with the old password is gone
    let change = serde_json::json!({"current_password": first, "new_password": "a-new-admin-password"});
    let (s, v) = hub.call(Method::POST, "/api/v1/me/password", Some(&token), Some(change)).await;
    assert!(s.is_success(), "{v}");
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads", Some(&token), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = hub.call(Method::POST, "/api/v1/users", Some(&token), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert!(!file.exists(), "the generated password is not left in the data directory");
    assert_eq!(state.store.get_setting("password_change_required").await.unwrap().as_deref(), Some(""));
    assert!(!gpuhub_server::state::password_change::PasswordChange::from_setting(Some("")).required("admin"));
}

/// Where the newcomer got lost: the API answered 401 in the browser signed in to the portal, saying only
/// "send Authorization: Bearer". The API still takes tokens only (a cookie would let other sites' pages
/// call it), but with the portal's cookie the 401 says so and where a token comes from.
#[tokio::test]
async fn the_api_tells_a_signed_in_browser_it_takes_tokens() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    let body = serde_json::json!({"username": "alice", "password": "alice-password", "token": false});
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&body).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = hub.http.get(format!("{}/api/v1/me", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let v: serde_json::Value = r.json().await.unwrap();
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("not the portal's session cookie") && detail.contains("Account page"), "{v}");
    let (s, v) = hub.call(Method::GET, "/api/v1/me", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(v["detail"].as_str().unwrap().starts_with("authentication required"), "{v}");
}
