//! `gpuhub ssh-key`, `gpuhub ssh` and `gpuhub ssh-config` against a small in-test server (the kit's
//! `http`), with a fake ssh program that records its arguments (the kit's `program`).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{delete, get};
use clap::Parser;
use gpuhub_client::{ClientCli, ClientError, Context, run_with};
use gpuhub_testkit::http::{self, problem};
use gpuhub_testkit::program;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const TOKEN: &str = "tok-1";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH8AEj/Nz9zHuq2dT08fudab7gZbkHR+UCm0GtEye43Y me@laptop";
const FP: &str = "SHA256:yECmAHxBpVEy2eIlzyM+GqhrPxFEOHsBghIKjbZCmyw";
/// The nonce of the test server's challenge, which `gpuhub ssh-key add` sends back.
const NONCE: &str = "0123456789abcdef0123456789abcdef";

#[derive(Default)]
struct Keys {
    keys: Mutex<Vec<Value>>,
    /// The public key line the test registers (a key made by ssh-keygen, so that the CLI can sign).
    expect: Mutex<String>,
    /// Fingerprints the server was asked to delete, as the router decoded them.
    deleted: Mutex<Vec<String>>,
    /// Whether `/info` names a gateway port.
    gateway: bool,
}

fn authorized(h: &HeaderMap) -> bool {
    h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {TOKEN}"))
}

async fn start(gateway: bool) -> (String, Arc<Keys>) {
    let keys = Arc::new(Keys { gateway, ..Default::default() });
    let app = Router::new()
        .route(
            "/api/v1/info",
            get(|State(k): State<Arc<Keys>>, h: HeaderMap| async move {
                if !authorized(&h) {
                    return problem(StatusCode::UNAUTHORIZED, "no token");
                }
                let port = if k.gateway { json!(2222) } else { Value::Null };
                axum::Json(json!({"version": "0.1.0", "ssh_port": port})).into_response()
            }),
        )
        .route(
            "/api/v1/me/ssh-keys/challenge",
            get(|| async {
                axum::Json(json!({"namespace": "gpuhub-ssh-key", "nonce": NONCE, "message": "sign me\n"}))
            }),
        )
        .route(
            "/api/v1/me/ssh-keys",
            get(|State(k): State<Arc<Keys>>| async move { axum::Json(json!(*k.keys.lock().unwrap())) }).post(
                |State(k): State<Arc<Keys>>, axum::Json(req): axum::Json<Value>| async move {
                    let expect = k.expect.lock().unwrap().clone();
                    if req["key"] != json!(expect) {
                        return problem(StatusCode::UNPROCESSABLE_ENTITY, &format!("not the key: {req}"));
                    }
                    let signed =
                        req["signature"].as_str().is_some_and(|s| s.starts_with("-----BEGIN SSH SIGNATURE-----"));
                    if !signed || req["nonce"] != NONCE || req.as_object().unwrap().len() != 3 {
                        return problem(StatusCode::UNPROCESSABLE_ENTITY, &format!("no proof of possession: {req}"));
                    }
                    let view = json!({"fingerprint": FP, "public_key": KEY.rsplit_once(' ').unwrap().0,
                        "comment": "me@laptop", "created_at": "2025-01-01T00:00:00Z"});
                    k.keys.lock().unwrap().push(view.clone());
                    (StatusCode::CREATED, axum::Json(view)).into_response()
                },
            ),
        )
        .route(
            "/api/v1/me/ssh-keys/{fp}",
            delete(|State(k): State<Arc<Keys>>, Path(fp): Path<String>| async move {
                k.deleted.lock().unwrap().push(fp.clone());
                let mut keys = k.keys.lock().unwrap();
                let before = keys.len();
                keys.retain(|v| v["fingerprint"] != fp.as_str());
                if keys.len() == before {
                    return problem(StatusCode::NOT_FOUND, &format!("no key {fp}"));
                }
                StatusCode::NO_CONTENT.into_response()
            }),
        )
        .route(
            "/api/v1/workloads",
            get(|| async {
                let w = |name: &str, kind: &str| {
                    json!({"id": name, "name": name, "owner": "alice", "kind": kind, "image": "jupyter",
                        "command": [], "env": {}, "resources": {"cpu_milli": 1000, "memory": "1GiB", "gpus": 0},
                        "priority": 0, "state": "running", "gpus": [], "created_at": "2025-01-01T00:00:00Z"})
                };
                axum::Json(json!([w("train", "job"), w("nb", "workspace"), w("dev", "workspace")]))
            }),
        )
        .with_state(keys.clone());
    (http::serve(app).await.unwrap(), keys)
}

