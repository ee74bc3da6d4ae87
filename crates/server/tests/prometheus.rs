//! `GET /metrics`: the exposition read back line by line (every family, dcgm-exporter's names and
//! labels with the holders', escaping), who may scrape (address and token), a real Prometheus
//! (`/usr/bin/prometheus`, Debian's `prometheus` package) scraping an in-process hub and answering
//! PromQL about alice's GPU, and the Grafana dashboard in `deploy/grafana` asking only for series
//! gpuhub exports (and, in that Prometheus, asking in valid PromQL).

use gpuhub_testkit as common;
#[path = "prometheus/parse.rs"]
mod parse;

use common::{Hub, job};
use gpuhub_core::Bytes;
use gpuhub_core::metrics::MetricsSnapshot;
use gpuhub_core::node::GpuDevice;
use gpuhub_driver::MemberUsage;
use gpuhub_gpu::{FakeGpuSampler, GpuProcess};
use gpuhub_server::config::Config;
use parse::{Scrape, parse};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The metrics token the hubs here require.
const TOKEN: &str = "scrape-secret-4f1c2a";

/// A model name with every character a label value must escape.
const AWKWARD_MODEL: &str = "H200 \"SXM\" \\ 141GB\nrev 2";

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The test node's two GPUs as the sampler sees them; the second has an awkward model name.
fn devices(awkward: bool) -> Vec<GpuDevice> {
    let mut gpus = common::node(2).gpus;
    if awkward {
        gpus[1].model = AWKWARD_MODEL.into();
    }
    gpus
}

/// A hub sampling every second, with the metrics token, plus `tweak`; and its GPU sampler.
async fn sampled_hub(awkward: bool, tweak: impl FnOnce(&mut Config)) -> (Hub, Arc<FakeGpuSampler>) {
    let sampler = Arc::new(FakeGpuSampler::new(devices(awkward)));
    let hub = Hub::start_sampled(
        |c| {
            c.monitor.interval_secs = 1;
            c.monitor.metrics_token = Some(TOKEN.into());
            tweak(c);
        },
        sampler.clone(),
    )
    .await;
    (hub, sampler)
}

/// Waits, on the monitor's round signal (no sleeping), until its snapshot satisfies `done`.
async fn until_sampled(hub: &Hub, what: &str, done: impl Fn(&MetricsSnapshot) -> bool) {
    let latest = &hub.server.as_ref().unwrap().state.metrics;
    let mut rounds = latest.rounds();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(&latest.get()) {
        match tokio::time::timeout_at(deadline, rounds.changed()).await {
            Ok(r) => r.unwrap(),
            Err(_) => panic!("the monitor never sampled {what}: {:#?}", latest.get()),
        }
    }
}

