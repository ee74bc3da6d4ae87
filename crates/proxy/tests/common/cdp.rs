//! Headless Chromium driven over the DevTools protocol: open a page, evaluate JavaScript in it.

use anyhow::{Context, Result, bail};
use futures::{SinkExt, StreamExt};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless Chromium (killed on drop) and one page in it.
#[derive(Debug)]
pub struct Browser {
    _child: tokio::process::Child,
    _profile: tempfile::TempDir,
    ws: Ws,
    next: u64,
    session: String,
}

impl Browser {
    /// Starts `chromium --headless` and opens `url` in a new page.
    pub async fn open(url: &str) -> Result<Self> {
        let profile = tempfile::tempdir()?;
        let mut child = tokio::process::Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
            .args(["--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start chromium (apt-get install chromium)")?;
        let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
        let endpoint = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    return Ok(url.trim().to_string());
                }
            }
            bail!("chromium exited before listening")
        })
        .await
        .context("chromium did not start")??;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (ws, _) = tokio_tungstenite::connect_async(endpoint.as_str()).await?;
        let mut b = Self { _child: child, _profile: profile, ws, next: 0, session: String::new() };
        let target = b.call("Target.createTarget", serde_json::json!({ "url": url }), false).await?;
        let target = target["targetId"].as_str().context("targetId")?.to_string();
        let attached =
            b.call("Target.attachToTarget", serde_json::json!({ "targetId": target, "flatten": true }), false).await?;
        b.session = attached["sessionId"].as_str().context("sessionId")?.to_string();
        Ok(b)
    }

    async fn call(&mut self, method: &str, params: serde_json::Value, in_page: bool) -> Result<serde_json::Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = serde_json::json!({ "id": id, "method": method, "params": params });
        if in_page {
            msg["sessionId"] = self.session.clone().into();
        }
        self.ws.send(Message::text(msg.to_string())).await?;
        loop {
            let Message::Text(t) = self.ws.next().await.context("devtools closed")?? else { continue };
            let v: serde_json::Value = serde_json::from_str(t.as_str())?;
            if v["id"] == id {
                if let Some(e) = v.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise); returns its value.
    pub async fn eval(&mut self, expression: &str) -> Result<serde_json::Value> {
        let params = serde_json::json!({ "expression": expression, "awaitPromise": true, "returnByValue": true });
        let r = self.call("Runtime.evaluate", params, true).await?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!("javascript threw: {e}");
        }
        Ok(r["result"]["value"].clone())
    }

    /// Evaluates `expression` until it is `true`.
    pub async fn wait_for(&mut self, expression: &str, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.eval(expression).await.ok() == Some(serde_json::Value::Bool(true)) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                let html = self.eval("document.documentElement.outerHTML.slice(0, 3000)").await.unwrap_or_default();
                bail!("{expression} never became true; page: {html}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