async fn cli(ctx: &Context, url: &str, args: &[&str]) -> Result<(i32, String), ClientError> {
    let head = ["gpuhub", "--server", url];
    let cli = ClientCli::try_parse_from(head.iter().chain(args)).unwrap();
    let mut out = Vec::new();
    let code = run_with(ctx, cli.global, cli.command, &mut out).await?;
    Ok((code, String::from_utf8(out).unwrap()))
}

#[tokio::test]
async fn keys_are_added_listed_and_removed() {
    let (url, keys) = start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path()).with_token(TOKEN);
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "me@laptop", "-f"])
        .arg(dir.path().join("id"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let pubfile = dir.path().join("id.pub");
    *keys.expect.lock().unwrap() = std::fs::read_to_string(&pubfile).unwrap().trim().to_owned();

    let (_, out) = cli(&ctx, &url, &["ssh-key", "add", pubfile.to_str().unwrap()]).await.unwrap();
    assert_eq!(out, format!("{FP}\n"));
    let (_, out) = cli(&ctx, &url, &["ssh-key", "list"]).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("FINGERPRINT") && lines[0].ends_with("AGE"), "{out}");
    assert!(lines[1].starts_with(FP) && lines[1].contains("ssh-ed25519") && lines[1].contains("me@laptop"), "{out}");
    let (_, out) = cli(&ctx, &url, &["--json", "ssh-key", "list"]).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()[0]["fingerprint"], FP);

    // the fingerprint's '/' and '+' reach the server as one path segment
    let (_, out) = cli(&ctx, &url, &["ssh-key", "rm", FP]).await.unwrap();
    assert_eq!(out, format!("removed key {FP}\n"));
    assert_eq!(*keys.deleted.lock().unwrap(), [FP]);
    let e = cli(&ctx, &url, &["ssh-key", "rm", FP.trim_start_matches("SHA256:")]).await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    assert_eq!(keys.deleted.lock().unwrap()[1], FP, "a bare hash gets its SHA256: prefix");

    // a private key never leaves the machine
    let private = dir.path().join("id");
    std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n").unwrap();
    let e = cli(&ctx, &url, &["ssh-key", "add", private.to_str().unwrap()]).await.unwrap_err().to_string();
    assert!(e.contains("private key") && e.contains("id.pub"), "{e}");
    assert!(keys.keys.lock().unwrap().is_empty());
}

#[tokio::test]
async fn ssh_config_lists_workspaces_only() {
    let (url, _) = start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path()).with_token(TOKEN);
    let (_, out) = cli(&ctx, &url, &["ssh-config", "-i", "/k/id"]).await.unwrap();
    let want = format!(
        "# gpuhub workspaces at {url} (written by gpuhub ssh-config)\n\
         Host gpuhub-dev\n    HostName 127.0.0.1\n    Port 2222\n    User dev\n    IdentityFile /k/id\n    IdentitiesOnly yes\n\
         Host gpuhub-nb\n    HostName 127.0.0.1\n    Port 2222\n    User nb\n    IdentityFile /k/id\n    IdentitiesOnly yes\n"
    );
    assert_eq!(out, want);

    let (url, _) = start(false).await;
    let e = cli(&ctx, &url, &["ssh-config"]).await.unwrap_err().to_string();
    assert_eq!(e, format!("{url} runs no SSH gateway"));
}

#[tokio::test]
async fn ssh_runs_the_ssh_program_and_returns_its_exit_code() {
    let (url, _) = start(true).await;
    let dir = tempfile::tempdir().unwrap();
    let fake = program::Recording::new(dir.path(), "fake-ssh", 7).unwrap();
    let ctx = Context::new(dir.path()).with_token(TOKEN).with_ssh_program(&fake.program);

    let (code, out) = cli(&ctx, &url, &["ssh", "nb", "--", "echo", "a b"]).await.unwrap();
    assert_eq!((code, out.as_str()), (7, ""));
    assert_eq!(fake.args(), "-p\n2222\n--\nnb@127.0.0.1\necho\na b\n");

    let (code, _) =
        cli(&ctx, &url, &["ssh", "nb", "--owner", "alice", "-i", "/k/id", "-o", "BatchMode=yes"]).await.unwrap();
    assert_eq!(code, 7);
    assert_eq!(fake.args(), "-p\n2222\n-i\n/k/id\n-o\nBatchMode=yes\n--\nalice.nb@127.0.0.1\n");

    let ctx = ctx.with_ssh_program(dir.path().join("no-such-ssh"));
    let e = cli(&ctx, &url, &["ssh", "nb"]).await.unwrap_err().to_string();
    assert!(e.starts_with("cannot run ") && e.contains("no-such-ssh"), "{e}");
}
