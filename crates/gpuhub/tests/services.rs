//! Services end to end: the real `gpuhub` binary as server and CLI, the real Docker engine. A rolling
//! update (`gpuhub edit`) keeps the service's URL answering the whole time: the old run serves until
//! the new one passes its readiness check, then the new one answers; an update whose new run exits
//! fails and the old run goes on serving. Needs root and a Docker engine.

mod common;

use anyhow::{Context as _, Result, ensure};
use common::{Hub, IMAGE, PASSWORD};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A busybox `httpd` serving `/index.html` saying `text`, after `delay` seconds.
fn server(text: &str, delay: u32) -> String {
    format!(
        "sleep {delay}; mkdir -p /tmp/www && echo {text} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
    )
}

/// GETs `url` with `token` every 20 ms until `stop`; each answer's status and body, in order.
async fn keep_asking(url: String, token: String, stop: Arc<AtomicBool>) -> Vec<(u16, String)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut seen = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let answer = match http.get(&url).bearer_auth(&token).send().await {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default().trim().to_owned()),
            Err(e) => (0, e.to_string()),
        };
        seen.push(answer);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

/// The answers as runs of the same answer: `[(200, "v1"), (200, "v2")]` for v1 … v1 v2 … v2.
fn runs_of(seen: &[(u16, String)]) -> Vec<(u16, String)> {
    let mut out: Vec<(u16, String)> = Vec::new();
    for s in seen {
        if out.last() != Some(s) {
            out.push(s.clone());
        }
    }
    out
}

#[test]
fn a_rolling_update_keeps_the_url_answering_and_then_answers_from_the_new_version() -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let base = hub.server.url();
    let small = ["--cpus", "0.1", "--memory", "32MiB"];
    let mut args = vec!["service", "run", "--name", "web", "--port", "8080", "--ready-http", "/index.html"];
    args.extend(["--image", IMAGE]);
    args.extend(small);
    let v1 = server("v1", 0);
    args.extend(["--", "sh", "-c", &v1]);
    alice.ok(&args)?;
    alice.wait_until("web", "ready", |w| w["service"]["ready"] == json!(true))?;
    let login: Value = rt.block_on(async {
        let http = reqwest::Client::new();
        let body = json!({"username": alice.name, "password": PASSWORD});
        http.post(format!("{base}/api/v1/login")).json(&body).send().await?.error_for_status()?.json().await
    })?;
    let token = login["token"].as_str().context("login gave no token")?.to_owned();
    let url = format!("{base}/w/{}/web/service/index.html", alice.name);

    // the update's new run is ready 3 s after it starts: all that time the old one answers
    let stop = Arc::new(AtomicBool::new(false));
    let asking = rt.spawn(keep_asking(url.clone(), token.clone(), stop.clone()));
    std::thread::sleep(Duration::from_millis(500));
    let v2 = server("v2", 3);
    let edit = ["edit", "web", "--env", "MODE=v2", "--", "sh", "-c", &v2];
    let out = alice.output(&edit)?;
    ensure!(out.status.success(), "gpuhub edit: {}", common::describe(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    ensure!(said.contains("a new run starts beside the serving one"), "gpuhub edit said: {said}");
    let w = alice.wait_until("web", "updated", |w| w["service"]["update"]["state"] != json!("rolling"))?;
    ensure!(w["service"]["update"]["state"] == "done", "the update did not end done: {w:#}");
    ensure!(w["env"]["MODE"] == "v2", "the new terms are the service's: {w:#}");
    // past the old run's drain and stop
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::SeqCst);
    let seen = rt.block_on(asking)?;
    let runs = runs_of(&seen);
    let want = [(200, "v1".to_owned()), (200, "v2".to_owned())];
    ensure!(runs == want, "answers during the update, as runs of the same answer: {runs:?} (want {want:?})");
    let v1_count = seen.iter().filter(|s| s.1 == "v1").count();
    eprintln!("{} answers during the update: {v1_count} from v1, then {} from v2", seen.len(), seen.len() - v1_count);
    let history: Vec<String> = (w["history"].as_array().into_iter().flatten())
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect();
    ensure!(history.iter().any(|m| m.contains("the new run serves, the old one is stopped")), "history: {history:?}");
    let containers = common::containers_of(w["id"].as_str().context("id")?)?;
    let running =
        common::docker(&["ps", "-q", "--filter", &format!("label=gpuhub.workload={}", w["id"].as_str().unwrap())])?;
    ensure!(running.lines().count() == 1, "one container runs after the update: {running:?} of {containers:?}");

    // an update whose new run exits: it fails, and v2 goes on answering
    alice.ok(&["edit", "web", "--", "sh", "-c", "exit 4"])?;
    let w = alice.wait_until("web", "failed update", |w| w["service"]["update"]["state"] == json!("failed"))?;
    let message = w["service"]["update"]["message"].as_str().unwrap_or_default();
    ensure!(message.contains("the new run exited with code 4 before it was ready"), "{w:#}");
    let (status, text) = rt.block_on(async {
        let r = reqwest::Client::new().get(&url).bearer_auth(&token).send().await?;
        Ok::<_, reqwest::Error>((r.status(), r.text().await?))
    })?;
    ensure!(status == 200 && text.trim() == "v2", "after the failed update v2 answers: {status} {text}");
    alice.ok(&["rm", "web"])?;
    Ok(())
}
