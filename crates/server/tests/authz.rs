//! The authorisation matrix: every endpoint × admin / owner / other user / anonymous, on a workload (or
//! account) that belongs to the owner. A refused call must also leave the owner's things as they were.

use gpuhub_testkit as common;

use common::{Hub, job};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Admin,
    Owner,
    Other,
    Anonymous,
}

const WHO: [Who; 4] = [Who::Admin, Who::Owner, Who::Other, Who::Anonymous];

struct Case {
    method: Method,
    /// `{w}` is replaced by a fresh workload of the owner, `{u}` by a fresh account, `{r}` by a fresh
    /// reservation, `{q}` by a fresh team queue, `{i}` by a fresh catalog image and dataset.
    path: &'static str,
    body: Option<serde_json::Value>,
    /// Expected status for admin, owner, other, anonymous.
    expect: [u16; 4],
    /// The workload must be running first (for stop).
    running: bool,
    /// The workload must be stopped first (for start).
    stopped: bool,
}

fn case(method: Method, path: &'static str, expect: [u16; 4]) -> Case {
    Case { method, path, body: None, expect, running: false, stopped: false }
}

#[tokio::test]
async fn every_endpoint_by_every_caller() {
    let hub = Hub::start_with(|c| c.scheduler.queues = vec![gpuhub_sched::QueueSpec::open("team")]).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let token = |who: Who| match who {
        Who::Admin => Some(admin.as_str()),
        Who::Owner => Some(alice.as_str()),
        Who::Other => Some(bob.as_str()),
        Who::Anonymous => None,
    };
    let new_user = |n: usize| json!({"username": format!("carol{n}"), "password": "carol-password"});
    let cases = vec![
        case(Method::GET, "/api/v1/health", [200, 200, 200, 200]),
        case(Method::GET, "/api/v1/openapi.json", [200, 200, 200, 200]),
        // no metrics token configured: the allow-list (loopback) alone decides; prometheus.rs has the rest
        case(Method::GET, "/metrics", [200, 200, 200, 200]),
        case(Method::GET, "/api/v1/me", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/me/tokens", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/me/images", [200, 200, 200, 401]),
        case(Method::DELETE, "/api/v1/me/images/none-such", [404, 404, 404, 401]),
        // the owner's own only: an admin saves nobody else's workspace
        Case {
            body: Some(json!({"as": "env"})),
            ..case(Method::POST, "/api/v1/workloads/{w}/save", [404, 201, 404, 401])
        },
        Case { body: Some(json!({"days": 1})), ..case(Method::POST, "/api/v1/me/tokens", [201, 201, 201, 401]) },
        case(Method::GET, "/api/v1/users", [200, 403, 403, 401]),
        Case { body: Some(new_user(0)), ..case(Method::POST, "/api/v1/users", [201, 403, 403, 401]) },
        case(Method::GET, "/api/v1/users/{u}", [200, 403, 403, 401]),
        Case {
            body: Some(json!({"disabled": true})),
            ..case(Method::PATCH, "/api/v1/users/{u}", [200, 403, 403, 401])
        },
        Case {
            body: Some(json!({"home_quota": "default"})),
            ..case(Method::PATCH, "/api/v1/users/{u}", [200, 403, 403, 401])
        },
        case(Method::DELETE, "/api/v1/users/{u}", [204, 403, 403, 401]),
        case(Method::GET, "/api/v1/workloads", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/workloads?all=true", [200, 403, 403, 401]),
        case(Method::GET, "/api/v1/workloads?owner=alice&state=running,queued&limit=5", [200, 200, 403, 401]),
        case(Method::GET, "/api/v1/workloads?limit=0", [400, 400, 400, 401]),
        Case { body: Some(job("", 0)), ..case(Method::POST, "/api/v1/workloads", [201, 201, 201, 401]) },
        case(Method::GET, "/api/v1/workloads/{w}", [200, 200, 404, 401]),
        case(Method::GET, "/api/v1/workloads/{w}?owner=alice", [200, 200, 404, 401]),
        case(Method::GET, "/api/v1/workloads/{w}/logs", [200, 200, 404, 401]),
        Case { running: true, ..case(Method::POST, "/api/v1/workloads/{w}/stop", [200, 200, 404, 401]) },
        Case {
            running: true,
            body: Some(json!({"hours": 1})),
            ..case(Method::POST, "/api/v1/workloads/{w}/keep", [200, 200, 404, 401])
        },
        // a running workload's priority is nobody's to change; only an admin may be told so
        Case {
            body: Some(json!({"priority": 1})),
            ..case(Method::PATCH, "/api/v1/workloads/{w}", [409, 403, 404, 401])
        },
        case(Method::GET, "/api/v1/idle", [200, 403, 403, 401]),
        Case { stopped: true, ..case(Method::POST, "/api/v1/workloads/{w}/start", [200, 200, 404, 401]) },
        case(Method::DELETE, "/api/v1/workloads/{w}", [204, 204, 404, 401]),
        case(Method::GET, "/api/v1/workloads/{w}/metrics", [200, 200, 404, 401]),
        case(Method::GET, "/api/v1/workloads/{w}/metrics?owner=alice&step=60", [200, 200, 404, 401]),
        case(Method::GET, "/api/v1/workloads/{w}/metrics?owner=alice&step=0", [400, 400, 400, 401]),
        case(Method::GET, "/api/v1/nodes", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/nodes/metrics", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/nodes/metrics?node=nowhere", [404, 404, 404, 401]),
        case(Method::GET, "/api/v1/metrics/live", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/usage", [200, 200, 200, 401]),
        case(Method::GET, "/api/v1/usage?user=alice&by=queue,model,day", [200, 200, 403, 401]),
        case(Method::GET, "/api/v1/queues", [200, 200, 200, 401]),
        Case { body: Some(json!({"name": "newq"})), ..case(Method::POST, "/api/v1/queues", [201, 403, 403, 401]) },
        Case {
            body: Some(json!({"user_limit": {"gpus": 1}, "weight": 2})),
            ..case(Method::PATCH, "/api/v1/queues/{q}", [200, 403, 403, 401])
        },
        case(Method::DELETE, "/api/v1/queues/{q}", [204, 403, 403, 401]),
        case(Method::GET, "/api/v1/reservations", [200, 200, 200, 401]),
        Case {
            body: Some(
                json!({"queue": "team", "gpus": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-01T01:00:00Z"}),
            ),
            ..case(Method::POST, "/api/v1/reservations", [201, 403, 403, 401])
        },
        case(Method::DELETE, "/api/v1/reservations/{r}", [204, 403, 403, 401]),
        case(Method::GET, "/api/v1/images", [200, 200, 200, 401]),
        case(Method::DELETE, "/api/v1/images/{i}", [204, 403, 403, 401]),
        case(Method::GET, "/api/v1/datasets", [200, 200, 200, 401]),
        Case {
            body: Some(json!({"name": "scratch", "path": env!("CARGO_MANIFEST_DIR")})),
            ..case(Method::POST, "/api/v1/datasets", [201, 403, 403, 401])
        },
        case(Method::DELETE, "/api/v1/datasets/{i}", [204, 403, 403, 401]),
        case(Method::PUT, "/api/v1/workloads/{w}", [405, 405, 405, 405]),
        case(Method::GET, "/api/v1/nothing-here", [404, 404, 404, 404]),
        Case {
            body: Some(json!({"name": "bb", "image": "busybox:latest", "description": "busybox"})),
            ..case(Method::POST, "/api/v1/images", [201, 403, 403, 401])
        },
    ];
    let mut n = 0;
    let mut failures = Vec::new();
    for c in &cases {
        for (i, who) in WHO.into_iter().enumerate() {
            n += 1;
            // a fresh workload of alice's (a workspace, so it keeps running) and a fresh account
            let wname = format!("w{n}");
            let body = json!({"name": wname, "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "1d"],
                "resources": {"cpus": 0.01, "memory": "8MiB"}});
            hub.submit(&alice, body).await;
            // always settled before `before` is taken: a workload still on its way to running would change
            // state under a refused call and look like the call's doing
            hub.wait_state(&alice, &wname, "running").await;
            if c.stopped {
                let (s, _) =
                    hub.call(Method::POST, &format!("/api/v1/workloads/{wname}/stop"), Some(&alice), None).await;
                assert_eq!(s, StatusCode::OK);
            }
            let uname = format!("dave{n}");
            let (s, _) = hub
                .call(
                    Method::POST,
                    "/api/v1/users",
                    Some(&admin),
                    Some(json!({"username": uname, "password": "dave-password"})),
                )
                .await;
            assert_eq!(s, StatusCode::CREATED);
            let before = hub.get(&alice, &wname).await;
            if c.running {
                assert_eq!(before["state"], "running", "{before}");
            }
            // a fresh one-GPU booking in a window of its own
            let rname = format!("r{n}");
            let start = chrono::DateTime::from_timestamp(2_000_000_000 + n as i64 * 86_400, 0).unwrap();
            let booking = json!({"id": rname, "queue": "team", "gpus": 1, "start": start,
                "end": start + chrono::Duration::hours(1)});
            let (s, v) = hub.call(Method::POST, "/api/v1/reservations", Some(&admin), Some(booking)).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");

            // a fresh team queue
            let qname = format!("q{n}");
            let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": qname}))).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");

            // a fresh catalog image, for its removal
            let iname = format!("i{n}");
            let image = json!({"name": iname, "image": "busybox:latest"});
            let (s, v) = hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(image)).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");
            let dataset = json!({"name": iname, "path": env!("CARGO_MANIFEST_DIR")});
            let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(dataset)).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");

            let mut path = c
                .path
                .replace("{w}", &wname)
                .replace("{u}", &uname)
                .replace("{r}", &rname)
                .replace("{q}", &qname)
                .replace("{i}", &iname);
            // admins address another user's workload by naming its owner
            if who == Who::Admin && c.path.contains("{w}") && !path.contains('?') {
                path.push_str("?owner=alice");
            }
            let mut body = c.body.clone();
            if let Some(b) = body.as_mut() {
                if b.get("name") == Some(&json!("newq")) {
                    b["name"] = json!(format!("newq{n}"));
                }
                if b.get("username").is_some() {
                    *b = new_user(n);
                }
                if b.get("start").is_some() {
                    let start = chrono::DateTime::from_timestamp(3_000_000_000 + n as i64 * 86_400, 0).unwrap();
                    b["start"] = json!(start);
                    b["end"] = json!(start + chrono::Duration::hours(1));
                }
                if b.get("kind").is_some() {
                    b["name"] = json!(format!("new{n}"));
                    b["resources"] = json!({"cpus": 0.01, "memory": "8MiB"});
                }
            }
            let (status, resp) = hub.call(c.method.clone(), &path, token(who), body).await;
            if status.as_u16() != c.expect[i] {
                failures.push(format!("{} {path} as {who:?}: got {status}, want {} ({resp})", c.method, c.expect[i]));
            }
            // a refused call changes nothing of alice's
            if !status.is_success() {
                let after = hub.get(&alice, &wname).await;
                assert_eq!(before["state"], after["state"], "{} {path} as {who:?} changed the workload", c.method);
                let (s, _) = hub.call(Method::GET, &format!("/api/v1/users/{uname}"), Some(&admin), None).await;
                assert_ne!(s, StatusCode::INTERNAL_SERVER_ERROR);
            }
        }
    }
    assert!(failures.is_empty(), "authorisation matrix mismatches:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn other_users_workloads_are_invisible() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    hub.submit(&alice, job("secret", 0)).await;
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&bob), None).await;
    assert_eq!(list, json!([]));
    // naming alice as the owner (or filtering) does not widen bob's view
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads?owner=alice", Some(&bob), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads?state=queued,running&kind=job", Some(&bob), None).await;
    assert_eq!(list, json!([]));
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads?all=true", Some(&admin), None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    // bob may use the same name for his own workload
    let v = hub.submit(&bob, job("secret", 0)).await;
    assert_eq!(v["owner"], "bob");
    // the 404 does not reveal whether alice has such a workload
    let (s1, v1) = hub.call(Method::GET, "/api/v1/workloads/secret?owner=alice", Some(&bob), None).await;
    assert_eq!(s1, StatusCode::OK);
    assert_eq!(v1["owner"], "bob");
}

