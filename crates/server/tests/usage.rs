//! Accounting: `GET /api/v1/usage` over a simulated day (the clock seam), with a preemption, a share of
//! a GPU and the server killed in the middle (its runtime dropped mid-flight, as a SIGKILL would), equals
//! the exact sum of what was held. Who may see what.

use gpuhub_testkit as common;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use common::{Hub, config, job};
use gpuhub_controller::clock::ManualClock;
use gpuhub_sched::{Preemption, QueueSpec, Quota};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

fn setup(cfg: &mut gpuhub_server::config::Config) {
    let gpu = |n: u64| Quota { gpu_milli: n * 1000, cpu_milli: 8000, memory: 32 << 30 };
    cfg.scheduler.queues = vec![
        QueueSpec { name: "vision".into(), guarantee: gpu(1), borrow_limit: Some(gpu(1)), ..QueueSpec::open("vision") },
        QueueSpec { name: "nlp".into(), guarantee: gpu(1), borrow_limit: None, ..QueueSpec::open("nlp") },
    ];
    cfg.queue_members = BTreeMap::from([("nlp".into(), vec!["bob".into()])]);
    cfg.scheduler.preemption = Preemption { enabled: true, grace_ms: 0 };
}

fn in_queue(mut body: Value, queue: &str) -> Value {
    body["queue"] = json!(queue);
    body
}

/// A server started on a runtime of its own, so that the test can kill it the way SIGKILL would: every
/// task dropped wherever it is, nothing shut down.
struct Killable {
    hub: Hub,
    rt: tokio::runtime::Runtime,
}

async fn start_killable(
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    engine: Arc<gpuhub_driver::fake::FakeEngine>,
) -> Killable {
    let mut cfg = config(dir.path());
    setup(&mut cfg);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let handle = rt.handle().clone();
    let e: Arc<dyn gpuhub_driver::Engine> = engine.clone();
    let server = std::thread::spawn(move || handle.block_on(gpuhub_server::start_with_clock(cfg, e, clock)))
        .join()
        .unwrap()
        .unwrap();
    let hub = Hub::from_server(server, engine, dir);
    Killable { hub, rt }
}

impl Killable {
    /// Kills the server: its runtime stops at once, mid-flight; the data dir is handed back.
    fn kill(self) -> (tempfile::TempDir, Arc<gpuhub_driver::fake::FakeEngine>) {
        let Killable { mut hub, rt } = self;
        rt.shutdown_background();
        drop(hub.server.take());
        (hub.dir, hub.runtime)
    }
}

async fn usage(hub: &Hub, token: &str, query: &str) -> (StatusCode, Value) {
    hub.call(Method::GET, &format!("/api/v1/usage?{query}"), Some(token), None).await
}

