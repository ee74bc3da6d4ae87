//! The client against a small in-test HTTP server that records what it is sent (the kit's `http`).

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Parser;
use gpuhub_client::{ClientCli, ClientError, Context, Credentials, run_with};
use gpuhub_testkit::Recorder;
use gpuhub_testkit::http::{self, Seen, problem};
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

#[derive(Default)]
struct Shared {
    /// The chunks of the next followed log stream, fed by the test.
    log_chunks: Mutex<Option<mpsc::Receiver<Result<String, std::io::Error>>>>,
}

/// The test server: its base URL, what it was sent, and the log chunks the test feeds it.
struct Server {
    url: String,
    seen: Recorder<Seen>,
    shared: Arc<Shared>,
}

impl Server {
    async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let seen = Recorder::default();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let url = http::serve(http::recording(app, &seen)).await.unwrap();
        Self { url, seen, shared }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.all()
    }

    fn last(&self) -> Seen {
        self.seen.last()
    }
}

fn workload(name: &str, state: &str, exit_code: Option<i64>) -> Value {
    let mut w = json!({
        "id": format!("id-{name}"), "name": name, "owner": "alice", "kind": "job", "image": "pytorch",
        "command": ["python"], "env": {}, "resources": {"cpu_milli": 2000, "memory": "4GiB", "gpus": 1},
        "priority": 0, "state": state, "gpus": [], "created_at": "2025-01-01T00:00:00Z",
        "message": "waiting for 1 GPU",
    });
    if let Some(c) = exit_code {
        w["exit_code"] = json!(c);
    }
    w
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let auth = req.headers().get(header::AUTHORIZATION).map(|v| v.to_str().unwrap().to_owned());
    let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();

    if path == "/api/v1/login" {
        let req: Value = serde_json::from_slice(&body).unwrap();
        if req == json!({"username": "alice", "password": "pw", "token": true}) {
            return axum::Json(json!({"token": "tok-123", "username": "alice", "role": "user"})).into_response();
        }
        return problem(StatusCode::UNAUTHORIZED, "invalid username or password");
    }
    if !matches!(auth.as_deref(), Some("Bearer tok-123" | "Bearer env-tok")) {
        return problem(StatusCode::UNAUTHORIZED, "token expired");
    }
    let segs: Vec<&str> = path.trim_start_matches("/api/v1/").split('/').collect();
    match (method.as_str(), segs.as_slice()) {
        ("GET", ["me"]) => axum::Json(json!({
            "username": "alice", "role": "user", "uid": 10000, "gid": 10000, "disabled": false,
            "created_at": "2025-01-01T00:00:00Z",
        }))
        .into_response(),
        ("PATCH", ["users", name]) => axum::Json(json!({
            "username": name, "role": "user", "uid": 10001, "gid": 10001, "disabled": false,
            "created_at": "2025-01-01T00:00:00Z",
        }))
        .into_response(),
        ("POST", ["workloads"]) => {
            let req: Value = serde_json::from_slice(&body).unwrap();
            let name = req["name"].as_str().unwrap_or("job-1");
            let mut w = workload(name, "queued", None);
            if let Some(port) = req["service"]["port"].as_u64() {
                w["kind"] = json!("service");
                w["service"] = json!({"port": port, "ready_check": {"http": "/"}, "access": "owner",
                    "crash_loop": false, "url": format!("/w/alice/{name}/service/")});
            }
            (StatusCode::CREATED, axum::Json(w)).into_response()
        }
        // two pages: the first ends with a cursor, the second (asked for with it) has none
        ("GET", ["workloads"]) if !query.contains("cursor=") => {
            let mut r = axum::Json(json!([workload("train", "running", None)])).into_response();
            r.headers_mut().insert("x-next-cursor", "c-1".parse().unwrap());
            r
        }
        ("GET", ["workloads"]) if query.ends_with("limit=1000&cursor=c-1") => {
            axum::Json(json!([workload("old", "failed", Some(2))])).into_response()
        }
        ("GET", ["workloads", "missing"]) => problem(StatusCode::NOT_FOUND, "no workload named missing"),
        ("GET", ["workloads", name]) => axum::Json(workload(name, "failed", Some(3))).into_response(),
        ("DELETE", ["workloads", _]) => StatusCode::NO_CONTENT.into_response(),
        ("PATCH", ["workloads", name]) => {
            let req: Value = serde_json::from_slice(&body).unwrap();
            let mut w = workload(name, "running", None);
            w["runtime_limit"] = req["runtime_limit"].clone();
            axum::Json(w).into_response()
        }
        ("POST", ["workloads", name, "stop"]) => axum::Json(workload(name, "stopped", None)).into_response(),
        ("GET", ["workloads", _, "logs"]) if query.contains("follow=true") => {
            let rx = shared.log_chunks.lock().unwrap().take();
            match rx {
                Some(rx) => Response::new(Body::from_stream(ReceiverStream::new(rx))),
                None => "training...\ndone\n".into_response(),
            }
        }
        ("GET", ["workloads", _, "logs"]) => "so far\n".into_response(),
        ("GET", ["workloads", name, "metrics"]) => axum::Json(json!({
            "workload": name, "owner": "alice", "from": "2026-11-01T10:00:00Z", "to": "2026-11-01T11:00:00Z",
            "step_secs": 600, "points": [{"member": 0, "at": "2026-11-01T10:00:00Z", "cpu_cores": 2.0,
                "memory_used": 1073741824}],
        }))
        .into_response(),
        ("GET", ["metrics", "live"]) => axum::Json(json!({
            "at": "2026-11-01T11:00:00Z",
            "members": [{"workload_id": "id", "workload": "train", "owner": "alice", "queue": "default",
                "member": 0, "cpu_cores": 0.5, "memory_used": 1073741824}],
            "gpus": [{"node": "node-1", "uuid": "GPU-0", "index": 0, "model": "H200", "utilization_pct": 97.0,
                "memory_used": 1073741824, "memory_total": 151_397_597_184u64, "holders": ["alice/train"]}],
        }))
        .into_response(),
        ("GET", ["nodes"]) => axum::Json(json!([{
            "name": "node-1", "cpus": 16.0, "cpus_free": 14.0, "memory": "64GiB", "memory_free": "60GiB",
            "gpus": [{"uuid": "GPU-0", "index": 0, "model": "H200", "memory": "141GiB",
                      "holder": {"owner": "alice", "workload": "train"}}],
        }]))
        .into_response(),
        _ => problem(StatusCode::NOT_FOUND, &format!("no route {method} {path}")),
    }
}

