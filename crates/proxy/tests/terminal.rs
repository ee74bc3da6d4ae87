//! The terminal bridge against a real busybox container on Docker.

mod common;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::routing::get;
use common::docker::*;
use common::*;
use futures::{SinkExt, StreamExt};
use gpuhub_docker::DockerRuntime;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads terminal output until `want` appears in it (or a control message arrives); returns all of it.
async fn read_until(ws: &mut Ws, screen: &mut String, want: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !screen.contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, ws.next())
            .await
            .with_context(|| format!("no {want:?} in terminal output: {screen:?}"))?
            .context("socket ended")??;
        match msg {
            Message::Binary(b) => screen.push_str(&text(&b)),
            Message::Text(t) => screen.push_str(&format!("<control {}>", t.as_str())),
            Message::Close(_) => bail!("closed before {want:?}: {screen:?}"),
            _ => {}
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_runs_a_shell_in_the_workspace() -> Result<()> {
    build_image("build-busybox-image.sh")?;
    let runtime = Arc::new(DockerRuntime::connect().await?);
    let c = container(&runtime, "gpuhub/busybox:latest", &["sleep", "100000"]).await?;
    let (dyn_runtime, id) = (common::docker::engine(&runtime), gpuhub_driver::MemberRef::new(&c.id, 0));
    let app = Router::new().route(
        "/term/ws",
        get(move |ws: WebSocketUpgrade| {
            let (runtime, id) = (dyn_runtime.clone(), id.clone());
            async move {
                ws.on_upgrade(move |socket| async move {
                    let exec = gpuhub_proxy::shell_exec(&format!("{UID}:{UID}"), "/tmp", 80, 24);
                    gpuhub_proxy::terminal(socket, runtime, &id, exec).await;
                })
            }
        }),
    );
    let addr = serve(app).await?;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/term/ws")).await?;
    let mut screen = String::new();

    ws.send(Message::binary(b"echo hi-$((6*7))\n".to_vec())).await?;
    read_until(&mut ws, &mut screen, "hi-42").await?;

    ws.send(Message::text(r#"{"resize":[100,30]}"#)).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    ws.send(Message::binary(b"stty size; id -u\n".to_vec())).await?;
    read_until(&mut ws, &mut screen, &format!("30 100\r\n{UID}")).await?;

    // Text that is not a control message is typed in.
    ws.send(Message::text("exit 3\n")).await?;
    read_until(&mut ws, &mut screen, "<control").await?;
    assert!(screen.contains(r#"<control {"exit":3}>"#), "{screen:?}");
    let end = tokio::time::timeout(Duration::from_secs(10), ws.next()).await?;
    assert!(matches!(end, Some(Ok(Message::Close(_))) | None), "{end:?}");

    // A container that is not running: an error message, then close.
    let (mut ws, _) = {
        drop(c);
        tokio_tungstenite::connect_async(format!("ws://{addr}/term/ws")).await?
    };
    let msg = tokio::time::timeout(Duration::from_secs(10), ws.next()).await?.context("ended")??;
    assert!(msg.to_text()?.contains("cannot start the terminal"), "{msg:?}");
    Ok(())
}
