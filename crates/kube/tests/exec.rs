//! Exec through the API server's exec stream: an in-process server on 127.0.0.1:0 (the kit's `http`)
//! answers the pod listing and upgrades `pods/<name>/exec` to a websocket speaking the API server's
//! `v5.channel.k8s.io` (channel 0 stdin, 1 stdout, 3 the closing status, 4 terminal sizes), recording
//! what it is sent, since a websocket upgrade cannot go through the mocked tower service. A terminal, its resize, input and
//! output, and the exit code in the closing status.

mod mock;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use futures::StreamExt;
use gpuhub_driver::{Engine, ExecSpec, MemberRef};
use gpuhub_kube::{KubeConfig, KubeEngine};
use gpuhub_testkit::{Recorder, http};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// What the exec stream was sent: `query …`, `resize …`.
type Seen = Recorder<String>;

async fn pods() -> axum::Json<serde_json::Value> {
    axum::Json(
        serde_json::json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [mock::pod(0, mock::running())] }),
    )
}

async fn exec(ws: WebSocketUpgrade, RawQuery(q): RawQuery, State(seen): State<Seen>) -> axum::response::Response {
    seen.push(format!("query {}", q.unwrap_or_default()));
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"]).on_upgrade(move |socket| session(socket, seen))
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut b = vec![channel];
    b.extend_from_slice(data);
    Message::Binary(b.into())
}

/// A shell that echoes its input until `exit`, then closes with exit code 7.
async fn session(mut socket: WebSocket, seen: Seen) {
    let _ = socket.send(frame(1, b"ready\n")).await;
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Binary(b) = msg else { continue };
        let (channel, data) = (b[0], &b[1..]);
        match channel {
            0 if data == b"exit\n" => {
                let status = serde_json::json!({
                    "metadata": {}, "status": "Failure", "message": "command terminated with non-zero exit code",
                    "reason": "NonZeroExitCode", "details": { "causes": [{ "reason": "ExitCode", "message": "7" }] },
                });
                let _ = socket.send(frame(3, status.to_string().as_bytes())).await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
            0 => {
                let mut out = b"echo: ".to_vec();
                out.extend_from_slice(data);
                let _ = socket.send(frame(1, &out)).await;
            }
            4 => seen.push(format!("resize {}", String::from_utf8_lossy(data))),
            _ => {}
        }
    }
}

async fn engine() -> (KubeEngine, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route("/api/v1/namespaces/gpuhub/pods", axum::routing::get(pods))
        .route("/api/v1/namespaces/gpuhub/pods/r-0/exec", axum::routing::get(exec))
        .with_state(seen.clone());
    let url = http::serve(app).await.unwrap();
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    (KubeEngine::with_client(client, KubeConfig::default()), seen)
}

/// Reads `output` until it has said `want`.
async fn until(output: &mut gpuhub_driver::LogStream, want: &str) -> String {
    let mut text = String::new();
    while !text.contains(want) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), output.next()).await.unwrap().unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

#[tokio::test]
async fn a_terminal_through_the_exec_stream_with_resize_and_exit_code() {
    let (e, seen) = engine().await;
    let spec = ExecSpec {
        command: vec!["sh".into()],
        user: "1001:1001".into(),
        env: BTreeMap::from([("TERM".to_owned(), "xterm".to_owned())]),
        working_dir: Some("/home/alice".into()),
        tty: Some((80, 24)),
    };
    let mut h = e.exec(&MemberRef::new("r", 0), &spec).await.unwrap();
    until(&mut h.output, "ready\n").await;
    h.input.write_all(b"hello\n").await.unwrap();
    until(&mut h.output, "echo: hello\n").await;
    assert!(tokio::time::timeout(Duration::from_millis(50), h.wait()).await.is_err(), "it runs");
    h.resize(100, 40).await.unwrap();
    // the size goes on its own channel: seen before the input that ends the shell
    let resized = |seen: &[String]| seen.iter().any(|s| s.contains("\"Width\":100")).then_some(());
    seen.wait_for("the resize", resized).await.unwrap();
    h.input.write_all(b"exit\n").await.unwrap();
    // the output ends with the process
    while tokio::time::timeout(Duration::from_secs(10), h.output.next()).await.unwrap().is_some() {}
    let code = tokio::time::timeout(Duration::from_secs(10), h.wait()).await.expect("the status comes");
    assert_eq!(code.unwrap(), 7);
    assert_eq!(h.process.clone().wait().await.unwrap(), 7, "any number of times, from any clone");
    let seen = seen.all();
    let query = seen[0].trim_start_matches("query ");
    assert!(
        query.contains("container=member") && query.contains("tty=true") && query.contains("stdin=true"),
        "{query}"
    );
    let args: Vec<_> = query.split('&').filter_map(|kv| kv.strip_prefix("command=")).map(mock::decode).collect();
    assert_eq!(args, ["sh", "-c", "cd \"$0\" && exec \"$@\"", "/home/alice", "env", "TERM=xterm", "sh"]);
    assert!(seen.iter().any(|s| s == "resize {\"Width\":80,\"Height\":24}"), "{seen:?}");
    assert!(seen.iter().any(|s| s == "resize {\"Width\":100,\"Height\":40}"), "{seen:?}");
}
