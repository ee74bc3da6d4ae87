//! Workload lifecycle through the API and the controller, on the recording fake runtime.

use gpuhub_testkit as common;

use common::{Hub, job};
use gpuhub_driver::fake::Call;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeSet;

#[tokio::test]
async fn third_gpu_job_queues_until_one_finishes() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    for n in ["a", "b", "c"] {
        hub.submit(&alice, job(n, 1)).await;
    }
    let a = hub.wait_state(&alice, "a", "running").await;
    let b = hub.wait_state(&alice, "b", "running").await;
    hub.wait_state(&alice, "c", "queued").await;
    // the reason is recorded once the scheduler has looked at it: wait on the change feed for that
    // (any other workload's change may come first)
    hub.server.as_ref().unwrap().state.controller.kick();
    let c = hub.wait_for(&alice, "c", 10, |v| v["state"] == "queued" && v["message"] != "queued").await;
    assert!(c["message"].as_str().unwrap().contains("GPU"), "{c}");
    // the scheduler's explanation: what it waits for and where it stands
    assert_eq!(c["explanation"]["reason"], "resources", "{c}");
    assert_eq!(c["explanation"]["position"], 1, "{c}");
    let held: BTreeSet<String> = [&a, &b]
        .iter()
        .flat_map(|w| w["gpus"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(held.len(), 2, "two GPUs, each held once: {a} {b}");
    // the nodes view names the holders
    let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
    let holders: Vec<_> =
        nodes[0]["gpus"].as_array().unwrap().iter().map(|g| g["holder"]["workload"].clone()).collect();
    assert!(holders.contains(&json!("a")) && holders.contains(&json!("b")), "{nodes}");

    let cid = hub.run(&alice, "a").await;
    hub.runtime.push_log(&cid, "done\n");
    hub.runtime.exit(&cid, 0);
    let a = hub.wait_state(&alice, "a", "succeeded").await;
    assert_eq!(a["exit_code"], 0);
    let c = hub.wait_state(&alice, "c", "running").await;
    assert_eq!(c["gpus"].as_array().unwrap().len(), 1);
    let c_gpu = &c["gpus"][0];
    assert!(!b["gpus"].as_array().unwrap().contains(c_gpu), "c got b's GPU: {b} {c}");
    // logs outlive the run
    let text = hub.http.get(format!("{}/api/v1/workloads/a/logs", hub.url)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(text.text().await.unwrap(), "done\n");
}

#[tokio::test]
async fn container_spec_carries_limits_user_and_labels() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(
        &alice,
        json!({"name": "t", "kind": "job", "image": "busybox:latest", "command": ["id"], "env": {"K": "V"},
               "resources": {"cpus": 1.5, "memory": "512MiB", "gpus": 1}}),
    )
    .await;
    hub.wait_state(&alice, "t", "running").await;
    let spec = hub
        .runtime
        .calls()
        .into_iter()
        .find_map(|c| match c {
            Call::Submit(s) => Some(s),
            _ => None,
        })
        .unwrap();
    assert_eq!(spec.identity.user(), "70001:70001", "alice, after the admin, from uid_range 70000-99999");
    let [member] = spec.members.as_slice() else { panic!("one member: {:?}", spec.members) };
    assert_eq!(member.cpu_milli, 1500);
    assert_eq!(member.memory_bytes, 512 << 20);
    assert_eq!(spec.env["K"], "V");
    assert_eq!(spec.labels["gpuhub.owner"], "alice");
    let network = spec.network.as_deref().unwrap();
    assert!(network.starts_with("gpuhub-") && network.ends_with("-u-alice") && network.len() > 20, "{network}");
    assert!(matches!(&member.gpus, gpuhub_driver::GpuGrant::Whole { count: 1, uuids } if uuids.len() == 1));
    let home = hub.dir.path().join("data/homes/alice");
    let meta = std::fs::metadata(&home).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!((meta.uid(), meta.mode() & 0o777), (70001, 0o700));
    assert!(meta.permissions().mode() & 0o077 == 0);
}

#[tokio::test]
async fn restart_keeps_everything_and_adopts_running_containers() {
    let mut hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, json!({"name": "ws", "kind": "workspace", "image": "busybox:latest", "resources": {"gpus": 1}}))
        .await;
    hub.submit(&alice, job("j", 1)).await;
    hub.submit(&alice, job("q", 2)).await;
    let ws = hub.wait_state(&alice, "ws", "running").await;
    hub.wait_state(&alice, "j", "running").await;
    let ws_cid = hub.run(&alice, "ws").await;
    let j_cid = hub.run(&alice, "j").await;
    hub.runtime.push_log(&j_cid, "before\nafter\n");

    // the server goes away; meanwhile the job ends
    let server = hub.server.take().unwrap();
    server.shutdown().await;
    hub.runtime.exit(&j_cid, 3);
    hub.server = None;
    hub.restart_from_nothing().await;
    let alice = hub.login("alice", "alice-password").await;

    let j = hub.wait_state(&alice, "j", "failed").await;
    assert_eq!(j["exit_code"], 3);
    let ws2 = hub.get(&alice, "ws").await;
    assert_eq!(ws2["state"], "running");
    assert_eq!(ws2["gpus"], ws["gpus"]);
    assert_eq!(hub.run(&alice, "ws").await, ws_cid, "adopted, not recreated");
    let text = hub.http.get(format!("{}/api/v1/workloads/j/logs", hub.url)).bearer_auth(&alice).send().await.unwrap();
    assert_eq!(text.text().await.unwrap(), "before\nafter\n");
    // q needs both GPUs: it stays queued while ws holds one, then runs
    assert_eq!(hub.get(&alice, "q").await["state"], "queued");
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/ws/stop", Some(&alice), None).await;
    assert_eq!((s, v["state"].clone()), (StatusCode::OK, json!("stopped")));
    hub.wait_state(&alice, "q", "running").await;
}