#[tokio::test]
async fn disabled_users_and_revoked_tokens_are_refused() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let (s, _) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(json!({"disabled": true}))).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, v) = hub
        .call(Method::POST, "/api/v1/login", None, Some(json!({"username": "alice", "password": "alice-password"})))
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    // logout revokes the token it carries
    let (s, _) = hub.call(Method::POST, "/api/v1/logout", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = hub.call(Method::GET, "/api/v1/me", Some(&admin), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // the last admin cannot be demoted, disabled or deleted
    let admin = hub.admin().await;
    for (m, body) in [
        (Method::PATCH, Some(json!({"admin": false}))),
        (Method::PATCH, Some(json!({"disabled": true}))),
        (Method::DELETE, None),
    ] {
        let (s, v) = hub.call(m, "/api/v1/users/admin", Some(&admin), body).await;
        assert_eq!(s, StatusCode::CONFLICT, "{v}");
    }
}

#[tokio::test]
async fn session_cookie_authenticates_browsers() {
    let hub = Hub::start().await;
    let resp = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": "admin", "password": common::ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    let cookie = resp.headers().get("set-cookie").unwrap().to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_owned();
    // the cookie opens the browser pages (here: a terminal page of the admin's own workspace)…
    let admin = hub.admin().await;
    hub.submit(&admin, json!({"name": "ws", "kind": "workspace", "image": "busybox:latest"})).await;
    let page = hub.http.get(format!("{}/terminal/admin/ws/", hub.url)).header("cookie", &pair).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("xterm"));
    let forged = hub.http.get(format!("{}/terminal/admin/ws/", hub.url)).header("cookie", "gpuhub_session=forged");
    assert_eq!(forged.send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // …but never the API, which app scripts on the same origin could otherwise call in the visitor's name
    let s = hub.http.get(format!("{}/api/v1/me", hub.url)).header("cookie", &pair).send().await.unwrap();
    assert_eq!(s.status(), StatusCode::UNAUTHORIZED);
}
