//! Services (`"kind": "service"`): kept running, started again with a doubling backoff (read through
//! the clock seam) when their run ends by itself, in crash-loop after five quick failures, served
//! through the hub's proxy once ready. On the recording fake engine, then end to end on this machine's
//! Docker with busybox's `httpd`.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Utc};
use common::{ADMIN_PASSWORD, Hub, config};
use gpuhub_controller::clock::{Clock, ManualClock};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

const IMAGE: &str = "gpuhub/busybox:latest";

fn service(name: &str, command: &[&str], extra: Value) -> Value {
    let mut v = json!({"name": name, "kind": "service", "image": "busybox:latest", "command": command,
        "resources": {"cpus": 0.1, "memory": "64MiB"}, "service": {"port": 8080}});
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

/// A hub on `engine` whose controller reads `clock`.
async fn hub_on(engine: Arc<dyn gpuhub_driver::Engine>, clock: Arc<ManualClock>, docker: bool) -> Hub {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    if docker {
        cfg.gpu_mode = gpuhub_server::config::GpuMode::None;
        cfg.stop_grace_secs = 1;
    }
    let seams = gpuhub_server::Seams { clock, ..Default::default() };
    let server = gpuhub_server::start_with(cfg, engine, seams).await.unwrap();
    Hub::from_server(server, common::fake(), dir)
}

fn kick(hub: &Hub) {
    hub.server.as_ref().unwrap().state.controller.kick();
}

#[tokio::test]
async fn service_requests_are_checked() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let cases = [
        (json!({"name": "s", "kind": "service", "image": "busybox:latest"}), "a service names the port"),
        (json!({"name": "s", "kind": "job", "image": "busybox:latest", "service": {"port": 80}}), "not a job"),
        (service("s", &["true"], json!({"service": {"port": 0}})), "service.port"),
        (service("s", &["true"], json!({"service": {"port": 80, "ready": {"http": "x"}}})), "not a path"),
        (service("s", &["true"], json!({"service": {"port": 80, "access": "public"}})), "needs apps_domain"),
        (service("s", &["true"], json!({"members": 2})), "a service has one member"),
        (service("s", &["true"], json!({"apps": [{"name": "service", "port": 1}]})), "the service's own app"),
        (service("s", &["true"], json!({"service": {"port": 80, "colour": 1}})), "colour"),
    ];
    for (body, want) in cases {
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&admin), Some(body.clone())).await;
        assert!(s.is_client_error(), "{body}: {s} {v}");
        assert!(v["detail"].as_str().unwrap_or_default().contains(want), "{body}: want {want:?} in {v}");
    }
}

#[tokio::test]
async fn a_service_is_restarted_with_backoff_enters_crash_loop_and_stops_when_asked() {
    let t0: DateTime<Utc> = Utc::now();
    let clock = Arc::new(ManualClock::new(t0));
    let engine = common::fake();
    let hub = hub_on(engine.clone(), clock.clone(), false).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let v = hub.submit(&alice, service("web", &["httpd", "-f", "-p", "8080"], json!({}))).await;
    assert_eq!((&v["kind"], &v["restarts"]), (&json!("service"), &json!(0)), "{v}");
    assert_eq!(v["service"]["url"], "/w/alice/web/service/", "{v}");
    assert_eq!(v["service"]["ready_check"], json!({"http": "/"}), "{v}");
    hub.wait_state(&alice, "web", "running").await;

    // each exit: queued again, not started before its backoff, started after it
    let mut backoff = 10;
    for i in 1..=5u64 {
        let run = hub.run(&alice, "web").await;
        engine.exit(&run, 1);
        let v = hub.wait_for(&alice, "web", 10, |v| v["restarts"] == json!(i)).await;
        assert_eq!(v["state"], "queued", "{v}");
        let restart_at: DateTime<Utc> = v["service"]["restart_at"].as_str().unwrap().parse().unwrap();
        assert_eq!(restart_at - clock.now(), TimeDelta::seconds(backoff), "{v}");
        if i < 5 {
            let wait = gpuhub_core::Seconds(backoff as u64);
            assert_eq!(v["message"], format!("exited with code 1; restarting in {wait} (restart {i})"), "{v}");
            assert_eq!(v["service"]["crash_loop"], false, "{v}");
        } else {
            assert_eq!(v["message"], "crash-loop: exited with code 1, 5 times in a row; restarting in 2m40s", "{v}");
            assert_eq!(v["service"]["crash_loop"], true, "{v}");
        }
        // a pass before the backoff has passed starts nothing
        clock.advance(TimeDelta::seconds(backoff - 1));
        hub.full_pass().await;
        let v = hub.get(&alice, "web").await;
        assert_eq!(v["state"], "queued", "{v}");
        clock.advance(TimeDelta::seconds(1));
        kick(&hub);
        let v = hub.wait_for(&alice, "web", 10, |v| v["state"] == "running").await;
        assert_ne!(hub.run(&alice, "web").await, run, "a new run: {v}");
        backoff *= 2;
    }
    // still in crash-loop while running again; its history shows each restart
    let v = hub.get(&alice, "web").await;
    assert_eq!((&v["restarts"], &v["service"]["crash_loop"]), (&json!(5), &json!(true)), "{v}");
    let queued = v["history"].as_array().unwrap().iter().filter(|e| e["state"] == "queued").count();
    assert_eq!(queued, 6, "submitted, then queued again five times: {v}");
    // a stop by its owner ends it: no restart follows
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/web/stop", Some(&alice), None).await;
    assert_eq!((s, &v["state"]), (StatusCode::OK, &json!("stopped")), "{v}");
    clock.advance(TimeDelta::minutes(10));
    hub.full_pass().await;
    let v = hub.get(&alice, "web").await;
    assert_eq!((&v["state"], &v["restarts"]), (&json!("stopped"), &json!(5)), "{v}");
    // started again by its owner, it starts at once, its failures forgotten
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/web/start", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let v = hub.wait_state(&alice, "web", "running").await;
    assert_eq!(v["service"]["crash_loop"], false, "{v}");
}