#[tokio::test]
async fn vanished_container_is_lost_and_workspace_restarts_with_new_container() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, json!({"name": "ws", "kind": "workspace", "image": "busybox:latest"})).await;
    hub.wait_state(&alice, "ws", "running").await;
    let cid = hub.run(&alice, "ws").await;
    hub.runtime.vanish(&cid);
    let w = hub.wait_state(&alice, "ws", "lost").await;
    assert!(w["message"].as_str().unwrap().contains("removed"), "{w}");
    let (s, _) = hub.call(Method::POST, "/api/v1/workloads/ws/start", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    hub.wait_state(&alice, "ws", "running").await;
    assert_ne!(hub.run(&alice, "ws").await, cid);
    // a running workload cannot be started again; an ended one cannot be stopped
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/ws/start", Some(&alice), None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, _) = hub.call(Method::DELETE, "/api/v1/workloads/ws", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(hub.runtime.running().is_empty());
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/ws", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_input_gets_problem_documents_naming_the_problem() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let cases = [
        (json!({"kind": "job", "image": "busybox:latest", "colour": 1}), 422, "unknown field `colour`"),
        (json!({"kind": "job", "image": "busybox:latest", "resources": {"cpus": -1}}), 422, "resources.cpus"),
        (json!({"kind": "job", "image": "busybox:latest", "resources": {"gpus": -1}}), 422, "resources.gpus"),
        (json!({"kind": "job", "image": "busybox:latest", "resources": {"memory": "lots"}}), 422, "lots"),
        (json!({"kind": "job", "image": "no-such-image:1"}), 422, "no-such-image:1"),
        (json!({"kind": "job", "image": "busybox:latest", "resources": {"gpus": 99}}), 422, "99 GPUs"),
        (json!({"kind": "batch", "image": "busybox:latest"}), 422, "kind"),
        (json!({"kind": "job", "image": "busybox:latest", "name": "Bad_Name"}), 422, "workload name"),
        (json!({"kind": "job", "image": "busybox:latest", "priority": 1000}), 422, "priority"),
        (json!({"kind": "job"}), 422, "image"),
    ];
    for (body, status, needle) in cases {
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body.clone())).await;
        assert_eq!(s.as_u16(), status, "{body}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(needle), "{body}: detail {detail:?} should name {needle:?}");
    }
    // malformed JSON is a 400
    let r = hub
        .http
        .post(format!("{}/api/v1/workloads", hub.url))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // duplicate names conflict; nothing was stored by the refused requests
    hub.submit(&alice, job("dup", 0)).await;
    let (s, _) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(job("dup", 0))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    // users: bad names and short passwords
    for (body, needle) in [
        (json!({"username": "Root!", "password": "long-enough"}), "user name"),
        (json!({"username": "eve", "password": "short"}), "password"),
        (json!({"username": "alice", "password": "long-enough"}), "exists"),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/users", Some(&admin), Some(body)).await;
        assert!(s.is_client_error(), "{v}");
        assert!(v["detail"].as_str().unwrap().contains(needle), "{v}");
    }
}

