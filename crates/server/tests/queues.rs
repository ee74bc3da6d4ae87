//! Team queues kept in the database and edited by admins through the API, without a restart: the
//! configuration file seeds them once, a raised limit starts held work, and the database wins over
//! the file on a restart.

use gpuhub_testkit as common;

use common::{Hub, job};
use gpuhub_sched::{QueueSpec, Quota};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn team(cfg: &mut gpuhub_server::config::Config) {
    cfg.scheduler.queues =
        vec![QueueSpec { user_limit: Some(Quota { gpu_milli: 1000, ..Quota::UNLIMITED }), ..QueueSpec::open("team") }];
}

fn in_team(name: &str) -> Value {
    let mut j = job(name, 1);
    j["queue"] = json!("team");
    j
}

async fn queue(hub: &Hub, token: &str, name: &str) -> Value {
    let (s, v) = hub.call(Method::GET, "/api/v1/queues", Some(token), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v.as_array().unwrap().iter().find(|q| q["name"] == name).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_raised_user_limit_starts_held_work_without_a_restart() {
    let hub = Hub::start_with(team).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut a1 = in_team("a1");
    a1["runtime_limit"] = json!("1h");
    hub.submit(&alice, a1).await;
    let a1 = hub.wait_state(&alice, "a1", "running").await;
    hub.submit(&alice, in_team("a2")).await;
    // a GPU is free, but alice's limit in the queue is one GPU: a2 waits, saying so
    let a2 = explained(&hub, &alice, "a2", |_| true).await;
    assert_eq!(a2["state"], "queued");
    assert_eq!(a2["explanation"]["reason"], "queue-limit", "{a2}");
    // a1 ends within its 1h limit at the latest: that is when a2 can start
    let started = chrono::DateTime::parse_from_rfc3339(a1["started_at"].as_str().unwrap()).unwrap();
    let estimate = a2["explanation"]["estimated_start"].as_str().expect("an estimated start");
    let estimate = chrono::DateTime::parse_from_rfc3339(estimate).unwrap();
    assert_eq!(estimate.timestamp(), (started + chrono::Duration::hours(1)).timestamp(), "{a2}");

    let (s, v) =
        hub.call(Method::PATCH, "/api/v1/queues/team", Some(&admin), Some(json!({"user_limit": {"gpus": 2}}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["user_limit"], json!({"gpus": 2.0}));
    hub.wait_state(&alice, "a2", "running").await;
    assert_eq!(queue(&hub, &alice, "team").await["used"]["gpus"], 2.0);
}

/// `name` once its explanation satisfies `ok`, waiting on the change feed (kicking passes).
async fn explained(hub: &Hub, token: &str, name: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let server = hub.server.as_ref().unwrap();
    let mut changes = server.state.controller.changes();
    for _ in 0..50 {
        let v = hub.get(token, name).await;
        if v["explanation"].is_object() && ok(&v["explanation"]) {
            return v;
        }
        server.state.controller.kick();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), changes.recv()).await;
    }
    panic!("{name} never got the explanation expected: {}", hub.get(token, name).await)
}

#[tokio::test]
async fn work_a_lowered_limit_makes_impossible_says_so() {
    let hub = Hub::start_with(|c| c.scheduler.queues = vec![QueueSpec::open("team")]).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("hold", 1)).await;
    hub.wait_state(&alice, "hold", "running").await;
    let mut big = in_team("big");
    big["resources"]["gpus"] = json!(2);
    hub.submit(&alice, big).await;
    explained(&hub, &alice, "big", |e| e["reason"] == "resources").await;
    // the queue may now hold one GPU at most: big can never start, and says which part
    let patch = json!({"guarantee": {"gpus": 1}, "borrow_limit": {"gpus": 0}});
    let (s, v) = hub.call(Method::PATCH, "/api/v1/queues/team", Some(&admin), Some(patch)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let v = explained(&hub, &alice, "big", |e| e["reason"] == "unschedulable").await;
    let msg = v["explanation"]["message"].as_str().unwrap();
    assert!(msg.starts_with("can never start here: queue team may never hold this much"), "{v}");
    // the pass publishes its explanations before it writes the waiting messages: ps follows
    let v = hub.wait_for(&alice, "big", 10, |v| v["message"] == v["explanation"]["message"]).await;
    assert_eq!(v["message"], msg, "ps shows the same: {v}");
}

#[tokio::test]
async fn a_constraint_no_gpu_meets_is_named() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut j = job("h100", 1);
    j["constraint"] = json!("gpu.model == \"H100\" && gpu.memory >= 80GiB");
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(j)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("no GPU here meets its constraint `gpu.model == \"H100\""), "{v}");
    assert!(detail.contains("(GPUs here: 2× H200 141GiB)"), "{v}");
}

