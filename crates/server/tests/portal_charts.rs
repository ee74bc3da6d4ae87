//! The portal's charts and GPU grid over HTTP, on the fake engine with a manual clock and a scripted GPU
//! sampler: the numbers each page shows (its table, the chart's fallback) are the API's for the same
//! window — the usage page's GPU-hours are `GET /api/v1/usage`'s, a workload's chart points `GET
//! /api/v1/workloads/{name}/metrics`'s, a node's history `GET /api/v1/nodes/metrics`'s, the grid's
//! tiles `GET /api/v1/nodes`'s and `metrics/live`'s —; users see only their own usage, admins
//! everyone's; the CSV holds the chart's rows.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use common::{ADMIN_PASSWORD, Hub};
use gpuhub_controller::clock::ManualClock;
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuSharing;
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

const GIB: u64 = 1 << 30;

/// A hub on a manual clock at `t0` and a scripted sampler, one node whose GPUs are in `modes`.
async fn hub(t0: DateTime<Utc>, modes: &[GpuSharing]) -> (Hub, Arc<ManualClock>, Arc<FakeGpuSampler>) {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    Hub::start_scripted(t0, modes, |cfg, _| {
        cfg.guard.grace_secs = 3600;
        cfg.idle.after_secs = 3600;
    })
    .await
}

/// A browser session's cookie for `user`.
async fn cookie(hub: &Hub, user: &str, password: &str) -> String {
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned()
}

/// A page load with the cookie: status, body, headers.
async fn page(hub: &Hub, cookie: &str, path: &str) -> (StatusCode, String, reqwest::header::HeaderMap) {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = client.get(format!("{}{path}", hub.url)).header(COOKIE, cookie).header("sec-fetch-mode", "navigate");
    let r = r.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    (status, r.text().await.unwrap(), headers)
}

/// Keeps a page as `target/screenshots/charts-<name>.html` (its style beside it), to be looked at.
fn keep(name: &str, html: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target/screenshots");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::copy(root.join("crates/server/src/portal/portal.css"), dir.join("portal.css"));
    let _ = std::fs::write(dir.join(format!("charts-{name}.html")), html.replace("/static/portal.css", "portal.css"));
}

/// The value of attribute `name` in the first tag of `html` that holds `marker`.
fn attr(html: &str, marker: &str, name: &str) -> Option<String> {
    let at = html.find(marker)?;
    let tag_start = html[..at].rfind('<')?;
    let tag = &html[tag_start..tag_start + html[tag_start..].find('>')?];
    let key = format!(" {name}=\"");
    let v = tag.split(&key).nth(1)?;
    Some(v[..v.find('"')?].replace("&amp;", "&"))
}

/// Each `<tr …>…</tr>` of `html` that holds `marker` in its opening tag.
fn rows<'a>(html: &'a str, marker: &str) -> Vec<&'a str> {
    html.match_indices("<tr ")
        .map(|(i, _)| &html[i..i + html[i..].find("</tr>").unwrap_or(html.len() - i)])
        .filter(|r| r[..r.find('>').unwrap_or(r.len())].contains(marker))
        .collect()
}

/// The text in the first ` data-{name}="…"` of a row.
fn val(row: &str, name: &str) -> Option<String> {
    let key = format!(" data-{name}=\"");
    let v = row.split(&key).nth(1)?;
    Some(v[..v.find('"')?].to_owned())
}

/// The number in the first ` data-{name}="…"` of a row.
fn num(row: &str, name: &str) -> Option<f64> {
    val(row, name)?.parse().ok()
}

fn enc(t: &str) -> String {
    t.replace('+', "%2B").replace(':', "%3A")
}

/// The API's row of `key` = `value` in a usage report.
fn api_row<'a>(report: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    report["rows"].as_array().unwrap().iter().find(|r| r[key] == value)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Waits for `n` more monitoring rounds.
async fn rounds(hub: &Hub, n: usize) {
    let mut r = hub.server.as_ref().unwrap().state.metrics.rounds();
    for _ in 0..n {
        tokio::time::timeout(std::time::Duration::from_secs(10), r.changed()).await.unwrap().unwrap();
    }
}

