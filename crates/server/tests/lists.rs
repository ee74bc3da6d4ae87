//! Lists that scale and bounded submissions: `GET /api/v1/workloads` in pages with cursors and filters,
//! and the per-user limits on how many workloads, and how large, a user may submit.

use gpuhub_testkit as common;

use chrono::{Duration, TimeZone, Utc};
use common::{Hub, job};
use gpuhub_core::workload::{Workload, WorkloadKind, WorkloadState};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// An ended workload (the controller leaves those alone) stored directly, `i` seconds after a fixed time.
fn ended(owner: &str, i: usize) -> Workload {
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::seconds((i / 3) as i64);
    let states = [WorkloadState::Succeeded, WorkloadState::Failed, WorkloadState::Stopped];
    let kind = if i % 4 == 0 { WorkloadKind::Workspace } else { WorkloadKind::Job };
    let mut w = Workload::new(format!("id-{owner}-{i:04}"), owner, format!("w{i}"), kind, "busybox:latest", at)
        .restore(states[i % 3]);
    w.command = vec!["true".into()];
    w.queue = if i % 2 == 0 { "vision".into() } else { String::new() };
    w.exit_code = Some(0);
    w.started_at = Some(at);
    w.finished_at = Some(at);
    w
}

/// A `GET` with its status, `X-Next-Cursor`, `Link` and JSON body.
async fn get_page(hub: &Hub, token: &str, path: &str) -> (StatusCode, Option<String>, Option<String>, Value) {
    let resp = hub.http.get(format!("{}{path}", hub.url)).bearer_auth(token).send().await.unwrap();
    let status = resp.status();
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let (cursor, link) = (header("x-next-cursor"), header("link"));
    if !status.is_success() {
        assert_eq!(header("content-type").as_deref(), Some("application/problem+json"), "{path}");
    }
    (status, cursor, link, resp.json().await.unwrap())
}

/// The names of every page of `path` (which has a query), following `X-Next-Cursor`; checks that the
/// `Link` header names the same next page and that only the last page lacks a cursor.
async fn all_pages(hub: &Hub, token: &str, path: &str, page_size: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut next = path.to_owned();
    loop {
        let (status, cursor, link, body) = get_page(hub, token, &next).await;
        assert_eq!(status, StatusCode::OK, "{next}: {body}");
        let page = body.as_array().expect("the body is a JSON array");
        names.extend(page.iter().map(|w| w["name"].as_str().unwrap().to_owned()));
        let Some(cursor) = cursor else {
            assert!(link.is_none());
            assert!(page.len() <= page_size);
            return names;
        };
        assert_eq!(page.len(), page_size, "{next}");
        let link = link.expect("a Link header with the cursor");
        let url = link.strip_prefix('<').and_then(|l| l.strip_suffix(">; rel=\"next\"")).expect("rel=next");
        assert!(url.ends_with(&format!("cursor={cursor}")), "{link}");
        next = url.to_owned();
        assert!(names.len() < 10_000, "the cursors never end");
    }
}