/// On this machine's Docker: busybox's `httpd` as a service answers through the hub's proxy once ready;
/// its process killed, it is started again (restarts 1) and answers again; a command that exits at
/// once is in crash-loop after five tries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_docker_a_killed_service_is_restarted_and_one_that_exits_at_once_crash_loops() {
    let rt = gpuhub_docker::DockerRuntime::connect().await.expect("a docker engine on this machine (docker info)");
    let docker_engine = gpuhub_docker::DockerEngine::new(rt, common::node(0), gpuhub_docker::GpuMode::None);
    let t0: DateTime<Utc> = Utc::now();
    let clock = Arc::new(ManualClock::new(t0));
    let hub = hub_on(Arc::new(docker_engine), clock.clone(), true).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let script = "mkdir -p /tmp/www && echo hello from web > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www";
    let body = with_image(service(
        "web",
        &["sh", "-c", script],
        json!({"service": {"port": 8080, "ready": {"http": "/index.html"}}}),
    ));
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "web", "running").await;
    let ready = until_ready(&hub, &alice, "web").await;
    assert_eq!(ready["restarts"], 0, "{ready}");
    assert_eq!(proxied(&hub, &alice, "/w/alice/web/service/").await, "hello from web\n");
    // another user may not reach an owner-only service
    let bob = hub.user(&admin, "bob").await;
    let resp = hub.http.get(format!("{}/w/alice/web/service/", hub.url)).bearer_auth(&bob).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    // kill its process (SIGKILL to httpd, the container's main process under its init)
    let container = hub.run(&alice, "web").await;
    let killed = std::process::Command::new("docker")
        .args(["exec", &container, "sh", "-c", "kill -9 $(pidof httpd)"])
        .status()
        .unwrap();
    assert!(killed.success());
    // an exit with a kill code gpuhub did not ask for is held for the engine-restart margin (15s, by the
    // controller's clock) before it counts as the run's own: move the clock on until it does
    let mut restarted = None;
    for _ in 0..30 {
        clock.advance(TimeDelta::seconds(16));
        kick(&hub);
        restarted = changed_within(&hub, &alice, "web", 1, |v| v["restarts"] == json!(1)).await;
        if restarted.is_some() {
            break;
        }
    }
    let v = restarted.expect("restarted after its kill");
    assert_eq!(v["state"], "queued", "{v}");
    assert!(v["message"].as_str().unwrap().contains("exited with code 137; restarting in 10s (restart 1)"), "{v}");
    clock.advance(TimeDelta::seconds(10));
    kick(&hub);
    hub.wait_state(&alice, "web", "running").await;
    until_ready(&hub, &alice, "web").await;
    assert_eq!(proxied(&hub, &alice, "/w/alice/web/service/").await, "hello from web\n");
    assert_eq!(hub.get(&alice, "web").await["restarts"], 1);

    // readiness by a command run in it: not ready until the file it tests is there
    let ready_cmd = json!({"service": {"port": 8080, "ready": {"command": ["test", "-f", "/tmp/ready"]}}});
    let script = "sleep 5; touch /tmp/ready; exec sleep 600";
    hub.submit(&alice, with_image(service("cmd", &["sh", "-c", script], ready_cmd))).await;
    let v = hub.wait_state(&alice, "cmd", "running").await;
    let first = hub.get(&alice, "cmd").await;
    assert_eq!(first["service"]["ready"], false, "{v}");
    until_ready(&hub, &alice, "cmd").await;

    // a service that exits at once: five quick failures and it says crash-loop
    hub.submit(&alice, with_image(service("flaky", &["sh", "-c", "exit 3"], json!({})))).await;
    for i in 1..=5u64 {
        let v = hub.wait_for(&alice, "flaky", 30, |v| v["restarts"] == json!(i)).await;
        assert_eq!(v["state"], "queued", "{v}");
        if i < 5 {
            assert_eq!(v["service"]["crash_loop"], false, "{v}");
            clock.advance(TimeDelta::seconds(300));
            kick(&hub);
        }
    }
    let v = hub.get(&alice, "flaky").await;
    assert_eq!(v["service"]["crash_loop"], true, "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("crash-loop: exited with code 3, 5 times in a row"), "{v}");
    for name in ["web", "cmd", "flaky"] {
        let (s, _) = hub.call(Method::DELETE, &format!("/api/v1/workloads/{name}"), Some(&alice), None).await;
        assert_eq!(s, StatusCode::NO_CONTENT);
    }
}