/// Runs `w` for `token`, its one member the host PID `pid`; returns the GPU it got.
async fn running_with_pid(hub: &Hub, token: &str, w: Value, pid: u32) -> String {
    let name = w["name"].as_str().unwrap().to_owned();
    hub.submit(token, w).await;
    let v = hub.wait_state(token, &name, "running").await;
    let run = hub.run(token, &name).await;
    let usage = MemberUsage {
        index: 0,
        cpu_seconds: 1.0,
        memory_used: Bytes(512 << 20),
        memory_limit: Some(Bytes(GIB)),
        pids: vec![pid],
    };
    hub.runtime.set_usage(&run, vec![usage]);
    v["gpus"][0].as_str().unwrap_or_default().to_owned()
}

fn job(name: &str, gpus: u32) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": gpus}})
}

fn share(name: &str, milli: u32, memory: &str) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpu_milli": milli, "gpu_memory": memory}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_page_shows_the_apis_gpu_hours_to_whom_may_see_them() {
    // on the hour, so the buckets below are whole hours
    let t0: DateTime<Utc> = Utc::now().with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
    let (hub, clock, sampler) = hub(t0, &[GpuSharing::Guard, GpuSharing::Guard]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    // alice and bob each take a whole GPU at t0: alice's half busy, bob's fully
    let ga = running_with_pid(&hub, &alice, job("a1", 1), 4001).await;
    let gb = running_with_pid(&hub, &bob, job("b1", 1), 4002).await;
    sampler.set(&ga, 50.0, Bytes(GIB));
    sampler.set(&gb, 100.0, Bytes(GIB));
    rounds(&hub, 2).await;
    // alice's job ends at t0+2h; bob's runs on; the page is looked at at t0+3h
    clock.set(t0 + TimeDelta::hours(2));
    hub.runtime.exit(&hub.run(&alice, "a1").await, 0);
    hub.wait_state(&alice, "a1", "succeeded").await;
    clock.set(t0 + TimeDelta::hours(3));
    rounds(&hub, 2).await;

    let (ca, cb, cadmin) = (
        cookie(&hub, "alice", "alice-password").await,
        cookie(&hub, "bob", "bob-password").await,
        cookie(&hub, "admin", ADMIN_PASSWORD).await,
    );
    let api = |token: String, query: String| {
        let hub = &hub;
        async move {
            let (s, v) = hub.call(Method::GET, &format!("/api/v1/usage?{query}"), Some(&token), None).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            v
        }
    };

    // alice's page: her own GPU-hours only, equal to the API's for the same window
    let (s, html, _) = page(&hub, &ca, "/usage?range=day").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(html.contains("<svg"), "a chart: {html}");
    let from = attr(&html, "class=\"usage-summary\"", "data-from").unwrap();
    let to = attr(&html, "class=\"usage-summary\"", "data-to").unwrap();
    assert_eq!(
        from.parse::<DateTime<Utc>>().unwrap(),
        t0 - TimeDelta::hours(20),
        "the last 24 hours, to the next hour"
    );
    assert_eq!(to.parse::<DateTime<Utc>>().unwrap(), t0 + TimeDelta::hours(4));
    let window = format!("from={}&to={}", enc(&from), enc(&to));
    let report = api(alice.clone(), format!("by=user&{window}")).await;
    let row = rows(&html, "data-group=\"alice\"")[0];
    let want = api_row(&report, "user", "alice").unwrap();
    assert!(close(num(row, "gpu-hours").unwrap(), 2.0), "{row}");
    assert!(close(num(row, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{row} vs {want}");
    assert!(close(num(row, "gpu-used-hours").unwrap(), want["gpu_used_hours"].as_f64().unwrap()), "{row} vs {want}");
    assert!(want["gpu_used_hours"].as_f64().unwrap() > 0.0, "measured use: {want}");
    assert!(!html.contains("data-group=\"bob\""), "alice sees bob's usage: {html}");
    // each hour's bar: the API's figures for that hour, split by GPU model
    let buckets = rows(&html, "data-model=");
    assert_eq!(buckets.len(), 2, "a1 held its GPU for two hours: {buckets:?}");
    for b in &buckets {
        let bf = val(b, "from").unwrap();
        let bt = (bf.parse::<DateTime<Utc>>().unwrap() + TimeDelta::hours(1)).to_rfc3339();
        let r = api(alice.clone(), format!("by=user,model&from={}&to={}", enc(&bf), enc(&bt))).await;
        let want = &r["rows"][0];
        assert_eq!(want["model"], "H200");
        assert!(b.contains("data-model=\"H200\""), "{b}");
        assert!(close(num(b, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{b} vs {want}");
        assert!(close(num(b, "gpu-used-hours").unwrap(), want["gpu_used_hours"].as_f64().unwrap()), "{b} vs {want}");
        assert!(close(num(b, "gpu-hours").unwrap(), 1.0), "{b}");
    }

    // the CSV: the chart's rows, alice's only
    let (s, csv, headers) = page(&hub, &ca, "/usage?range=day&format=csv").await;
    assert_eq!(s, StatusCode::OK, "{csv}");
    assert!(headers["content-type"].to_str().unwrap().starts_with("text/csv"));
    assert!(headers["content-disposition"].to_str().unwrap().contains("attachment"));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("from,to,user,model,gpu_hours,gpu_used_hours"));
    let lines: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(lines.len(), buckets.len(), "{csv}");
    for (l, b) in lines.iter().zip(&buckets) {
        assert_eq!((l[2], l[3]), ("alice", "H200"), "{csv}");
        assert_eq!(l[0], val(b, "from").unwrap(), "{csv}");
        assert!(close(l[4].parse().unwrap(), num(b, "gpu-hours").unwrap()), "{csv}");
        assert!(close(l[5].parse().unwrap(), num(b, "gpu-used-hours").unwrap()), "{csv}");
    }

    // a script's fetch of it (an app's, on this origin in path mode) is refused
    let fetched = hub
        .http
        .get(format!("{}/usage?range=day&format=csv", hub.url))
        .header(COOKIE, &ca)
        .header("sec-fetch-mode", "cors")
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), StatusCode::FORBIDDEN);

    // the admin sees everyone's, each equal to the API's; bob's open holding counts up to now
    let (s, html, _) = page(&hub, &cadmin, "/usage?range=day").await;
    assert_eq!(s, StatusCode::OK);
    keep("usage-admin", &html);
    let report = api(admin.clone(), format!("by=user&{window}")).await;
    for (user, hours) in [("alice", 2.0), ("bob", 3.0)] {
        let row = rows(&html, &format!("data-group=\"{user}\""))[0];
        let want = api_row(&report, "user", user).unwrap();
        assert!(close(num(row, "gpu-hours").unwrap(), hours), "{user}: {row}");
        assert!(close(num(row, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{row} vs {want}");
        assert!(
            close(num(row, "gpu-used-hours").unwrap(), want["gpu_used_hours"].as_f64().unwrap()),
            "{row} vs {want}"
        );
    }
    let total = rows(&html, "data-group=\"total\"")[0];
    assert!(close(num(total, "gpu-hours").unwrap(), report["total"]["gpu_hours"].as_f64().unwrap()), "{total}");
    // per team queue, and one user's, for the admin
    let (_, html, _) = page(&hub, &cadmin, "/usage?range=day&by=queue").await;
    let report = api(admin.clone(), format!("by=queue&{window}")).await;
    let row = rows(&html, "data-group=\"default\"")[0];
    let want = api_row(&report, "queue", "default").unwrap();
    assert!(close(num(row, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{row} vs {want}");
    let (s, html, _) = page(&hub, &cadmin, "/usage?range=day&user=bob").await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains("data-group=\"bob\"") && !html.contains("data-group=\"alice\""), "{html}");
    // a week and a month: the same hours, the API's for their windows
    for range in ["week", "month"] {
        let (s, html, _) = page(&hub, &cb, &format!("/usage?range={range}")).await;
        assert_eq!(s, StatusCode::OK, "{html}");
        let from = attr(&html, "class=\"usage-summary\"", "data-from").unwrap();
        let to = attr(&html, "class=\"usage-summary\"", "data-to").unwrap();
        let report = api(bob.clone(), format!("by=user&from={}&to={}", enc(&from), enc(&to))).await;
        let row = rows(&html, "data-group=\"bob\"")[0];
        let want = api_row(&report, "user", "bob").unwrap();
        assert!(close(num(row, "gpu-hours").unwrap(), 3.0), "{range}: {row}");
        assert!(close(num(row, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{row} vs {want}");
        // each day's bar: the API's report by day
        let days = api(bob.clone(), format!("by=user,model,day&from={}&to={}", enc(&from), enc(&to))).await;
        let bars = rows(&html, "data-model=");
        assert_eq!(bars.len(), days["rows"].as_array().unwrap().len(), "{range}: {days}");
        for b in bars {
            let day = &val(b, "from").unwrap()[..10];
            let want = api_row(&days, "day", day).unwrap_or_else(|| panic!("no {day} in {days}"));
            assert!(close(num(b, "gpu-hours").unwrap(), want["gpu_hours"].as_f64().unwrap()), "{b} vs {want}");
            assert!(
                close(num(b, "gpu-used-hours").unwrap(), want["gpu_used_hours"].as_f64().unwrap()),
                "{b} vs {want}"
            );
        }
    }
    // a user may not see another's usage, nor choose a window that is not offered
    let (s, _, _) = page(&hub, &cb, "/usage?user=alice").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = page(&hub, &cb, "/usage?range=decade").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workloads_chart_holds_its_history_with_its_grant_and_events() {
    let t0 = Utc::now();
    let (hub, clock, sampler) = hub(t0, &[GpuSharing::Guard]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.user(&admin, "bob").await;
    let gpu = running_with_pid(&hub, &alice, share("s1", 500, "10GiB"), 4001).await;
    sampler.set(&gpu, 70.0, Bytes(8 * GIB));
    sampler.set_processes(&gpu, vec![GpuProcess { pid: 4001, memory_used: Bytes(6 * GIB) }]);
    // a minute of samples, one every 10 s (a sample's time is the clock's)
    for k in 1..=6 {
        clock.set(t0 + TimeDelta::seconds(10 * k));
        rounds(&hub, 2).await;
    }

    let ca = cookie(&hub, "alice", "alice-password").await;
    let (s, html, _) = page(&hub, &ca, "/workloads/s1").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    keep("workload-share", &html);
    for title in
        ["GPU utilisation", "GPU memory against its grant", "CPU against its limit", "Memory against its limit"]
    {
        assert!(html.contains(title), "{title}: {html}");
    }
    assert!(html.contains("<svg") && html.contains("grant"), "{html}");
    assert!(html.contains("data-refresh=\"/workloads/s1/chart\""), "refreshed while it runs: {html}");
    assert!(html.contains("data-mark=\"started\""), "its start on the time axis: {html}");
    // the table's points are the API's for the same window
    let marker = "class=\"metrics\"";
    let (from, to, step) = (
        attr(&html, marker, "data-from").unwrap(),
        attr(&html, marker, "data-to").unwrap(),
        attr(&html, marker, "data-step").unwrap(),
    );
    let path = format!("/api/v1/workloads/s1/metrics?from={}&to={}&step={step}", enc(&from), enc(&to));
    let (s, h) = hub.call(Method::GET, &path, Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let points = h["points"].as_array().unwrap();
    let table = rows(&html, "data-member=");
    assert!(!points.is_empty());
    assert_eq!(table.len(), points.len(), "{h}");
    for (r, p) in table.iter().zip(points) {
        assert_eq!(
            val(r, "at").unwrap().parse::<DateTime<Utc>>().unwrap(),
            p["at"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(num(r, "gpu-util"), p["gpu_utilization_pct"].as_f64(), "{r} vs {p}");
        assert_eq!(num(r, "gpu-memory"), p["gpu_memory_used"].as_f64(), "{r} vs {p}");
        assert_eq!(num(r, "memory"), p["memory_used"].as_f64(), "{r} vs {p}");
    }
    assert!(points.iter().any(|p| p["gpu_utilization_pct"].as_f64() == Some(70.0)), "{h}");
    assert!(points.iter().any(|p| p["gpu_memory_used"].as_u64() == Some(6 * GIB)), "{h}");
    // the section alone, for the script: the owner's and an admin's; another user's is 404
    let (s, frag, _) = page(&hub, &ca, "/workloads/s1/chart").await;
    assert_eq!(s, StatusCode::OK);
    assert!(frag.starts_with("<section") && frag.contains("class=\"metrics\""), "{frag}");
    let (s, _, _) = page(&hub, &cookie(&hub, "admin", ADMIN_PASSWORD).await, "/workloads/s1/chart?owner=alice").await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = page(&hub, &cookie(&hub, "bob", "bob-password").await, "/workloads/s1/chart?owner=alice").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // stopped: marked, and no longer refreshed
    clock.set(t0 + TimeDelta::seconds(90));
    rounds(&hub, 2).await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/s1/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, html, _) = page(&hub, &ca, "/workloads/s1").await;
    assert!(html.contains("data-mark=\"stopped\""), "{html}");
    assert!(!html.contains("data-refresh="), "{html}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_grid_shows_each_gpus_holders_mode_and_figures_and_a_nodes_history() {
    let t0 = Utc::now();
    let (hub, clock, sampler) = hub(t0, &[GpuSharing::Guard, GpuSharing::Unenforced]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    // alice's idle workspace on one GPU, two users' shares of the other (alice's above its grant)
    let ws = json!({"name": "ws", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 1, "memory": "1GiB", "gpus": 1}});
    let gw = running_with_pid(&hub, &alice, ws, 4003).await;
    let g1 = running_with_pid(&hub, &alice, share("s1", 500, "10GiB"), 4001).await;
    let g2 = running_with_pid(&hub, &bob, share("s2", 250, "4GiB"), 4002).await;
    assert_eq!(g1, g2, "shares of one GPU");
    assert_ne!(gw, g1);
    sampler.set(&g1, 80.0, Bytes(15 * GIB));
    sampler.set_processes(
        &g1,
        vec![
            GpuProcess { pid: 4001, memory_used: Bytes(12 * GIB) },
            GpuProcess { pid: 4002, memory_used: Bytes(3 * GIB) },
        ],
    );
    sampler.set_sensors(&g1, Some(250.0), Some(67.0));
    sampler.set(&gw, 0.0, Bytes(0));
    hub.until_round(&alice, "ws", |v| v["idle"]["since"].is_string()).await;
    rounds(&hub, 2).await;

    let ca = cookie(&hub, "alice", "alice-password").await;
    let (s, html, _) = page(&hub, &ca, "/nodes").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    keep("nodes-grid", &html);
    assert!(html.contains("data-live=\"changes\"") && html.contains("data-poll="), "live: {html}");
    // every tile: the API's mode and holders, the latest round's figures
    let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
    let (_, live) = hub.call(Method::GET, "/api/v1/metrics/live", Some(&admin), None).await;
    let tiles: Vec<&str> =
        html.split("class=\"tile ").skip(1).map(|t| &t[..t.find("class=\"tile ").unwrap_or(t.len())]).collect();
    let gpus = nodes[0]["gpus"].as_array().unwrap();
    assert_eq!(tiles.len(), gpus.len());
    for g in gpus {
        let uuid = g["uuid"].as_str().unwrap();
        let tile = tiles.iter().find(|t| t.contains(&format!("data-gpu=\"{uuid}\""))).unwrap();
        let mode = g["sharing"].as_str().unwrap_or("none");
        assert!(tile.contains(&format!("data-sharing=\"{mode}\"")), "{mode}: {tile}");
        let mut holders: Vec<String> = match g.get("holder") {
            Some(h) => vec![format!("{}/{}", h["owner"].as_str().unwrap(), h["workload"].as_str().unwrap())],
            None => g["shares"].as_array().map_or(vec![], |s| {
                s.iter()
                    .map(|s| format!("{}/{}", s["owner"].as_str().unwrap(), s["workload"].as_str().unwrap()))
                    .collect()
            }),
        };
        holders.sort();
        let mut shown: Vec<String> =
            tile.split("data-holder=\"").skip(1).map(|h| h[..h.find('"').unwrap()].to_owned()).collect();
        shown.sort();
        assert_eq!(shown, holders, "{tile}");
        let m = live["gpus"].as_array().unwrap().iter().find(|m| m["uuid"] == uuid).unwrap();
        assert_eq!(num(tile, "util"), m["utilization_pct"].as_f64(), "{tile}");
        assert_eq!(num(tile, "memory-used"), m["memory_used"].as_f64(), "{tile}");
    }
    let shared = tiles.iter().find(|t| t.contains(&format!("data-gpu=\"{g1}\""))).unwrap();
    // above its grant is marked where a mode enforces grants
    let over = if shared.contains("data-sharing=\"guard\"") { " data-over=\"true\">" } else { ">" };
    assert!(shared.contains(&format!("data-holder=\"alice/s1\" data-milli=\"500\"{over}")), "{shared}");
    assert!(shared.contains("data-holder=\"bob/s2\" data-milli=\"250\">"), "within its grant: {shared}");
    assert!(shared.contains("data-temperature=\"67\""), "{shared}");
    assert!(shared.starts_with("held\""), "{shared}");
    let whole = tiles.iter().find(|t| t.contains(&format!("data-gpu=\"{gw}\""))).unwrap();
    assert!(whole.starts_with("idle\"") && whole.contains("data-whole=\"true\""), "the idle workspace's GPU: {whole}");
    // the grid alone, for the script
    let (s, frag, _) = page(&hub, &ca, "/nodes?fragment=live").await;
    assert_eq!(s, StatusCode::OK);
    assert!(frag.starts_with("<div class=\"grid-live\"") && frag.contains(&format!("data-gpu=\"{g1}\"")), "{frag}");

    // a node's page: its GPUs' history, the API's for the same window
    for k in 1..=6 {
        clock.set(t0 + TimeDelta::seconds(10 * k));
        rounds(&hub, 2).await;
    }
    let (s, html, _) = page(&hub, &ca, "/nodes/test-node?range=hour").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    keep("node-history", &html);
    assert!(html.contains("<svg") && html.contains("Temperature"), "{html}");
    let marker = "class=\"gpu-history\"";
    let (from, to, step) = (
        attr(&html, marker, "data-from").unwrap(),
        attr(&html, marker, "data-to").unwrap(),
        attr(&html, marker, "data-step").unwrap(),
    );
    let path = format!("/api/v1/nodes/metrics?node=test-node&from={}&to={}&step={step}", enc(&from), enc(&to));
    let (s, h) = hub.call(Method::GET, &path, Some(&bob), None).await;
    assert_eq!(s, StatusCode::OK, "{h}");
    let points = h["points"].as_array().unwrap();
    let table = rows(&html, "data-gpu=");
    assert!(!points.is_empty());
    assert_eq!(table.len(), points.len(), "{h}");
    for (r, p) in table.iter().zip(points) {
        assert!(r.contains(&format!("data-gpu=\"{}\"", p["uuid"].as_str().unwrap())), "{r} vs {p}");
        assert_eq!(num(r, "util"), p["utilization_pct"].as_f64(), "{r} vs {p}");
        assert_eq!(num(r, "memory-used"), p["memory_used"].as_f64(), "{r} vs {p}");
    }
    let (s, _, _) = page(&hub, &ca, "/nodes/no-such-node").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_workloads_chart_marks_the_preemption_and_its_restart() {
    use gpuhub_sched::{Preemption, QueueSpec, Quota};
    let hub = Hub::start_with(|cfg| {
        let gpu = |n: u64| Quota { gpu_milli: n * 1000, cpu_milli: 8000, memory: 32 << 30 };
        cfg.scheduler.queues = vec![
            QueueSpec {
                name: "vision".into(),
                guarantee: gpu(1),
                borrow_limit: Some(gpu(1)),
                ..QueueSpec::open("vision")
            },
            QueueSpec { name: "nlp".into(), guarantee: gpu(1), borrow_limit: None, ..QueueSpec::open("nlp") },
        ];
        cfg.queue_members = std::collections::BTreeMap::from([("nlp".into(), vec!["bob".into()])]);
        cfg.scheduler.preemption = Preemption { enabled: true, grace_ms: 0 };
    })
    .await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let queued = |name: &str, queue: &str| {
        let mut w = job(name, 1);
        w["queue"] = json!(queue);
        w
    };
    // bob's second GPU is borrowed; alice's job in her queue takes it back, then ends
    hub.submit(&bob, queued("b1", "nlp")).await;
    hub.wait_state(&bob, "b1", "running").await;
    hub.submit(&bob, queued("b2", "nlp")).await;
    hub.wait_state(&bob, "b2", "running").await;
    hub.submit(&alice, queued("a1", "vision")).await;
    hub.wait_state(&alice, "a1", "running").await;
    hub.wait_state(&bob, "b2", "queued").await;
    hub.runtime.exit(&hub.run(&alice, "a1").await, 0);
    hub.wait_state(&bob, "b2", "running").await;

    let (s, html, _) = page(&hub, &cookie(&hub, "bob", "bob-password").await, "/workloads/b2").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    for mark in ["started", "requeued", "restart 1"] {
        assert!(html.contains(&format!("data-mark=\"{mark}\"")), "{mark}: {html}");
    }
    // what the workload said then: who preempted it
    let requeued = &html[html.find("data-mark=\"requeued\"").unwrap()..];
    let requeued = &requeued[..requeued.find("</li>").unwrap()];
    assert!(requeued.contains("preempted by alice/a1"), "{requeued}");
}