#[tokio::test]
async fn failed_logins_are_rate_limited() {
    let hub = Hub::start_with(|c| c.login_failures = 3).await;
    for _ in 0..3 {
        let (s, v) =
            hub.call(Method::POST, "/api/v1/login", None, Some(json!({"username": "admin", "password": "nope"}))).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    }
    let r = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": "admin", "password": common::ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    // unknown users are limited too, and answer like wrong passwords
    let (s, v) =
        hub.call(Method::POST, "/api/v1/login", None, Some(json!({"username": "ghost", "password": "x"}))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert_eq!(v["detail"], "invalid username or password");
}

/// The newcomer's review: on a port in use, `serve` created the first admin, printed its password, and
/// only then failed; the next start then had no password to show.
#[tokio::test]
async fn a_port_in_use_stops_the_server_before_it_makes_anything() {
    for which in ["listen", "ssh_listen"] {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = common::config(dir.path());
        cfg.admin_password = None;
        match which {
            "listen" => cfg.listen = taken.local_addr().unwrap(),
            _ => cfg.ssh_listen = taken.local_addr().unwrap(),
        }
        let e = match gpuhub_server::start(cfg, common::fake()).await {
            Ok(_) => panic!("{which}: started on a port in use"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(&taken.local_addr().unwrap().to_string()), "{which}: {e}");
        assert!(!dir.path().join("data").exists(), "{which}: the data dir was made before the port failed");
    }
}

#[tokio::test]
async fn first_start_creates_admin_with_a_secret_file() {
    use std::os::unix::fs::PermissionsExt;
    let hub = Hub::start_with(|c| c.admin_password = None).await;
    let path = hub.dir.path().join("data/initial-admin-password");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let password = std::fs::read_to_string(&path).unwrap();
    hub.login("admin", password.trim()).await;
}

#[tokio::test]
async fn openapi_documents_every_route() {
    let hub = Hub::start().await;
    let (s, doc) = hub.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    assert_eq!(s, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/login",
        "/api/v1/me",
        "/api/v1/users",
        "/api/v1/users/{name}",
        "/api/v1/workloads",
        "/api/v1/workloads/{name}",
        "/api/v1/workloads/{name}/stop",
        "/api/v1/workloads/{name}/start",
        "/api/v1/workloads/{name}/logs",
        "/api/v1/nodes",
        "/api/v1/queues",
        "/api/v1/queues/{name}",
        "/api/v1/images",
    ] {
        assert!(paths.contains_key(p), "{p} missing from the OpenAPI document");
    }
    assert!(doc["components"]["schemas"]["CreateWorkloadRequest"].is_object());
}

/// What generated clients choke on (security-2's fuzzing): a `$ref` to a component the document lacks,
/// and a query parameter declared `in: path`.
#[tokio::test]
async fn the_openapi_document_is_self_consistent() {
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let hub = Hub::start().await;
    let (_, doc) = hub.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    let mut all = Vec::new();
    refs(&doc, &mut all);
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let missing: Vec<&&str> = all
        .iter()
        .filter(|r| r.strip_prefix("#/components/schemas/").is_none_or(|name| !schemas.contains_key(name)))
        .collect();
    assert!(missing.is_empty(), "references to nothing: {missing:?}");
    let mut misplaced = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let (name, place) = (p["name"].as_str().unwrap(), p["in"].as_str().unwrap());
                if (place == "path") != path.contains(&format!("{{{name}}}")) {
                    misplaced.push(format!("{method} {path}: {name} in {place}"));
                }
            }
        }
    }
    assert!(misplaced.is_empty(), "parameters in the wrong place: {misplaced:#?}");
}