fn with_image(mut v: Value) -> Value {
    v["image"] = json!(IMAGE);
    v
}

/// Waits (at most 30s) until `name`'s readiness check passes; the check is made when its view is read.
async fn until_ready(hub: &Hub, token: &str, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let v = hub.get(token, name).await;
        if v["service"]["ready"] == json!(true) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} not ready within 30s: {v}");
        // nothing signals readiness (it is the service's own): the check itself takes up to 3s
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Like [`Hub::wait_for`], but `None` when `done` does not hold within `secs`.
async fn changed_within(hub: &Hub, token: &str, name: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Option<Value> {
    let mut changes = hub.server.as_ref().unwrap().state.controller.changes();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let v = hub.get(token, name).await;
        if done(&v) {
            return Some(v);
        }
        if tokio::time::timeout_at(deadline, changes.recv()).await.is_err() {
            return None;
        }
    }
}

async fn proxied(hub: &Hub, token: &str, path: &str) -> String {
    let resp = hub.http.get(format!("{}{path}", hub.url)).bearer_auth(token).send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{path}: {text}");
    text
}

/// An HTTP server on loopback answering `seen <path>`.
async fn echo() -> u16 {
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move { format!("seen {}", req.uri()) });
    common::http::listen(app).await.unwrap().port()
}