/// `GET /metrics` with these headers.
async fn scrape_with(hub: &Hub, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = hub.http.get(format!("{}/metrics", hub.url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// A scrape with the right token, read back.
async fn scrape(hub: &Hub) -> Scrape {
    let resp = scrape_with(hub, &[("authorization", &format!("Bearer {TOKEN}"))]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "content type {ctype}");
    parse(&resp.text().await.unwrap())
}

/// Alice's one-GPU job `train`, running, measured by the fake engine (512 MiB of a 1 GiB limit, PID
/// 4242) on a GPU the sampler shows at 73 %, 2 GiB used of which her process holds 1 GiB, 250 W and
/// 61 °C. Returns her token and the GPU's UUID.
async fn alice_trains(hub: &Hub, sampler: &FakeGpuSampler) -> (String, String) {
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("train", 1)).await;
    let w = hub.wait_state(&alice, "train", "running").await;
    let uuid = w["gpus"][0].as_str().unwrap().to_owned();
    let run = hub.run(&alice, "train").await;
    let usage = MemberUsage {
        index: 0,
        cpu_seconds: 10.0,
        memory_used: Bytes(512 * MIB),
        memory_limit: Some(Bytes(GIB)),
        pids: vec![4242],
    };
    hub.runtime.set_usage(&run, vec![usage]);
    sampler.set(&uuid, 73.0, Bytes(2 * GIB));
    sampler.set_sensors(&uuid, Some(250.0), Some(61.0));
    sampler.set_processes(&uuid, vec![GpuProcess { pid: 4242, memory_used: Bytes(GIB) }]);
    (alice, uuid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_reads_back_with_every_family_and_dcgm_labels() {
    let (hub, sampler) = sampled_hub(true, |_| {}).await;
    let (_alice, uuid) = alice_trains(&hub, &sampler).await;
    let admin = hub.admin().await;
    let bob = hub.user(&admin, "bob").await;
    // two GPUs while alice holds one: bob waits
    hub.submit(&bob, job("big", 2)).await;
    hub.wait_state(&bob, "big", "queued").await;
    let _ = hub.http.get(format!("{}/no/such/page", hub.url)).send().await.unwrap();
    // CPU cores need two rounds of the same member; the GPU figures one with alice's process on it
    until_sampled(&hub, "alice's CPU and GPU memory", |s| {
        s.members.iter().any(|m| m.cpu_cores.is_some() && m.gpu_memory_used == Some(GIB))
            && s.gpus.iter().any(|g| g.uuid == uuid && g.utilization_pct == 73.0)
    })
    .await;
    let s = scrape(&hub).await;

    let index = if uuid == "GPU-fake-0" { "0" } else { "1" };
    let device = format!("nvidia{index}");
    let hers = [
        ("gpu", index),
        ("UUID", uuid.as_str()),
        ("device", device.as_str()),
        ("modelName", if index == "0" { "H200" } else { AWKWARD_MODEL }),
        ("Hostname", "test-node"),
        ("owner", "alice"),
        ("workload", "train"),
        ("queue", "default"),
    ];
    assert_eq!(s.value("DCGM_FI_DEV_GPU_UTIL", &hers), 73.0);
    assert_eq!(s.value("DCGM_FI_DEV_FB_USED", &hers), 2048.0);
    assert_eq!(s.value("DCGM_FI_DEV_FB_FREE", &hers), (141 * 1024 - 2048) as f64);
    assert_eq!(s.value("DCGM_FI_DEV_POWER_USAGE", &hers), 250.0);
    assert_eq!(s.value("DCGM_FI_DEV_GPU_TEMP", &hers), 61.0);
    // the other GPU: nobody's (empty holder labels), and its model read back through the escapes
    let other = if index == "0" { ("GPU-fake-1", AWKWARD_MODEL) } else { ("GPU-fake-0", "H200") };
    let free = [("UUID", other.0), ("modelName", other.1), ("owner", ""), ("workload", ""), ("queue", "")];
    assert_eq!(s.value("DCGM_FI_DEV_GPU_UTIL", &free), 0.0);
    assert_eq!(s.find("DCGM_FI_DEV_GPU_UTIL", &[]).len(), 2, "one series per GPU and holder");
    assert!(s.find("DCGM_FI_DEV_POWER_USAGE", &[("UUID", other.0)]).is_empty(), "no sensor, no series");

    let member =
        [("owner", "alice"), ("workload", "train"), ("queue", "default"), ("member", "0"), ("node", "test-node")];
    assert_eq!(s.value("gpuhub_workload_cpu_cores", &member), 0.0);
    assert_eq!(s.value("gpuhub_workload_memory_bytes", &member), (512 * MIB) as f64);
    assert_eq!(s.value("gpuhub_workload_memory_limit_bytes", &member), GIB as f64);
    assert_eq!(s.value("gpuhub_workload_gpu_utilization_percent", &member), 73.0);
    assert_eq!(s.value("gpuhub_workload_gpu_memory_bytes", &member), GIB as f64);

    let count = |state| s.value("gpuhub_workloads", &[("state", state), ("queue", "default")]);
    assert_eq!((count("queued"), count("starting"), count("running")), (1.0, 0.0, 1.0));
    assert!(s.value("gpuhub_queue_oldest_wait_seconds", &[("queue", "default")]) >= 0.0);
    assert!(s.value("gpuhub_scheduler_pass_seconds_count", &[]) >= 1.0);
    assert_eq!(s.value("gpuhub_store_up", &[]), 1.0);
    assert!(s.value("gpuhub_monitor_last_sample_timestamp_seconds", &[]) > 1.7e9);

    // latency by route template, never by raw path
    let route = |r| s.find("gpuhub_http_request_duration_seconds_count", &[("route", r)]);
    let posts = route("/api/v1/workloads");
    assert!(posts.iter().any(|x| x.labels["method"] == "POST" && x.labels["status"] == "201" && x.value >= 2.0));
    assert!(route("/api/v1/workloads/{name}").iter().any(|x| x.labels["method"] == "GET" && x.value >= 1.0));
    assert!(route("unmatched").iter().any(|x| x.labels["status"] == "404"));
    let routes: BTreeSet<&str> = s.samples.iter().filter_map(|x| x.labels.get("route").map(String::as_str)).collect();
    assert!(routes.iter().all(|r| !r.contains("train") && !r.contains("/no/")), "raw paths as routes: {routes:?}");

    // every family gpuhub says it exports is there, with samples, and nothing else
    let typed: BTreeSet<&str> = s.types.keys().map(String::as_str).collect();
    let listed: BTreeSet<&str> = gpuhub_server::metrics::FAMILIES.iter().copied().collect();
    assert_eq!(typed, listed);
    for f in listed {
        if ["gpuhub_share_gpu_memory_granted_bytes", "gpuhub_mps_daemon_up", "gpuhub_mps_daemon_restarts_total"]
            .contains(&f)
        {
            continue; // only shares of guarded GPUs and MPS GPUs have them: tests/guard.rs reads them back
        }
        if ["gpuhub_dataset_mount_up", "gpuhub_dataset_mount_restarts_total"].contains(&f) {
            continue; // only S3 datasets have them: tests/s3_datasets.rs reads them back
        }
        let with_samples = s.samples.iter().any(|x| x.name == f || x.name == format!("{f}_count"));
        assert!(with_samples, "{f} has no samples");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_need_an_allowed_address_and_the_metrics_token() {
    let (hub, _) = sampled_hub(false, |_| {}).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bearer = |t: &str| format!("Bearer {t}");
    let cases: [(&str, Option<String>, StatusCode); 7] = [
        ("anonymous", None, StatusCode::UNAUTHORIZED),
        ("an admin's API token", Some(bearer(&admin)), StatusCode::UNAUTHORIZED),
        ("a user's API token", Some(bearer(&alice)), StatusCode::UNAUTHORIZED),
        ("a wrong token", Some(bearer("scrape-secret-4f1c2b")), StatusCode::UNAUTHORIZED),
        ("the token as Basic", Some(format!("Basic {TOKEN}")), StatusCode::UNAUTHORIZED),
        ("the metrics token", Some(bearer(TOKEN)), StatusCode::OK),
        ("the metrics token, scheme in lowercase", Some(format!("bearer {TOKEN}")), StatusCode::OK),
    ];
    for (who, auth, want) in cases {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
        let resp = scrape_with(&hub, &headers).await;
        assert_eq!(resp.status(), want, "{who}");
        if want == StatusCode::UNAUTHORIZED {
            assert_eq!(resp.headers()["www-authenticate"], "Bearer realm=\"gpuhub metrics\"", "{who}");
            assert_eq!(resp.headers()["content-type"], "application/problem+json", "{who}");
            let problem: Value = resp.json().await.unwrap();
            assert!(problem["detail"].as_str().unwrap().contains("token"), "{who}: {problem}");
        }
    }

    // the right token from an address outside the allow-list
    let (elsewhere, _) = sampled_hub(false, |c| c.monitor.metrics_allow = vec!["10.0.0.0/8".into()]).await;
    let resp = scrape_with(&elsewhere, &[("authorization", &bearer(TOKEN))]).await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");

    // behind a trusted proxy on loopback, the client the proxy names is the one checked
    let (proxied, _) = sampled_hub(false, |c| c.trusted_proxies = vec!["127.0.0.1".into()]).await;
    let auth = bearer(TOKEN);
    let via = |client: &'static str| [("authorization", auth.as_str()), ("x-forwarded-for", client)];
    assert_eq!(scrape_with(&proxied, &via("203.0.113.9")).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(scrape_with(&proxied, &via("127.0.0.9")).await.status(), StatusCode::OK);

    // without a token, the allow-list alone decides; an untrusted peer's X-Forwarded-For is not believed
    let open = Hub::start_with(|_| {}).await;
    assert_eq!(scrape_with(&open, &[]).await.status(), StatusCode::OK);
    assert_eq!(scrape_with(&open, &[("x-forwarded-for", "203.0.113.9")]).await.status(), StatusCode::OK);
}

/// The Grafana dashboard.
fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/gpuhub.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// Every panel's title and query expressions (rows, which have none, left out).
fn panel_queries(d: &Value) -> Vec<(String, Vec<String>)> {
    let panels = d["panels"].as_array().expect("panels");
    panels
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {} has no targets", p["title"]));
            let exprs = targets.iter().map(|t| t["expr"].as_str().expect("an expr").to_owned()).collect();
            (p["title"].as_str().expect("a title").to_owned(), exprs)
        })
        .collect()
}

/// The metric names an expression reads: its identifiers that start as gpuhub's or DCGM's do.
fn series_in(expr: &str) -> Vec<&str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("gpuhub_") || w.starts_with("DCGM_"))
        .collect()
}

#[test]
fn the_grafana_dashboard_reads_only_series_gpuhub_exports() {
    let d = dashboard();
    let panels = panel_queries(&d);
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let exported = gpuhub_server::metrics::FAMILIES;
    let mut read = BTreeSet::new();
    for (title, exprs) in &panels {
        assert!(!exprs.is_empty(), "{title}: no queries");
        for e in exprs {
            let names = series_in(e);
            assert!(!names.is_empty(), "{title}: {e} reads no gpuhub series");
            for n in names {
                let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| n.strip_suffix(s)).unwrap_or(n);
                assert!(exported.contains(&family), "{title}: {n} is not a series gpuhub exports");
                read.insert(family);
            }
        }
    }
    for wanted in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "gpuhub_workload_cpu_cores",
        "gpuhub_workload_memory_bytes",
        "gpuhub_workloads",
        "gpuhub_scheduler_pass_seconds",
        "gpuhub_http_request_duration_seconds",
    ] {
        assert!(read.contains(wanted), "no panel shows {wanted}");
    }
}

/// Debian's Prometheus, or a failure that says how to install it.
fn prometheus_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("prometheus")).collect::<Vec<_>>())
        .unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/bin/prometheus")).chain(on_path).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "prometheus is not installed; this test runs a real one. Install it with \
             `apt-get install -y prometheus` (scripts/setup-debian.sh does, and stops its service)"
        )
    })
}