#[tokio::test]
async fn the_database_wins_over_the_file_on_restart() {
    let mut hub = Hub::start_with(team).await;
    let admin = hub.admin().await;
    let (s, v) = hub
        .call(Method::PATCH, "/api/v1/queues/team", Some(&admin), Some(json!({"user_limit": null, "weight": 3})))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // a restart with the same file (which still says one GPU per user) keeps the admin's edit
    hub.server.take().unwrap().shutdown().await;
    let mut cfg = common::config(hub.dir.path());
    team(&mut cfg);
    cfg.scheduler.queues.push(QueueSpec::open("later"));
    let server = gpuhub_server::start(cfg, hub.runtime.clone()).await.unwrap();
    hub.url = format!("http://{}", server.addr);
    hub.server = Some(server);
    let admin = hub.admin().await;
    let q = queue(&hub, &admin, "team").await;
    assert_eq!((q["weight"].as_f64(), q.get("user_limit")), (Some(3.0), None), "{q}");
    // a queue added to the file after the first start is not created behind the admins' backs
    assert_eq!(queue(&hub, &admin, "later").await, Value::Null);
}

#[tokio::test]
async fn create_edit_and_delete_with_checks() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let call = |method: Method, path: &'static str, body: Option<Value>| hub.call(method, path, Some(&admin), body);
    // no queue "vision" yet: submitting to it is refused
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(with_queue("v1", "vision"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let body = json!({"name": "vision", "guarantee": {"gpus": 1}, "user_limit": {"gpus": 1, "memory": "4GiB"},
        "members": ["alice"]});
    let (s, v) = call(Method::POST, "/api/v1/queues", Some(body.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["user_limit"], json!({"gpus": 1.0, "memory": "4GiB"}));
    let (s, v) = call(Method::POST, "/api/v1/queues", Some(body)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    // members-only: alice may use it, and does
    assert_eq!(queue(&hub, &alice, "vision").await["open_to_you"], true);
    hub.submit(&alice, with_queue("v1", "vision")).await;

    // validation names the field; unknown fields and unknown queues are refused
    for (body, field) in [
        (json!({"user_limit": {"gpus": -1}}), "user_limit.gpus"),
        (json!({"weight": 0}), "weight"),
        (json!({"priority_classes": ["gold"]}), "priority_classes"),
        (json!({"members": ["Bad Name"]}), "members"),
    ] {
        let (s, v) = call(Method::PATCH, "/api/v1/queues/vision", Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v["detail"].as_str().unwrap().contains(&format!("invalid {field}")), "{field}: {v}");
    }
    let (s, v) = call(Method::PATCH, "/api/v1/queues/vision", Some(json!({"user_limits": {}}))).await;
    assert!(s.is_client_error(), "{s} {v}");
    assert!(v["detail"].as_str().unwrap().contains("user_limits"), "{v}");
    let (s, _) = call(Method::PATCH, "/api/v1/queues/nope", Some(json!({"weight": 2}))).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // a partial patch leaves the rest as it was
    let (s, v) = call(Method::PATCH, "/api/v1/queues/vision", Some(json!({"user_limit": {"memory": null}}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!((v["user_limit"].clone(), v["guarantee"]["gpus"].clone()), (json!({"gpus": 1.0}), json!(1.0)));

    // not while it holds work
    let (s, v) = call(Method::DELETE, "/api/v1/queues/vision", None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    hub.wait_state(&alice, "v1", "running").await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/v1/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (v["interruption"]["reason"].as_str(), v["interruption"]["by"].as_str()),
        (Some("user"), Some("alice")),
        "{v}"
    );
    hub.wait_state(&alice, "v1", "stopped").await;
    let (s, v) = call(Method::DELETE, "/api/v1/queues/vision", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, _) = call(Method::DELETE, "/api/v1/queues/vision", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(with_queue("v2", "vision"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
}

fn with_queue(name: &str, q: &str) -> Value {
    let mut j = job(name, 0);
    j["queue"] = json!(q);
    j
}

/// The queues' figures and the nodes' holders come from the active workloads kept between requests
/// (`AppState::active`): a submission, a start, a stop, a start again and a deletion are each seen on
/// the next request.
#[tokio::test]
async fn the_kept_workloads_follow_every_submission_start_stop_and_deletion() {
    let hub = Hub::start_with(team).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let counts = |q: Value| (q["running"].as_u64().unwrap(), q["queued"].as_u64().unwrap());
    let holders = |nodes: Value| -> Vec<Value> {
        nodes[0]["gpus"].as_array().unwrap().iter().map(|g| g["holder"]["workload"].clone()).collect()
    };
    let nodes = || async { hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await.1 };
    let act = |name: &'static str, what: &'static str| {
        let (hub, alice) = (&hub, &alice);
        async move {
            let (method, path) = match what {
                "delete" => (Method::DELETE, format!("/api/v1/workloads/{name}")),
                _ => (Method::POST, format!("/api/v1/workloads/{name}/{what}")),
            };
            let (s, v) = hub.call(method, &path, Some(alice), None).await;
            assert!(s.is_success(), "{what} {name}: {s} {v}");
        }
    };
    // read once before anything is submitted: what follows changes what is kept
    assert!(!dashboard(&hub).await.contains("class=\"queue-waits\""), "nothing waited yet");
    assert_eq!(counts(queue(&hub, &alice, "team").await), (0, 0));
    assert!(holders(nodes().await).iter().all(Value::is_null));
    let mut a1 = in_team("a1");
    a1["command"] = json!(["sleep", "infinity"]);
    hub.submit(&alice, a1).await;
    let (running, queued) = counts(queue(&hub, &alice, "team").await);
    assert_eq!(running + queued, 1, "the submission is counted at once");
    hub.wait_state(&alice, "a1", "running").await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (1, 0));
    assert!(holders(nodes().await).contains(&json!("a1")));
    // alice's limit in the queue is one GPU: a2 waits
    let mut a2 = in_team("a2");
    a2["command"] = json!(["sleep", "infinity"]);
    hub.submit(&alice, a2).await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (1, 1), "a second submission");
    act("a2", "stop").await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (1, 0), "a stop");
    act("a2", "start").await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (1, 1), "a start again");
    act("a1", "delete").await;
    let (running, queued) = counts(queue(&hub, &alice, "team").await);
    assert_eq!(running + queued, 1, "a deletion");
    assert!(!holders(nodes().await).contains(&json!("a1")));
    hub.wait_state(&alice, "a2", "running").await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (1, 0));
    act("a2", "stop").await;
    assert_eq!(counts(queue(&hub, &alice, "team").await), (0, 0), "the last stop");
    assert!(holders(nodes().await).iter().all(Value::is_null));
    // the admin's dashboard shows what waited per team queue: a2 started once, after waiting (a1, deleted,
    // is gone from the histories)
    let page = dashboard(&hub).await;
    let row = page
        .split("<table class=\"queue-waits\">")
        .nth(1)
        .expect("the queues' table")
        .split("</table>")
        .next()
        .unwrap();
    assert!(row.contains("data-queue=\"team\""), "{row}");
    assert!(!row.contains("data-queue=\"default\""), "nothing ran in the default queue: {row}");
    assert!(row.contains("data-starts=\"1\""), "{row}");
}

/// The admin's dashboard page.
async fn dashboard(hub: &Hub) -> String {
    let login = json!({"username": "admin", "password": common::ADMIN_PASSWORD});
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&login).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = hub.http.get(format!("{}/admin/dashboard", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.text().await.unwrap()
}