/// Parses `args` as the command line and runs it, returning the result and what it printed.
async fn cli(ctx: &Context, args: &[&str]) -> (Result<i32, ClientError>, String) {
    let parsed = ClientCli::try_parse_from(std::iter::once("gpuhub").chain(args.iter().copied())).unwrap();
    let mut out = Vec::new();
    let r = run_with(ctx, parsed.global, parsed.command, &mut out).await;
    (r, String::from_utf8(out).unwrap())
}

/// A context logged in to `server` with the token the test server accepts.
fn logged_in(server: &Server) -> (tempfile::TempDir, Context) {
    let dir = tempfile::tempdir().unwrap();
    Credentials { server: server.url.clone(), username: "alice".into(), token: "tok-123".into() }
        .save(dir.path())
        .unwrap();
    let ctx = Context::new(dir.path());
    (dir, ctx)
}

#[tokio::test]
async fn login_saves_the_token_and_later_calls_send_it() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gpuhub");
    let ctx = Context::new(&cfg).with_password("pw");

    let (r, out) = cli(&ctx, &["whoami"]).await;
    assert_eq!(r.unwrap_err().to_string(), "not logged in: run gpuhub login --server URL --user NAME");
    assert_eq!(out, "");

    let (r, out) = cli(&ctx, &["login", "--server", &format!("{}/", server.url), "--user", "alice"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, format!("logged in to {} as alice (user)\n", server.url));
    let login = server.last();
    assert_eq!(login.auth, None);
    assert_eq!(login.json(), json!({"username": "alice", "password": "pw", "token": true}));
    let saved = Credentials::load(&cfg).unwrap().unwrap();
    assert_eq!((saved.server.as_str(), saved.token.as_str()), (server.url.as_str(), "tok-123"));
    let mode = std::fs::metadata(Credentials::path(&cfg)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let (r, out) = cli(&ctx, &["whoami"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, format!("alice (user) at {}\nuid 10000, gid 10000\n", server.url));
    let me = server.last();
    assert_eq!((me.method, me.uri.as_str(), me.auth.as_deref()), (Method::GET, "/api/v1/me", Some("Bearer tok-123")));

    // GPUHUB_TOKEN (here the context's token) wins over the saved one
    let (r, _) = cli(&ctx.clone().with_token("env-tok"), &["whoami"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().auth.as_deref(), Some("Bearer env-tok"));

    // a refused token says how to get a new one
    let (r, _) = cli(&ctx.clone().with_token("stale"), &["whoami"]).await;
    assert_eq!(r.unwrap_err().to_string(), "token expired (HTTP 401): run gpuhub login --server URL --user NAME");
}

#[tokio::test]
async fn wrong_password_is_the_servers_detail() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path()).with_password("nope");
    let (r, _) = cli(&ctx, &["--server", &server.url, "login", "--user", "alice"]).await;
    let e = r.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert_eq!(e.to_string(), "invalid username or password (HTTP 401)");
    assert!(Credentials::load(dir.path()).unwrap().is_none());
}

#[tokio::test]
async fn run_sends_the_request() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let args = [
        "run",
        "--name",
        "train",
        "--image",
        "pytorch",
        "--gpus",
        "1",
        "--cpus",
        "2",
        "--memory",
        "4GiB",
        "--env",
        "A=1",
        "--env",
        "B=two",
        "--priority",
        "5",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1",
    ];
    let (r, out) = cli(&ctx, &args).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, "train\n");
    let post = server.last();
    assert_eq!(
        (&post.method, post.uri.as_str(), post.auth.as_deref()),
        (&Method::POST, "/api/v1/workloads", Some("Bearer tok-123"))
    );
    assert_eq!(
        post.json(),
        json!({
            "name": "train", "kind": "job", "image": "pytorch",
            "command": ["python", "train.py", "--lr", "0.1"],
            "env": {"A": "1", "B": "two"},
            "resources": {"cpus": 2.0, "memory": "4GiB", "gpus": 1},
            "priority": 5,
        })
    );

    // --json prints the API's answer
    let (r, out) = cli(&ctx, &["--json", "run", "--workspace", "--image", "ubuntu"]).await;
    assert_eq!(r.unwrap(), 0);
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["name"], "job-1");
    assert_eq!(server.last().json(), json!({"kind": "workspace", "image": "ubuntu", "resources": {}}));
}