#[tokio::test]
async fn servers_sharing_an_engine_leave_each_others_containers_alone() {
    let a = Hub::start().await;
    let admin = a.admin().await;
    let alice = a.user(&admin, "alice").await;
    a.submit(&alice, json!({"name": "ws", "kind": "workspace", "image": "busybox:latest"})).await;
    a.wait_state(&alice, "ws", "running").await;
    let cid = a.run(&alice, "ws").await;

    // a second installation on the same engine, with its own database
    let dir = tempfile::tempdir().unwrap();
    let b = gpuhub_server::start(common::config(dir.path()), a.runtime.clone()).await.unwrap();
    // a command is answered only after the controller's first reconciliation has run
    assert!(b.state.controller.start("no-such-id").await.is_err());
    assert!(a.runtime.running().contains(&cid), "the other server removed or stopped our container");
    assert!(!a.runtime.calls().iter().any(|c| matches!(c, Call::Remove(id) | Call::Cancel(id) if id == &cid)));
    b.shutdown().await;
    assert_eq!(a.get(&alice, "ws").await["state"], "running");
}

/// An app's process learns where the hub serves it (`GPUHUB_BASE_URL`) and its port.
#[tokio::test]
async fn apps_get_their_base_url() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut body = job("nb", 0);
    body["kind"] = json!("workspace");
    body["command"] = json!(["sleep", "infinity"]);
    body["apps"] = json!([{"name": "lab", "port": 8888, "command": ["serve", "--port={port}"]}]);
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "nb", "running").await;
    let execs = || {
        hub.runtime
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Exec(_, spec) => Some(spec),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // the controller starts apps before it records the workload as running
    let spec = execs().pop().expect("the app was started");
    assert_eq!(spec.env["GPUHUB_BASE_URL"], "/w/alice/nb/lab/");
    assert_eq!(spec.env["GPUHUB_PORT"], "8888");
    assert_eq!(spec.user, "70001:70001");
}

/// A burst of engine events is handled before one scheduling pass, not with a pass after each: 60
/// containers exiting at once cost a handful of passes, and every workload still ends right.
#[tokio::test]
async fn a_burst_of_exits_costs_a_few_passes() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let n = 60;
    let names: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    for name in &names {
        let mut j = job(name, 0);
        j["resources"] = json!({"cpus": 0.1, "memory": "64MiB"});
        hub.submit(&admin, j).await;
    }
    let mut containers = Vec::new();
    for name in &names {
        hub.wait_state(&admin, name, "running").await;
        containers.push(hub.run(&admin, name).await);
    }
    let controller = &hub.server.as_ref().unwrap().state.controller;
    let before = controller.passes();
    for (i, c) in containers.iter().enumerate() {
        hub.runtime.exit(c, i as i64 % 2);
    }
    for (i, name) in names.iter().enumerate() {
        let v = hub.wait_state(&admin, name, if i % 2 == 0 { "succeeded" } else { "failed" }).await;
        assert_eq!(v["exit_code"], i % 2, "{v}");
    }
    let passes = controller.passes() - before;
    assert!(passes <= n / 6, "{passes} scheduling passes for a burst of {n} exits");
}

