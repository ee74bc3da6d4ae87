//! JupyterLab, unmodified, behind `forward`: the lab page, the REST API with its XSRF cookie, and a
//! kernel executing `1+1` over the proxied WebSocket (Jupyter messaging protocol v5).

mod common;

use anyhow::{Context, Result, bail, ensure};
use axum::body::Body;
use axum::http::{StatusCode, header};
use common::docker::*;
use common::*;
use futures::{SinkExt, StreamExt};
use gpuhub_docker::DockerRuntime;
use http_body_util::BodyExt;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn get(url: &str, cookie: Option<&str>) -> Result<http::Response<hyper::body::Incoming>> {
    let mut req = http::Request::get(url);
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    Ok(client().request(req.body(Body::empty())?).await?)
}

async fn body_text(res: http::Response<hyper::body::Incoming>) -> Result<String> {
    Ok(text(&res.into_body().collect().await?.to_bytes()))
}

#[tokio::test(flavor = "multi_thread")]
async fn jupyterlab_works_through_the_proxy() -> Result<()> {
    let runtime = DockerRuntime::connect().await?;
    let (_c, app) = jupyterlab(&runtime).await?;
    let proxy = proxy_to(app).await?;
    let base = format!("http://{proxy}{PREFIX}");

    // Wait for the server to come up, through the proxy.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match get(&format!("{base}api"), None).await {
            Ok(res) if res.status() == StatusCode::OK => break,
            Ok(res) if Instant::now() > deadline => bail!("jupyter api: {}", res.status()),
            Err(e) if Instant::now() > deadline => bail!("jupyter api: {e}"),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }

    // The root redirects to the lab, under the prefix.
    let res = get(&base, None).await?;
    assert!(res.status().is_redirection(), "{}", res.status());
    let location = res.headers()[header::LOCATION].to_str()?.to_string();
    assert!(location.starts_with(PREFIX) || location.contains(PREFIX), "{location}");

    // The lab page: HTML whose assets live under the prefix, and they load through the proxy.
    let res = get(&format!("{base}lab"), Some("gpuhub_session=secret")).await?;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers()[header::CONTENT_TYPE].to_str()?.starts_with("text/html"));
    let xsrf = res
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("_xsrf=").map(|v| v.split(';').next().unwrap_or("").to_string()))
        .context("no _xsrf cookie")?;
    let page = body_text(res).await?;
    assert!(page.contains("JupyterLab"), "{page}");
    let script = page
        .split("src=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .find(|s| s.starts_with(PREFIX) && s.contains("static"))
        .with_context(|| format!("no script under {PREFIX}: {page}"))?
        .to_string();
    let res = get(&format!("http://{proxy}{script}"), None).await?;
    assert_eq!(res.status(), StatusCode::OK, "{script}");
    let js = res.into_body().collect().await?.to_bytes();
    assert!(js.len() > 1000, "{script} is {} bytes", js.len());

    // A kernel via REST (with Jupyter's XSRF cookie and header; the hub's cookie is stripped).
    let cookie = format!("gpuhub_session=secret; _xsrf={xsrf}");
    let req = http::Request::post(format!("{base}api/kernels"))
        .header(header::COOKIE, &cookie)
        .header("x-xsrftoken", &xsrf)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"name":"python3"}"#))?;
    let res = client().request(req).await?;
    let status = res.status();
    let kernel: serde_json::Value = serde_json::from_str(&body_text(res).await?)?;
    ensure!(status == StatusCode::CREATED, "create kernel: {status} {kernel}");
    let kernel_id = kernel["id"].as_str().context("kernel id")?.to_string();

    // execute_request over the kernel's channels WebSocket.
    let session = uuid::Uuid::new_v4().to_string();
    let url = format!("ws://{proxy}{PREFIX}api/kernels/{kernel_id}/channels?session_id={session}");
    let mut req = url.into_client_request()?;
    req.headers_mut().insert(header::COOKIE, cookie.parse()?);
    let (mut ws, _) = tokio::time::timeout(Duration::from_secs(30), tokio_tungstenite::connect_async(req)).await??;
    let msg_id = uuid::Uuid::new_v4().to_string();
    let request = serde_json::json!({
        "header": {
            "msg_id": msg_id, "username": "alice", "session": session, "msg_type": "execute_request",
            "version": "5.3", "date": "2026-01-01T00:00:00Z"
        },
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {
            "code": "1+1", "silent": false, "store_history": true, "user_expressions": {},
            "allow_stdin": false, "stop_on_error": true
        }
    });
    ws.send(Message::text(request.to_string())).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let result = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, ws.next()).await.context("no execute_result")?.context("closed")??;
        let Message::Text(t) = msg else { continue };
        let v: serde_json::Value = serde_json::from_str(t.as_str())?;
        if v["parent_header"]["msg_id"] == msg_id.as_str() && v["header"]["msg_type"] == "execute_result" {
            break v;
        }
        if v["header"]["msg_type"] == "error" {
            bail!("kernel error: {v}");
        }
    };
    assert_eq!(result["content"]["data"]["text/plain"], "2", "{result}");
    ws.close(None).await?;
    Ok(())
}