#[tokio::test]
async fn run_follow_streams_then_exits_with_the_jobs_code() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let (r, out) = cli(&ctx, &["run", "--name", "f", "--image", "x", "--follow", "--", "false"]).await;
    assert_eq!(r.unwrap(), 3, "the job failed with exit code 3");
    assert_eq!(out, "f\ntraining...\ndone\n");
    let uris: Vec<String> = server.seen().iter().map(|s| format!("{} {}", s.method, s.uri)).collect();
    assert_eq!(uris, ["POST /api/v1/workloads", "GET /api/v1/workloads/f/logs?follow=true", "GET /api/v1/workloads/f"]);
}

#[tokio::test]
async fn problem_404_becomes_its_detail() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let (r, out) = cli(&ctx, &["inspect", "missing"]).await;
    let e = r.unwrap_err();
    assert!(matches!(&e, ClientError::Api { status: 404, detail, .. } if detail == "no workload named missing"));
    assert_eq!(e.to_string(), "no workload named missing (HTTP 404)");
    assert_eq!(out, "");
}

/// A writer that hands each write to the test as it happens.
struct ChanWriter(mpsc::UnboundedSender<Vec<u8>>);

impl Write for ChanWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.send(buf.to_vec()).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn logs_follow_streams_chunks_as_they_come() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let (chunks, rx) = mpsc::channel(4);
    *server.shared.log_chunks.lock().unwrap() = Some(rx);

    let (out_tx, mut out_rx) = mpsc::unbounded_channel();
    let parsed = ClientCli::try_parse_from(["gpuhub", "logs", "-f", "train"]).unwrap();
    let client = tokio::spawn(async move {
        let mut w = ChanWriter(out_tx);
        run_with(&ctx, parsed.global, parsed.command, &mut w).await
    });

    let next = async |rx: &mut mpsc::UnboundedReceiver<Vec<u8>>| {
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("output in time").expect("open")
    };
    chunks.send(Ok("epoch 1\n".into())).await.unwrap();
    // the first chunk is printed while the stream is still open
    assert_eq!(next(&mut out_rx).await, b"epoch 1\n");
    assert!(!client.is_finished());
    chunks.send(Ok("epoch 2\n".into())).await.unwrap();
    assert_eq!(next(&mut out_rx).await, b"epoch 2\n");
    drop(chunks);
    let code = tokio::time::timeout(Duration::from_secs(10), client).await.unwrap().unwrap().unwrap();
    assert_eq!(code, 0);
    assert_eq!(server.last().uri, "/api/v1/workloads/train/logs?follow=true");
}