/// A workload whose start finds the engine unreachable (a dockerd restart) is not failed: nothing ran,
/// so it waits in the queue again and starts, once, when the engine answers.
#[tokio::test]
async fn a_start_while_the_engine_is_down_waits_in_the_queue() {
    let hub = Hub::start_with(|c| c.reconcile_secs = 1).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("big", 2)).await;
    hub.wait_state(&alice, "big", "running").await;
    hub.submit(&alice, job("next", 2)).await;
    let big = hub.run(&alice, "big").await;
    hub.runtime.set_down(true);
    let mut changes = hub.server.as_ref().unwrap().state.controller.changes();
    hub.runtime.exit(&big, 0);
    // big's end frees the GPUs; the pass that follows cannot reach the engine to start next
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = hub.get(&alice, "next").await;
        if v["message"].as_str().unwrap_or_default().contains("queued again: container engine unavailable") {
            assert_eq!(v["state"], "queued", "{v}");
            break;
        }
        tokio::time::timeout_at(deadline, changes.recv()).await.expect("next was not queued again").unwrap();
    }
    assert_eq!(hub.get(&alice, "big").await["state"], "succeeded");
    hub.runtime.set_down(false);
    hub.wait_state(&alice, "next", "running").await;
    let creates =
        hub.runtime.calls().iter().filter(|c| matches!(c, Call::Submit(s) if s.name.contains("next"))).count();
    assert_eq!(creates, 1, "started once");
}

/// A preempted run whose container exits while the server is down is queued again after the restart
/// (its typed reason decides), not marked failed; a gang member that died meanwhile fails its gang.
#[tokio::test]
async fn what_ended_while_the_server_was_down_follows_its_typed_reason() {
    let mut hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("victim", 1)).await;
    let mut gang = job("gang", 0);
    gang["members"] = json!(2);
    hub.submit(&alice, gang).await;
    let v = hub.wait_state(&alice, "victim", "running").await;
    hub.wait_state(&alice, "gang", "running").await;
    let (victim_run, gang_run) = (hub.run(&alice, "victim").await, hub.run(&alice, "gang").await);

    // the preemption was recorded, then the server went away before the run had stopped
    let server = hub.server.take().unwrap();
    let store = server.state.store.clone();
    let mut w = store.get_workload_by_id(v["id"].as_str().unwrap()).await.unwrap();
    let at = chrono::Utc::now();
    let reason = gpuhub_core::stop::StopReason::Preempted {
        by: "bob/urgent".into(),
        queue: "vision".into(),
        at,
        detail: "vision reclaims its guarantee".into(),
    };
    w.apply(gpuhub_core::lifecycle::Event::StopRequested { reason }, at).unwrap();
    store.update_workload(&w).await.unwrap();
    server.shutdown().await;
    hub.runtime.exit(&victim_run, 143);
    hub.runtime.exit_member(&gang_run, 1, 9);
    hub.restart_from_nothing().await;
    let alice = hub.login("alice", "alice-password").await;

    // queued again in its old place, and (its GPU being free) started again on a new run: never failed
    let old = v["members"][0]["engine_id"].clone();
    let victim =
        hub.wait_for(&alice, "victim", 10, |w| w["state"] == "running" && w["members"][0]["engine_id"] != old).await;
    assert_ne!(hub.run(&alice, "victim").await, victim_run, "a new run: {victim}");
    assert!(victim["exit_code"].is_null() && victim.get("interruption").is_none(), "{victim}");
    assert_eq!(victim["created_at"], v["created_at"]);
    let gang = hub.wait_state(&alice, "gang", "failed").await;
    assert_eq!(gang["exit_code"], 9, "the gang fails with its member's code: {gang}");
    let codes: Vec<_> = gang["members"].as_array().unwrap().iter().map(|m| m["exit_code"].clone()).collect();
    assert_eq!(codes, [json!(137), json!(9)], "member 0 was stopped because member 1 died: {gang}");
}