#[tokio::test]
async fn workloads_come_in_pages_with_filters() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let store = &hub.server.as_ref().unwrap().state.store;
    let mut mine = Vec::new();
    for i in 0..250 {
        let w = ended("alice", i);
        store.insert_workload(&w).await.unwrap();
        mine.push(w);
        store.insert_workload(&ended("bob", i)).await.unwrap();
    }
    let names = |ws: &[&Workload]| ws.iter().map(|w| w.name.clone()).collect::<Vec<_>>();
    let all_mine: Vec<&Workload> = mine.iter().collect();

    // no limit: the first 100, and a cursor that leads through the rest in order, each once
    let (s, cursor, _, body) = get_page(&hub, &alice, "/api/v1/workloads").await;
    assert_eq!((s, body.as_array().unwrap().len()), (StatusCode::OK, 100));
    assert!(cursor.is_some());
    assert_eq!(all_pages(&hub, &alice, "/api/v1/workloads?", 100).await, names(&all_mine));
    assert_eq!(all_pages(&hub, &alice, "/api/v1/workloads?limit=7", 7).await, names(&all_mine));
    assert_eq!(all_pages(&hub, &alice, "/api/v1/workloads?limit=1000", 1000).await, names(&all_mine));

    // filters, paged
    let keep = |f: &dyn Fn(&Workload) -> bool| names(&mine.iter().filter(|w| f(w)).collect::<Vec<_>>());
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("state=failed,stopped", keep(&|w| matches!(w.state(), WorkloadState::Failed | WorkloadState::Stopped))),
        ("state=queued", Vec::new()),
        ("kind=workspace", keep(&|w| w.kind == WorkloadKind::Workspace)),
        ("queue=vision", keep(&|w| w.queue == "vision")),
        ("queue=", keep(&|w| w.queue.is_empty())),
        (
            "state=succeeded&kind=job&queue=vision",
            keep(&|w| w.state() == WorkloadState::Succeeded && w.kind == WorkloadKind::Job && w.queue == "vision"),
        ),
        ("owner=alice", names(&all_mine)),
    ];
    for (q, want) in cases {
        let got = all_pages(&hub, &alice, &format!("/api/v1/workloads?{q}&limit=9"), 9).await;
        assert_eq!(got, want, "{q}");
    }

    // admins: everyone's, or one user's; users: only their own
    assert_eq!(all_pages(&hub, &admin, "/api/v1/workloads?all=true&limit=1000", 1000).await.len(), 500);
    let bobs = all_pages(&hub, &admin, "/api/v1/workloads?owner=bob&state=stopped", 100).await;
    assert_eq!(bobs, keep(&|w| w.state() == WorkloadState::Stopped));
    let (s, _, _, v) = get_page(&hub, &alice, "/api/v1/workloads?owner=bob").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("owner"), "{v}");
    let (s, _, _, v) = get_page(&hub, &bob, "/api/v1/workloads?all=true").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (_, _, _, v) = get_page(&hub, &admin, "/api/v1/workloads").await;
    assert_eq!(v, json!([]), "an admin's own list is their own");

    // malformed queries are problems naming the parameter
    for (q, name) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("cursor=bm9wZQ", "cursor"),
        ("cursor=%21%21", "cursor"),
        ("state=queued,sleeping", "state"),
        ("kind=vm", "kind"),
        ("colour=blue", "colour"),
    ] {
        let (s, _, _, v) = get_page(&hub, &alice, &format!("/api/v1/workloads?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(name), "{q}: {v}");
    }
}

fn limits(c: &mut gpuhub_server::config::Config) {
    c.limits.max_queued_per_user = 2;
    c.limits.max_workloads_per_user = 4;
    c.limits.max_command_bytes = 1000;
    c.limits.max_env_bytes = 1000;
    c.limits.max_apps = 2;
}

async fn count(hub: &Hub, token: &str) -> usize {
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads?limit=1000", Some(token), None).await;
    assert_eq!(s, StatusCode::OK);
    v.as_array().unwrap().len()
}

#[tokio::test]
async fn per_user_caps_on_queued_and_total_workloads() {
    let hub = Hub::start_with(limits).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    // big holds both GPUs, so the two-GPU jobs after it wait
    hub.submit(&alice, job("big", 2)).await;
    hub.wait_state(&alice, "big", "running").await;
    hub.submit(&alice, job("q1", 2)).await;
    hub.submit(&alice, job("q2", 2)).await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(job("q3", 2))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("max_queued_per_user"), "{v}");
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/q3", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "nothing is stored");
    // other users and admins are not held back by alice's count; admins have no caps
    hub.submit(&bob, job("b1", 2)).await;
    for i in 0..3 {
        hub.submit(&admin, job(&format!("a{i}"), 2)).await;
    }
    // room in the queue again once one leaves it
    let (s, _) = hub.call(Method::DELETE, "/api/v1/workloads/q1", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    hub.submit(&alice, job("q3", 2)).await;
    // queuing an ended workload again counts against the queued cap like a submission
    let store = &hub.server.as_ref().unwrap().state.store;
    store.insert_workload(&ended("alice", 1)).await.unwrap();
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/w1/start", Some(&alice), None).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("max_queued_per_user"), "{v}");
    assert_eq!(hub.get(&alice, "w1").await["state"], "failed", "nothing changed");
    // the total cap counts ended workloads too, until they are deleted
    let carol = hub.user(&admin, "carol").await;
    for i in 0..4 {
        store.insert_workload(&ended("carol", i)).await.unwrap();
    }
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&carol), Some(job("more", 0))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("max_workloads_per_user"), "{v}");
    assert_eq!(count(&hub, &carol).await, 4);
    let (s, _) = hub.call(Method::DELETE, "/api/v1/workloads/w0", Some(&carol), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    hub.submit(&carol, job("more", 0)).await;
}