#[tokio::test]
async fn other_commands() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);

    let (r, out) = cli(&ctx, &["logs", "train", "--owner", "bob"]).await;
    assert_eq!((r.unwrap(), out.as_str()), (0, "so far\n"));
    assert_eq!(server.last().uri, "/api/v1/workloads/train/logs?owner=bob");
    let (r, out) = cli(&ctx, &["logs", "nb", "--app", "lab"]).await;
    assert_eq!((r.unwrap(), out.as_str()), (0, "so far\n"));
    assert_eq!(server.last().uri, "/api/v1/workloads/nb/logs?app=lab");

    let (r, out) = cli(&ctx, &["ps", "--all"]).await;
    assert_eq!(r.unwrap(), 0);
    // the client follows the cursor of the first page, keeping its filters
    let uris: Vec<String> = server.seen().iter().rev().take(2).rev().map(|s| s.uri.clone()).collect();
    assert_eq!(uris, ["/api/v1/workloads?all=true", "/api/v1/workloads?all=true&limit=1000&cursor=c-1"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("OWNER  NAME   KIND  STATE") && lines[0].ends_with("REASON"), "{out}");
    assert!(lines[1].starts_with("alice  train  job   running") && lines[1].ends_with("waiting for 1 GPU"), "{out}");

    let (r, out) = cli(&ctx, &["ps", "--json"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap().as_array().unwrap().len(), 2);
    assert_eq!(server.last().uri, "/api/v1/workloads?limit=1000&cursor=c-1");

    let (r, out) = cli(&ctx, &["stop", "train"]).await;
    assert_eq!((r.unwrap(), out.as_str()), (0, "train: stopped\n"));
    assert_eq!((server.last().method, server.last().uri), (Method::POST, "/api/v1/workloads/train/stop".into()));

    let (r, out) = cli(&ctx, &["rm", "train"]).await;
    assert_eq!((r.unwrap(), out.as_str()), (0, "removed train\n"));
    assert_eq!(server.last().method, Method::DELETE);

    let (r, out) = cli(&ctx, &["--json", "inspect", "train"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["exit_code"], 3);
    // without --json, for people: a line a field (the newcomer found inspect JSON-only)
    let (r, out) = cli(&ctx, &["inspect", "train"]).await;
    assert_eq!(r.unwrap(), 0);
    assert!(out.lines().any(|l| l == "exit_code: 3") && out.lines().any(|l| l == "name: train"), "{out}");

    let (r, out) = cli(&ctx, &["nodes"]).await;
    assert_eq!(r.unwrap(), 0);
    assert!(out.contains("node-1  2/16  4GiB/64GiB  1/1"), "{out}");
    assert!(out.contains("  0    H200   141GiB  -        alice/train"), "{out}");

    // an unknown route on the server is a 404 problem like any other
    let (r, _) = cli(&ctx, &["images"]).await;
    assert_eq!(r.unwrap_err().to_string(), "no route GET /api/v1/images (HTTP 404)");
}

#[tokio::test]
async fn stats_and_top() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let (r, out) =
        cli(&ctx, &["stats", "train", "--from", "2026-11-01T10:00:00Z", "--step", "600", "--owner", "bob"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().uri, "/api/v1/workloads/train/metrics?from=2026-11-01T10%3A00%3A00Z&step=600&owner=bob");
    assert!(out.starts_with("alice/train from 2026-11-01T10:00:00Z to 2026-11-01T11:00:00Z, every 600s\n"), "{out}");
    assert!(out.contains("0       2026-11-01T10:00:00Z  2    1GiB    -      -     -"), "{out}");
    let (r, out) = cli(&ctx, &["stats", "train", "--json"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().uri, "/api/v1/workloads/train/metrics");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["step_secs"], 600);

    let (r, out) = cli(&ctx, &["top"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().uri, "/api/v1/metrics/live");
    assert!(out.contains("node-1  0    H200   97%   1GiB/141GiB  -      -     alice/train"), "{out}");
    assert!(out.contains("train     alice  0       -     0.50  1GiB"), "{out}");
    let (r, out) = cli(&ctx, &["top", "--json"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["gpus"][0]["utilization_pct"], 97.0);
    assert!(ClientCli::try_parse_from(["gpuhub", "top", "--watch", "0"]).is_err(), "a watch needs at least 1 s");
}

#[tokio::test]
async fn unreachable_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path()).with_token("t");
    let url = format!("http://127.0.0.1:{port}");
    let (r, _) = cli(&ctx, &["--server", &url, "ps"]).await;
    let e = r.unwrap_err().to_string();
    assert!(e.starts_with(&format!("cannot reach {url}: ")), "{e}");
}

#[tokio::test]
async fn edit_sends_the_new_limit_and_refuses_what_it_cannot_ask() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let (r, out) = cli(&ctx, &["edit", "train", "--time-limit", "3h"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, "train: running, time limit 3h, priority 0, queue default\n");
    let seen = server.last();
    assert_eq!((&seen.method, seen.uri.as_str()), (&Method::PATCH, "/api/v1/workloads/train"));
    assert_eq!(seen.json(), json!({"runtime_limit": "3h"}));
    // --extend adds to the present limit, which this workload does not have
    let (r, _) = cli(&ctx, &["edit", "train", "--extend", "1h"]).await;
    assert_eq!(r.unwrap_err().to_string(), "workload train has no run-time limit to extend; give --time-limit");
    let (r, _) = cli(&ctx, &["edit", "train"]).await;
    assert!(r.unwrap_err().to_string().starts_with("nothing to change"));
    // a service's update: image, environment and command
    let (r, _) = cli(&ctx, &["edit", "web", "--image", "web:2", "--env", "MODE=v2", "--", "serve", "--fast"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().json(), json!({"image": "web:2", "env": {"MODE": "v2"}, "command": ["serve", "--fast"]}));
    assert!(ClientCli::try_parse_from(["gpuhub", "edit", "t", "--extend", "1h", "--time-limit", "2h"]).is_err());
}

#[tokio::test]
async fn service_run_sends_a_service_and_prints_its_url() {
    let server = Server::start().await;
    let (_dir, ctx) = logged_in(&server);
    let args = [
        "service",
        "run",
        "--name",
        "web",
        "--port",
        "8080",
        "--ready-command",
        "test -f '/tmp/ready file'",
        "--access",
        "users",
        "--image",
        "busybox",
        "--",
        "httpd",
        "-f",
        "-p",
        "8080",
    ];
    let (r, out) = cli(&ctx, &args).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, format!("web\t{}/w/alice/web/service/\n", server.url));
    let sent = server.last().json();
    assert_eq!((&sent["kind"], &sent["command"]), (&json!("service"), &json!(["httpd", "-f", "-p", "8080"])));
    assert_eq!(
        sent["service"],
        json!({"port": 8080, "ready": {"command": ["test", "-f", "/tmp/ready file"]}, "access": "users"})
    );
    let (r, _) = cli(&ctx, &["service", "run", "--port", "1", "--workspace", "--image", "busybox"]).await;
    assert!(r.unwrap_err().to_string().contains("no workspace"));
    assert!(
        ClientCli::try_parse_from(["gpuhub", "service", "run", "--port", "1", "--access", "all", "--image", "x"])
            .is_err()
    );
}

/// The newcomer's review: no CLI made an admin or set a forgotten password. `user role` and `user
/// password` send the API's PATCH of the account.
#[tokio::test]
async fn an_admin_changes_a_role_and_sets_a_password() {
    let server = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path().join("gpuhub")).with_password("pw");
    let (r, _) = cli(&ctx, &["login", "--server", &server.url, "--user", "alice"]).await;
    assert_eq!(r.unwrap(), 0);

    let (r, out) = cli(&ctx, &["user", "role", "bob", "admin"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(out, "bob is now an admin\n");
    let seen = server.last();
    assert_eq!((&seen.method, seen.uri.as_str()), (&Method::PATCH, "/api/v1/users/bob"));
    assert_eq!(seen.json(), json!({"admin": true}));

    let (r, _) = cli(&ctx, &["user", "role", "bob", "user"]).await;
    assert_eq!(r.unwrap(), 0);
    assert_eq!(server.last().json(), json!({"admin": false}));

    let ctx = ctx.with_password("n3w-secret");
    let (r, out) = cli(&ctx, &["user", "password", "bob"]).await;
    assert_eq!(r.unwrap(), 0);
    assert!(out.starts_with("set the password of bob"), "{out}");
    assert_eq!(server.last().json(), json!({"password": "n3w-secret"}));

    // anything but admin or user is refused before a request is sent
    assert!(ClientCli::try_parse_from(["gpuhub", "user", "role", "bob", "root"]).is_err());
}
