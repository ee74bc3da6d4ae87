//! `forward` against real local upstream servers: headers, streaming both ways, WebSockets, errors.

mod common;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message as AxMessage, WebSocketUpgrade};
use axum::extract::{OriginalUri, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use common::*;
use futures::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const MIB: usize = 1 << 20;

/// An upstream that reports what it received as JSON and sets cookies.
async fn echo(OriginalUri(uri): OriginalUri, headers: HeaderMap) -> Response {
    let mut seen = serde_json::Map::new();
    for (k, v) in &headers {
        let prior = seen.get(k.as_str()).and_then(|p| p.as_str()).map(str::to_string);
        let v = v.to_str().unwrap_or("?").to_string();
        seen.insert(k.to_string(), prior.map_or(v.clone(), |p| format!("{p}|{v}")).into());
    }
    seen.insert("path".into(), uri.to_string().into());
    (
        [
            (header::SET_COOKIE, "gpuhub_session=stolen; Path=/"),
            (header::SET_COOKIE, "_xsrf=token; Path=/w/alice/nb/lab/"),
        ],
        axum::Json(seen),
    )
        .into_response()
}

/// N10 (second security review): the `Set-Cookie` filter parses each cookie, so no spelling of the
/// hub's cookie name gets through (a leading `=`, which a browser keeps as a nameless cookie that it
/// sends back as `gpuhub_session=…`; a quoted name; another case), nor anything it cannot parse, while
/// the app's own cookies pass.
#[tokio::test]
async fn n10_set_cookie_filter_parses_cookies() -> Result<()> {
    let hostile = [
        "=gpuhub_session=fixed; Path=/",
        "\"gpuhub_session\"=fixed; Path=/",
        "GPUHUB_SESSION=fixed; Path=/",
        " gpuhub_session =fixed",
        ";gpuhub_session=fixed",
        "gpuhub_session",
        "=fixed",
    ];
    let app = move || async move {
        let mut res = axum::Json(serde_json::json!({})).into_response();
        for c in hostile.iter().chain(&["_xsrf=token; Path=/w/alice/nb/lab/", "theme=\"dark\"; Max-Age=60"]) {
            res.headers_mut().append(header::SET_COOKIE, c.parse().unwrap());
        }
        res
    };
    let up = serve(Router::new().fallback(any(app))).await?;
    let proxy = proxy_to(up).await?;
    let res = client().get(format!("http://{proxy}/w/alice/nb/lab/").parse()?).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let cookies: Vec<_> =
        res.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect();
    assert_eq!(cookies, ["_xsrf=token; Path=/w/alice/nb/lab/", "theme=\"dark\"; Max-Age=60"]);
    Ok(())
}

#[tokio::test]
async fn headers_are_stripped_and_set_and_paths_kept() -> Result<()> {
    let up = serve(Router::new().fallback(any(echo))).await?;
    let proxy = proxy_to(up).await?;
    let req = http::Request::get(format!("http://{proxy}/w/alice/nb/lab/api/contents?type=notebook"))
        .header(header::HOST, "hub.example:8443")
        .header(header::COOKIE, "gpuhub_session=secret; _xsrf=abc")
        .header(header::AUTHORIZATION, "Bearer gh_hub_token")
        .header("x-forwarded-for", "203.0.113.7")
        .header(header::CONNECTION, "keep-alive, x-hop")
        .header("x-hop", "1")
        .body(Body::empty())?;
    let res = client().request(req).await?;
    assert_eq!(res.status(), StatusCode::OK);
    let cookies: Vec<_> =
        res.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect();
    assert_eq!(cookies, ["_xsrf=token; Path=/w/alice/nb/lab/"], "an app set the hub's cookie");
    let seen: serde_json::Value = serde_json::from_slice(&res.into_body().collect().await?.to_bytes())?;
    assert_eq!(seen["path"], "/w/alice/nb/lab/api/contents?type=notebook");
    assert_eq!(seen["host"], "hub.example:8443");
    assert_eq!(seen["cookie"], "_xsrf=abc");
    assert!(seen.get("authorization").is_none(), "{seen}");
    assert!(seen.get("x-hop").is_none(), "{seen}");
    assert_eq!(seen["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(seen["x-forwarded-proto"], "http");
    assert_eq!(seen["x-forwarded-host"], "hub.example:8443");
    assert_eq!(seen["x-forwarded-prefix"], "/w/alice/nb/lab");

    // Only the hub cookie: no Cookie header at all.
    let req = http::Request::get(format!("http://{proxy}/w/alice/nb/lab/"))
        .header(header::COOKIE, "gpuhub_session=secret")
        .body(Body::empty())?;
    let res = client().request(req).await?;
    let seen: serde_json::Value = serde_json::from_slice(&res.into_body().collect().await?.to_bytes())?;
    assert!(seen.get("cookie").is_none(), "{seen}");
    assert_eq!(seen["path"], "/w/alice/nb/lab/");
    Ok(())
}

#[tokio::test]
async fn redirects_pass_unchanged_and_dead_apps_are_502() -> Result<()> {
    let app = Router::new()
        .fallback(any(|| async { (StatusCode::FOUND, [(header::LOCATION, "/w/alice/nb/lab/tree?x=1")], "") }));
    let proxy = proxy_to(serve(app).await?).await?;
    let res = client().get(format!("http://{proxy}/w/alice/nb/lab/").parse()?).await?;
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(res.headers()[header::LOCATION], "/w/alice/nb/lab/tree?x=1");

    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?; // closed again at once
    let proxy = proxy_to(dead).await?;
    let res = client().get(format!("http://{proxy}/w/alice/nb/lab/").parse()?).await?;
    assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    let body = res.into_body().collect().await?.to_bytes();
    assert!(text(&body).contains("not reachable"), "{}", text(&body));
    Ok(())
}

#[tokio::test]
async fn downloads_stream_without_buffering() -> Result<()> {
    // The upstream sends 64 KiB, then waits until the test saw them through the proxy, then 100 MiB.
    let release = Arc::new(Notify::new());
    let gate = release.clone();
    let app = Router::new().fallback(get(move || {
        let gate = gate.clone();
        async move {
            let first = futures::stream::once(async { Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 64 * 1024])) });
            let rest = futures::stream::once(async move {
                gate.notified().await;
                futures::stream::iter((0..100).map(|_| Ok(Bytes::from(vec![b'b'; MIB]))))
            })
            .flatten();
            Body::from_stream(first.chain(rest))
        }
    }));
    let proxy = proxy_to(serve(app).await?).await?;
    let buffered = "the first bytes did not arrive before the upstream finished: the proxy buffers";
    let first_bytes = async {
        let res = client().get(format!("http://{proxy}/w/alice/nb/lab/files/big.bin").parse()?).await?;
        anyhow::ensure!(res.status() == StatusCode::OK, "status {}", res.status());
        let mut body = res.into_body();
        let first = body.frame().await.context("body ended")??;
        Ok((body, first))
    };
    let (mut body, first) = tokio::time::timeout(Duration::from_secs(10), first_bytes).await.context(buffered)??;
    let mut total = first.data_ref().map_or(0, Bytes::len);
    assert!(total > 0 && total <= 64 * 1024);
    release.notify_one();
    while let Some(frame) = body.frame().await {
        total += frame?.data_ref().map_or(0, Bytes::len);
    }
    assert_eq!(total, 64 * 1024 + 100 * MIB);
    Ok(())
}