#[tokio::test]
async fn oversized_submissions_are_refused_and_not_stored() {
    let hub = Hub::start_with(limits).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let with = |k: &str, v: Value| {
        let mut j = job("big", 0);
        j[k] = v;
        j
    };
    let app = |n: usize, cmd: &str| json!({"name": format!("app{n}"), "port": 8000 + n, "command": [cmd]});
    let cases = [
        (with("command", json!(["echo", "x".repeat(1000)])), "max_command_bytes"),
        (with("apps", json!([app(1, &"y".repeat(600)), app(2, &"y".repeat(600))])), "max_command_bytes"),
        (with("env", json!({"A": "v".repeat(1000)})), "max_env_bytes"),
        (with("apps", json!([app(1, "a"), app(2, "b"), app(3, "c")])), "max_apps"),
        (with("constraint", json!(format!("gpu.memory >= 1GiB{}", " && true".repeat(1000)))), "constraint"),
        (with("image", json!("i".repeat(5000))), "image"),
    ];
    for (body, limit) in cases {
        for token in [&alice, &admin] {
            let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(token), Some(body.clone())).await;
            assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
            assert!(v["detail"].as_str().unwrap().contains(limit), "{v}");
        }
    }
    // at the limits is fine
    hub.submit(&alice, with("command", json!(["x".repeat(1000)]))).await;
    // a body larger than the server reads at all (2 MiB) is refused with a problem naming the limit
    let huge = with("command", json!(["z".repeat(3 << 20)]));
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(huge)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("length limit"), "{v}");
    assert_eq!(count(&hub, &alice).await, 1);
    assert_eq!(count(&hub, &admin).await, 0);
}

/// Walks a paged list by its `X-Next-Cursor` with pages of `limit`: the items, and how many pages.
async fn walk(hub: &Hub, token: &str, path: &str, limit: u32) -> (Vec<Value>, usize) {
    let (mut items, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let mut url = format!("{}{path}?limit={limit}", hub.url);
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let resp = hub.http.get(url).bearer_auth(token).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let next = resp.headers().get("x-next-cursor").map(|v| v.to_str().unwrap().to_owned());
        if next.is_some() {
            let link = resp.headers()["link"].to_str().unwrap().to_owned();
            assert!(
                link.starts_with(&format!("<{path}?limit={limit}&cursor=")) && link.ends_with("rel=\"next\""),
                "{link}"
            );
        }
        let page: Vec<Value> = resp.json().await.unwrap();
        assert!(page.len() <= limit as usize);
        items.extend(page);
        pages += 1;
        match next {
            Some(n) => cursor = Some(n),
            None => return (items, pages),
        }
    }
}

/// Every list endpoint comes in cursor pages, not only workloads.
#[tokio::test]
async fn every_list_comes_in_pages() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    for name in ["erin", "bob", "dave", "carol", "alice"] {
        hub.user(&admin, name).await;
    }
    let (users, pages) = walk(&hub, &admin, "/api/v1/users", 2).await;
    let names: Vec<&str> = users.iter().map(|u| u["username"].as_str().unwrap()).collect();
    assert_eq!(names, ["admin", "alice", "bob", "carol", "dave", "erin"]);
    assert_eq!(pages, 3);
    // a user's tokens: one per login, oldest first, each once
    let mut tokens = Vec::new();
    for _ in 0..4 {
        tokens.push(hub.login("bob", "bob-password").await);
    }
    let (all, _) = walk(&hub, &tokens[0], "/api/v1/me/tokens", 100).await;
    let (paged, pages) = walk(&hub, &tokens[0], "/api/v1/me/tokens", 3).await;
    assert!(all.len() >= 8, "an API token and a session per login: {all:?}");
    assert_eq!(paged, all);
    assert_eq!(pages, all.len().div_ceil(3));
    // the catalog, reservations and nodes answer pages too
    for path in ["/api/v1/images", "/api/v1/reservations", "/api/v1/nodes", "/api/v1/me/ssh-keys", "/api/v1/queues"] {
        let (items, pages) = walk(&hub, &admin, path, 1).await;
        assert_eq!(pages, items.len().max(1), "{path}");
    }
    // bad page requests name the problem
    for (q, what) in [("limit=0", "invalid limit"), ("limit=5000", "invalid limit"), ("cursor=zzz", "invalid cursor")] {
        let (s, v) = hub.call(Method::GET, &format!("/api/v1/users?{q}"), Some(&admin), None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(what), "{q}: {v}");
    }
    let (s, v) = hub.call(Method::GET, "/api/v1/images?colour=red", Some(&admin), None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("colour"), "{v}");
}