/// Who reaches a service's URL: its owner only by default; every signed-in user where it is open to
/// `users` (its port only: not its terminal); anyone, on its own origin `<name>--<owner>.<apps_domain>`,
/// where it is `public`. It is served at its root there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_services_url_answers_whom_its_access_allows() {
    const DOMAIN: &str = "apps.localhost";
    let port = echo().await;
    let hub = Hub::start_with(|c| c.apps_domain = Some(DOMAIN.into())).await;
    hub.runtime.set_endpoint("127.0.0.1".parse().unwrap());
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    for (name, access) in [("mine", "owner"), ("team", "users"), ("open", "public")] {
        let body = service(name, &["serve"], json!({"service": {"port": port, "access": access}}));
        hub.submit(&alice, body).await;
        hub.wait_state(&alice, name, "running").await;
    }
    let hub_port = hub.server.as_ref().unwrap().addr.port();
    let addr = hub.server.as_ref().unwrap().addr;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&format!("open--alice.{DOMAIN}"), addr)
        .resolve(&format!("mine--alice.{DOMAIN}"), addr)
        .build()
        .unwrap();
    let get = |path: String, token: Option<&str>| {
        let mut r = http.get(path);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move {
            let r = r.send().await.unwrap();
            let location = r.headers().get("location").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            (r.status(), location, r.text().await.unwrap())
        }
    };
    let hub_path = |p: &str| format!("{}{p}", hub.url);
    // alice reaches all three, each at its root
    for name in ["mine", "team", "open"] {
        let (s, _, text) = get(hub_path(&format!("/w/alice/{name}/service/a?b=1")), Some(&alice)).await;
        assert_eq!((s, text.as_str()), (StatusCode::OK, "seen /a?b=1"), "{name}");
    }
    // bob: not the owner-only one (404, as if it did not exist), the others yes
    let (s, _, _) = get(hub_path("/w/alice/mine/service/"), Some(&bob)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    for name in ["team", "open"] {
        let (s, _, text) = get(hub_path(&format!("/w/alice/{name}/service/")), Some(&bob)).await;
        assert_eq!((s, text.as_str()), (StatusCode::OK, "seen /"), "{name}");
    }
    // opened to users is its port only: bob gets no terminal
    let (s, _, _) = get(hub_path("/terminal/alice/team/"), Some(&bob)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // anonymous: refused by the owner-only and users ones; sent to the public one's own origin
    for name in ["mine", "team"] {
        let (s, _, _) = get(hub_path(&format!("/w/alice/{name}/service/")), None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{name}");
    }
    let (s, location, _) = get(hub_path("/w/alice/open/service/x"), None).await;
    assert!(s.is_redirection(), "{s}");
    assert_eq!(location, format!("http://open--alice.{DOMAIN}:{hub_port}/w/alice/open/service/x"));
    let (s, _, text) = get(location, None).await;
    assert_eq!((s, text.as_str()), (StatusCode::OK, "seen /x"));
    let on = |label: &str, path: &str| format!("http://{label}.{DOMAIN}:{hub_port}{path}");
    let (s, location, _) = get(on("open--alice", "/"), None).await;
    assert_eq!((s.is_redirection(), location.as_str()), (true, "/w/alice/open/service/"));
    // the owner-only one's origin serves nobody anonymous
    let (s, _, _) = get(on("mine--alice", "/w/alice/mine/service/"), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

/// A service whose run ended while the hub was down is found so at reconciliation: queued again with
/// its backoff, its restarts counted; what it had counted before is kept.
#[tokio::test]
async fn a_service_that_ended_while_the_hub_was_down_is_restarted_after_reconciliation() {
    let mut hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, service("web", &["httpd", "-f"], json!({}))).await;
    hub.wait_state(&alice, "web", "running").await;
    let run = hub.run(&alice, "web").await;
    hub.server.take().unwrap().shutdown().await;
    hub.runtime.exit(&run, 2);
    hub.restart_from_nothing().await;
    let alice = hub.login("alice", "alice-password").await;
    let v = hub.wait_for(&alice, "web", 10, |v| v["restarts"] == json!(1)).await;
    assert_eq!(v["state"], "queued", "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("exited with code 2; restarting in 10s"), "{v}");
}

/// A service's update (`PATCH` with `image`, `command` or `env`): a new run with the new terms, which
/// serves once ready (a rolling update: `service_updates.rs`), not counted as a restart; anything else
/// is refused naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_is_updated_by_a_new_run_with_its_new_terms() {
    let port = echo().await;
    let hub = Hub::start().await;
    hub.runtime.set_endpoint("127.0.0.1".parse().unwrap());
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, service("web", &["httpd", "-f"], json!({"service": {"port": port}}))).await;
    hub.wait_state(&alice, "web", "running").await;
    let old = hub.run(&alice, "web").await;
    let body = json!({"command": ["httpd", "-f", "-p", "9090"], "env": {"MODE": "v2"}});
    let (s, v) = hub.call(Method::PATCH, "/api/v1/workloads/web", Some(&alice), Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let v = hub.wait_for(&alice, "web", 20, |v| v["service"]["update"]["state"] == "done").await;
    assert_eq!((v["state"].as_str(), v["command"].clone()), (Some("running"), json!(["httpd", "-f", "-p", "9090"])));
    let new = hub.run(&alice, "web").await;
    assert_ne!(new, old, "a new run: {v}");
    let spec = hub.runtime.spec(&new).expect("the new run's spec");
    assert_eq!(
        (spec.command.join(" "), spec.env.get("MODE").map(String::as_str)),
        ("httpd -f -p 9090".into(), Some("v2"))
    );
    assert_eq!(v["restarts"], 0, "an update is no restart: {v}");
    let notes: Vec<&str> = v["history"].as_array().unwrap().iter().filter_map(|e| e["message"].as_str()).collect();
    assert!(
        notes.contains(&"updated: command, environment (by alice); the new run serves, the old one is stopped"),
        "{notes:?}"
    );
    // refused: another kind, other terms beside, reserved variables
    hub.submit(&alice, common::job("j", 0)).await;
    let cases = [
        ("j", json!({"command": ["true"]}), "only a service is updated in place"),
        ("web", json!({"command": ["x"], "priority": 1}), "change alone"),
        ("web", json!({"env": {"GPUHUB_MEMBER": "1"}}), "GPUHUB_"),
    ];
    for (name, body, want) in cases {
        let (s, v) =
            hub.call(Method::PATCH, &format!("/api/v1/workloads/{name}"), Some(&alice), Some(body.clone())).await;
        assert!(s.is_client_error(), "{body}: {s} {v}");
        assert!(v["detail"].as_str().unwrap_or_default().contains(want), "{body}: want {want:?} in {v}");
    }
}