/// The newcomer's review: the SSH host key was published nowhere, so users had to accept it blindly.
/// The server says it (with its fingerprint) in `/api/v1/info` and on the account page.
#[tokio::test]
async fn the_ssh_host_key_is_published() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let (s, info) = hub.call(Method::GET, "/api/v1/info", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{info}");
    let key = gpuhub_ssh::load_or_generate_host_key(&hub.dir.path().join("data/ssh_host_ed25519_key")).unwrap();
    let public = key.public_key();
    assert_eq!(info["ssh_host_key"], gpuhub_ssh::openssh_line(public), "{info}");
    assert_eq!(info["ssh_host_key_fingerprint"], gpuhub_ssh::fingerprint(public), "{info}");
    assert!(info["ssh_host_key_fingerprint"].as_str().unwrap().starts_with("SHA256:"));
    // the account page shows it
    let r = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": "alice", "password": "alice-password"}));
    let r = r.send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let page = hub
        .http
        .get(format!("{}/account", hub.url))
        .header("cookie", cookie)
        .header("sec-fetch-mode", "navigate")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(&gpuhub_ssh::fingerprint(public)), "{page}");
    assert!(page.contains(&gpuhub_ssh::openssh_line(public)), "{page}");
}

/// The newcomer's review: every browser login made a 30-day API token that logging out left valid. The
/// login page asks for a session only (`"token": false`); the CLI still gets its token.
#[tokio::test]
async fn a_browser_login_makes_a_session_only() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let before = token_kinds(&hub, &alice).await;
    let body = json!({"username": "alice", "password": "alice-password", "token": false});
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["set-cookie"].to_str().unwrap().starts_with("gpuhub_session="));
    let v: Value = r.json().await.unwrap();
    assert!(v.get("token").is_none(), "{v}");
    assert_eq!(v["username"], "alice");
    let after = token_kinds(&hub, &alice).await;
    let api = |k: &[String]| k.iter().filter(|t| *t == "api").count();
    assert_eq!(api(&after), api(&before), "no API token was made: {before:?} → {after:?}");
    assert_eq!(after.len(), before.len() + 1, "one session was: {before:?} → {after:?}");
    // the CLI's login (no "token" field) still gets a token
    let (s, v) = hub
        .call(Method::POST, "/api/v1/login", None, Some(json!({"username": "alice", "password": "alice-password"})))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["token"].as_str().is_some_and(|t| t.starts_with("gpuhub_pat_")), "{v}");
}

/// The kinds of the tokens of `token`'s account, sorted.
async fn token_kinds(hub: &Hub, token: &str) -> Vec<String> {
    let (_, v) = hub.call(Method::GET, "/api/v1/me/tokens", Some(token), None).await;
    let mut k: Vec<String> = v.as_array().unwrap().iter().map(|t| t["kind"].as_str().unwrap().to_owned()).collect();
    k.sort();
    k
}

/// The nodes' view is kept between requests (each one read every running workload: 196 ms at 10,000
/// workloads) and made again once the controller announces a change: never stale after a start or a stop
/// a client has seen.
#[tokio::test]
async fn the_nodes_view_follows_every_start_and_stop() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let holders = |nodes: &Value| -> Vec<Value> {
        nodes[0]["gpus"].as_array().unwrap().iter().map(|g| g["holder"]["workload"].clone()).collect()
    };
    let (_, before) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
    assert!(holders(&before).iter().all(Value::is_null), "{before}");
    for round in 0..3 {
        let name = format!("g{round}");
        let mut w = job(&name, 1);
        w["command"] = json!(["sleep", "infinity"]);
        hub.submit(&alice, w).await;
        hub.wait_state(&alice, &name, "running").await;
        let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
        assert!(holders(&nodes).contains(&json!(name)), "round {round}: {nodes}");
        let (s, v) = hub.call(Method::POST, &format!("/api/v1/workloads/{name}/stop"), Some(&alice), None).await;
        assert!(s.is_success(), "{v}");
        hub.wait_state(&alice, &name, "stopped").await;
        let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
        assert!(holders(&nodes).iter().all(Value::is_null), "round {round}: {nodes}");
    }
}