#[tokio::test]
async fn uploads_stream_without_buffering() -> Result<()> {
    // The upstream reports its first bytes at once and counts the rest.
    let (seen_tx, seen_rx) = oneshot::channel::<()>();
    let seen_tx = Arc::new(Mutex::new(Some(seen_tx)));
    let app = Router::new().fallback(any(move |req: Request| {
        let seen_tx = seen_tx.clone();
        async move {
            let mut body = req.into_body().into_data_stream();
            let mut total = 0usize;
            while let Some(chunk) = body.next().await {
                total += chunk.unwrap().len();
                if let Some(tx) = seen_tx.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            }
            total.to_string()
        }
    }));
    let proxy = proxy_to(serve(app).await?).await?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let body = Body::from_stream(tokio_stream_from(rx));
    let req = http::Request::post(format!("http://{proxy}/w/alice/nb/lab/api/contents/up")).body(body)?;
    let response = tokio::spawn(client().request(req));
    tx.send(Ok(Bytes::from(vec![1u8; 64 * 1024]))).await?;
    tokio::time::timeout(Duration::from_secs(10), seen_rx)
        .await
        .context("the upstream did not see the first bytes before the client finished: the proxy buffers")??;
    for _ in 0..100 {
        tx.send(Ok(Bytes::from(vec![2u8; MIB]))).await?;
    }
    drop(tx);
    let res = response.await??;
    assert_eq!(res.status(), StatusCode::OK);
    let body = res.into_body().collect().await?.to_bytes();
    assert_eq!(text(&body), (64 * 1024 + 100 * MIB).to_string());
    Ok(())
}

fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::Receiver<T>) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn websockets_are_passed_through() -> Result<()> {
    let seen = Arc::new(Mutex::new(HeaderMap::new()));
    let record = seen.clone();
    let app = Router::new().fallback(get(move |ws: WebSocketUpgrade, headers: HeaderMap| {
        *record.lock().unwrap() = headers;
        async move {
            ws.protocols(["v1.kernel.websocket.jupyter.org"]).on_upgrade(|mut socket| async move {
                while let Some(Ok(msg)) = socket.recv().await {
                    let reply = match msg {
                        AxMessage::Text(t) => AxMessage::Text(format!("echo:{}", t.as_str()).into()),
                        AxMessage::Binary(b) => AxMessage::Binary(b),
                        AxMessage::Close(_) => break,
                        _ => continue,
                    };
                    if socket.send(reply).await.is_err() {
                        break;
                    }
                }
            })
        }
    }));
    let proxy = proxy_to(serve(app).await?).await?;
    let mut req = format!("ws://{proxy}/w/alice/nb/lab/api/kernels/k1/channels?session_id=s").into_client_request()?;
    req.headers_mut().insert(header::COOKIE, "gpuhub_session=secret; _xsrf=x".parse()?);
    req.headers_mut().insert(header::SEC_WEBSOCKET_PROTOCOL, "v1.kernel.websocket.jupyter.org".parse()?);
    let (mut ws, res) = tokio::time::timeout(Duration::from_secs(10), tokio_tungstenite::connect_async(req)).await??;
    assert_eq!(res.headers()[header::SEC_WEBSOCKET_PROTOCOL], "v1.kernel.websocket.jupyter.org");

    ws.send(Message::text("hello")).await?;
    let reply = ws.next().await.context("closed")??;
    assert_eq!(reply.into_text()?.as_str(), "echo:hello");
    let big = vec![7u8; 4 * MIB];
    ws.send(Message::binary(big.clone())).await?;
    let reply = ws.next().await.context("closed")??;
    assert_eq!(reply.into_data().len(), big.len());
    ws.close(None).await?;

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[header::COOKIE], "_xsrf=x");
    assert_eq!(seen[header::UPGRADE], "websocket");
    assert_eq!(seen["x-forwarded-prefix"], "/w/alice/nb/lab");
    Ok(())
}