/// A Prometheus of its own: config, data and log in a temp dir; killed when dropped.
struct Prometheus {
    url: String,
    dir: tempfile::TempDir,
    _child: tokio::process::Child,
    http: reqwest::Client,
}

impl Prometheus {
    /// Scraping `target` (host:port) every second with the metrics token.
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpuhub\n    authorization:\n      credentials: \"{TOKEN}\"\n\
             \x20   static_configs:\n      - targets: [\"{target}\"]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = tokio::process::Command::new(prometheus_binary())
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start prometheus");
        Prometheus { url: format!("http://127.0.0.1:{port}"), dir, _child: child, http: reqwest::Client::new() }
    }

    /// An instant query's answer (`data`), or why not.
    async fn query(&self, q: &str) -> Result<Value, String> {
        let resp = self.http.get(format!("{}/api/v1/query", self.url)).query(&[("query", q)]).send().await;
        let v: Value = resp.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
        if v["status"] == "success" { Ok(v["data"].clone()) } else { Err(v.to_string()) }
    }

    /// What Prometheus says of its targets and its log, for a failure's message.
    async fn diagnosis(&self) -> String {
        let targets = match self.http.get(format!("{}/api/v1/targets", self.url)).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        let log = std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        format!("targets: {targets}\nlog (last lines first):\n{}", tail.join("\n"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_alices_gpu_with_her_labels() {
    let binary = prometheus_binary();
    let (hub, sampler) = sampled_hub(false, |_| {}).await;
    let (_alice, uuid) = alice_trains(&hub, &sampler).await;
    let prometheus = Prometheus::start(&hub.url["http://".len()..]);
    let query = "DCGM_FI_DEV_GPU_UTIL{owner=\"alice\"}";
    // Prometheus starts, scrapes every second and answers; polled until then, within a deadline
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let series = loop {
        let answer = prometheus.query(query).await;
        if let Ok(data) = &answer {
            let result = data["result"].as_array().cloned().unwrap_or_default();
            if result.iter().any(|r| r["value"][1] == "73") {
                break result;
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("{} never answered {query} with 73: {answer:?}\n{}", binary.display(), prometheus.diagnosis().await);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(series.len(), 1, "{series:#?}");
    let labels = &series[0]["metric"];
    let index = uuid.trim_start_matches("GPU-fake-");
    for (k, v) in [
        ("__name__", "DCGM_FI_DEV_GPU_UTIL"),
        ("owner", "alice"),
        ("workload", "train"),
        ("queue", "default"),
        ("UUID", uuid.as_str()),
        ("gpu", index),
        ("modelName", "H200"),
        ("Hostname", "test-node"),
        ("job", "gpuhub"),
    ] {
        assert_eq!(labels[k], v, "label {k} of {labels}");
    }
    // the dashboard's every query is PromQL this Prometheus accepts
    for (title, exprs) in panel_queries(&dashboard()) {
        for e in exprs {
            let q = e.replace("$__rate_interval", "1m");
            if let Err(why) = prometheus.query(&q).await {
                panic!("dashboard panel {title}: {e}: {why}");
            }
        }
    }
}