fn hours(v: &Value, key: &str, name: &str) -> (f64, f64, f64) {
    let row = v["rows"].as_array().unwrap().iter().find(|r| r[key] == name).unwrap_or_else(|| panic!("no {name}: {v}"));
    (row["gpu_hours"].as_f64().unwrap(), row["cpu_hours"].as_f64().unwrap(), row["memory_gib_hours"].as_f64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_of_holdings_with_a_preemption_and_a_kill_sums_exactly() {
    let _ = tracing_subscriber::fmt().with_env_filter("warn").with_test_writer().try_init();
    // on the hour, so the figures below are whole numbers; tokens are checked against the real clock
    let t0: DateTime<Utc> = Utc::now().with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
    let at = |h: i64| t0 + TimeDelta::hours(h);
    let clock = Arc::new(ManualClock::new(t0));
    let k = start_killable(tempfile::tempdir().unwrap(), clock.clone(), common::fake()).await;
    let hub = &k.hub;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;

    // t0: bob takes a GPU in nlp; t0+1h the other one, borrowed (the newer, so the one preempted)
    hub.submit(&bob, in_queue(job("b1", 1), "nlp")).await;
    hub.wait_state(&bob, "b1", "running").await;
    clock.set(at(1));
    hub.submit(&bob, in_queue(job("b2", 1), "nlp")).await;
    hub.wait_state(&bob, "b2", "running").await;
    // t0+2h: alice's vision job takes its guarantee back: b2 is preempted and waits
    clock.set(at(2));
    hub.submit(&alice, in_queue(job("a1", 1), "vision")).await;
    hub.wait_state(&alice, "a1", "running").await;
    hub.wait_state(&bob, "b2", "queued").await;
    // t0+5h: a1 ends; b2 runs again (a second holding)
    clock.set(at(5));
    hub.runtime.exit(&hub.run(&alice, "a1").await, 0);
    hub.wait_state(&alice, "a1", "succeeded").await;
    hub.wait_state(&bob, "b2", "running").await;

    // t0+6h: the server is killed; it comes back at t0+9h, both of bob's jobs still running
    clock.set(at(6));
    let (dir, engine) = k.kill();
    clock.set(at(9));
    let k = start_killable(dir, clock.clone(), engine).await;
    let hub = &k.hub;
    let (alice, bob) = (hub.login("alice", "alice-password").await, hub.login("bob", "bob-password").await);
    let admin = hub.admin().await;
    assert_eq!(hub.get(&bob, "b1").await["state"], "running");
    assert_eq!(hub.get(&bob, "b2").await["state"], "running");

    // t0+10h: b1 ends; t0+12h: alice takes half a GPU until t0+20h; b2 still runs at t0+24h
    clock.set(at(10));
    hub.runtime.exit(&hub.run(&bob, "b1").await, 0);
    hub.wait_state(&bob, "b1", "succeeded").await;
    clock.set(at(12));
    let share = json!({"name": "a2", "kind": "job", "image": "busybox:latest", "command": ["true"], "queue": "vision",
        "resources": {"cpus": 2, "memory": "4GiB", "gpu_milli": 500}});
    hub.submit(&alice, share).await;
    hub.wait_state(&alice, "a2", "running").await;
    clock.set(at(20));
    hub.runtime.exit(&hub.run(&alice, "a2").await, 0);
    hub.wait_state(&alice, "a2", "succeeded").await;
    clock.set(at(24));

    let window = format!("from={}&to={}", urlencode(at(0)), urlencode(at(24)));
    let (s, v) = usage(hub, &admin, &format!("by=user&{window}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // bob: b1 0→10h; b2 1→2h, then 5→24h (still running). 1 CPU and 1 GiB each.
    assert_eq!(hours(&v, "user", "bob"), (10.0 + 1.0 + 19.0, 30.0, 30.0), "{v}");
    // alice: a1 2→5h whole; a2 12→20h half a GPU, 2 CPUs, 4 GiB
    assert_eq!(hours(&v, "user", "alice"), (3.0 + 4.0, 3.0 + 16.0, 3.0 + 32.0), "{v}");
    assert_eq!(v["total"]["gpu_hours"].as_f64(), Some(37.0), "{v}");

    // the same hours by queue, and by GPU model; a narrower window cuts them
    let (_, v) = usage(hub, &admin, &format!("by=queue&{window}")).await;
    assert_eq!((hours(&v, "queue", "nlp").0, hours(&v, "queue", "vision").0), (30.0, 7.0), "{v}");
    let (_, v) = usage(hub, &admin, &format!("by=model&{window}")).await;
    assert_eq!(hours(&v, "model", "H200").0, 37.0, "{v}");
    let (_, v) = usage(hub, &admin, &format!("by=user&from={}&to={}", urlencode(at(4)), urlencode(at(11)))).await;
    // bob: b1 4→10 and b2 5→11; alice: a1 4→5
    assert_eq!((hours(&v, "user", "bob").0, hours(&v, "user", "alice").0), (12.0, 1.0), "{v}");
    // by day: the day's rows add up to the total
    let (_, v) = usage(hub, &admin, &format!("by=user,day&{window}")).await;
    let bob_days: f64 = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["user"] == "bob")
        .map(|r| r["gpu_hours"].as_f64().unwrap())
        .sum();
    assert_eq!(bob_days, 30.0, "{v}");

    // users see their own usage only
    let (s, v) = usage(hub, &alice, &format!("by=user&{window}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(hours(&v, "user", "alice").0, 7.0);
    let (s, v) = usage(hub, &alice, "user=bob").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, _) = hub.call(Method::GET, "/api/v1/usage", None, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    // a deleted workload's usage stays: bob removes b1 and b2 (b2 while it holds: its holding ends now)
    for name in ["b1", "b2"] {
        let (s, v) = hub.call(Method::DELETE, &format!("/api/v1/workloads/{name}"), Some(&bob), None).await;
        assert!(s.is_success(), "{v}");
    }
    clock.set(at(30));
    let (_, v) = usage(hub, &admin, &format!("by=user&from={}&to={}", urlencode(at(0)), urlencode(at(30)))).await;
    assert_eq!(hours(&v, "user", "bob").0, 30.0, "b2's holding ended when it was deleted: {v}");

    // bad queries are 400s naming the problem
    for (q, says) in [
        ("by=team", "\"team\""),
        ("from=yesterday", "from \"yesterday\""),
        ("from=2026-02-01&to=2026-01-01", "must be before"),
        ("bogus=1", "bogus"),
    ] {
        let (s, v) = usage(hub, &admin, q).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{q}: {v}");
    }
    k.kill();
}

fn urlencode(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).replace(':', "%3A")
}

/// Usage comes from the holdings kept between requests (`AppState::holdings`): read once before
/// anything runs, then a start, a stop, a start again and a deletion are each in the next report, to
/// the hour the clock says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_holdings_follow_every_start_stop_and_deletion() {
    let t0: DateTime<Utc> = Utc::now().with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
    let at = |h: i64| t0 + TimeDelta::hours(h);
    let clock = Arc::new(ManualClock::new(t0));
    let seams = gpuhub_server::Seams { clock: clock.clone(), ..Default::default() };
    let hub = Hub::start_seams(seams, |_| {}).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let window = format!("from={}&to={}", t0.date_naive(), t0.date_naive() + TimeDelta::days(2));
    let gpu_hours = || async {
        let (s, v) = usage(&hub, &alice, &window).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["total"]["gpu_hours"].as_f64().unwrap()
    };
    let act = |what: &'static str| {
        let (hub, alice) = (&hub, &alice);
        async move {
            let (method, path) = match what {
                "delete" => (Method::DELETE, "/api/v1/workloads/a1".to_owned()),
                _ => (Method::POST, format!("/api/v1/workloads/a1/{what}")),
            };
            let (s, v) = hub.call(method, &path, Some(alice), None).await;
            assert!(s.is_success(), "{what}: {s} {v}");
        }
    };
    assert_eq!(gpu_hours().await, 0.0, "nothing held yet");
    hub.submit(&alice, job("a1", 1)).await;
    hub.wait_state(&alice, "a1", "running").await;
    clock.set(at(1));
    assert_eq!(gpu_hours().await, 1.0, "a start: held up to now");
    act("stop").await;
    clock.set(at(2));
    assert_eq!(gpu_hours().await, 1.0, "a stop");
    act("start").await;
    hub.wait_state(&alice, "a1", "running").await;
    clock.set(at(4));
    assert_eq!(gpu_hours().await, 3.0, "a start again");
    act("delete").await;
    clock.set(at(5));
    assert_eq!(gpu_hours().await, 3.0, "a deletion ends the holding");
    // the same as the store holds
    let server = hub.server.as_ref().unwrap();
    let held = server.state.store.holdings(t0, at(48), Some("alice")).await.unwrap();
    assert_eq!(server.state.holdings((t0, at(48)), Some("alice")).await.unwrap(), held);
    assert_eq!(held.len(), 2);
}
