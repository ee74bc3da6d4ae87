//! The scheduler in the server: GPU shares, team queues, resource expressions, run-time limits,
//! backfill and preemption, through the API on the recording fake runtime (2 H200s, 8 CPUs, 32 GiB).

use gpuhub_testkit as common;

use common::{Hub, job};
use gpuhub_driver::fake::Call;
use gpuhub_sched::{Preemption, QueueSpec, Quota};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn share(name: &str, milli: u32) -> Value {
    json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["true"],
           "resources": {"cpus": 0.5, "memory": "256MiB", "gpu_milli": milli}})
}

fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

fn gpus_of(w: &Value) -> Vec<String> {
    w["gpus"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_owned()).collect()
}

/// Runs one more scheduling pass and waits for it, so explanations are current.
async fn settle(hub: &Hub) {
    let server = hub.server.as_ref().unwrap();
    let mut changes = server.state.controller.changes();
    server.state.controller.kick();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), changes.recv()).await;
}

async fn explanation(hub: &Hub, token: &str, name: &str) -> Value {
    for _ in 0..20 {
        let v = hub.get(token, name).await;
        if v["explanation"].is_object() {
            return v;
        }
        settle(hub).await;
    }
    panic!("{name} has no explanation: {}", hub.get(token, name).await)
}

#[tokio::test]
async fn gpu_shares_pack_and_never_mix_with_whole_gpus() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, share("s1", 500)).await;
    let s1 = hub.wait_state(&alice, "s1", "running").await;
    hub.submit(&alice, with(share("s2", 500), "resources", json!({"gpu_milli": 500, "gpu_memory": "40GiB"}))).await;
    let s2 = hub.wait_state(&alice, "s2", "running").await;
    // two halves share one GPU, leaving the other whole
    assert_eq!(gpus_of(&s1), gpus_of(&s2), "{s1} {s2}");
    assert_eq!(s2["resources"]["gpu_memory"], "40GiB");
    hub.submit(&alice, job("w1", 1)).await;
    let w1 = hub.wait_state(&alice, "w1", "running").await;
    assert_ne!(gpus_of(&w1), gpus_of(&s1));
    // no GPU is left: not whole (one holds shares), not a share (the other is held whole)
    hub.submit(&alice, job("w2", 1)).await;
    hub.submit(&alice, share("s3", 100)).await;
    settle(&hub).await;
    for name in ["w2", "s3"] {
        let v = explanation(&hub, &alice, name).await;
        assert_eq!(v["state"], "queued", "{v}");
        assert_eq!(v["explanation"]["reason"], "resources", "{v}");
    }
    // the nodes view shows the whole holder and the shares
    let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&alice), None).await;
    let gpus = nodes[0]["gpus"].as_array().unwrap();
    let shared = gpus.iter().find(|g| g["shares"].is_array()).expect("a shared GPU");
    let milli: u64 = shared["shares"].as_array().unwrap().iter().map(|s| s["milli"].as_u64().unwrap()).sum();
    assert_eq!(milli, 1000, "{nodes}");
    assert!(shared["holder"].is_null(), "{nodes}");
    assert!(gpus.iter().any(|g| g["holder"]["workload"] == "w1"), "{nodes}");
    // the container of a share gets its GPU's device and its limits
    let cid = hub.run(&alice, "s2").await;
    let spec = hub.runtime.spec(&cid).unwrap();
    let member = &spec.members[0];
    assert_eq!(member.env["GPUHUB_GPU_MILLI"], "500");
    assert_eq!(member.env["CUDA_DEVICE_MEMORY_LIMIT"], "40960m");
    assert_eq!(member.gpus.uuids(), [gpus_of(&s2)[0].as_str()]);
    // a freed half goes to the waiting share, not to the whole-GPU job
    hub.runtime.exit(&hub.run(&alice, "s1").await, 0);
    let s3 = hub.wait_state(&alice, "s3", "running").await;
    assert_eq!(gpus_of(&s3), gpus_of(&s2));
    assert_eq!(hub.get(&alice, "w2").await["state"], "queued");
}

fn queues(cfg: &mut gpuhub_server::config::Config) {
    let gpu = |n: u64| Quota { gpu_milli: n * 1000, cpu_milli: 8000, memory: 32 << 30 };
    cfg.scheduler.queues = vec![
        QueueSpec { name: "vision".into(), guarantee: gpu(1), borrow_limit: Some(gpu(1)), ..QueueSpec::open("vision") },
        QueueSpec {
            name: "nlp".into(),
            guarantee: gpu(1),
            borrow_limit: Some(Quota::default()),
            ..QueueSpec::open("nlp")
        },
    ];
    cfg.queue_members = BTreeMap::from([("nlp".into(), vec!["bob".into()])]);
}

#[tokio::test]
async fn team_queues_check_membership_and_limits() {
    let hub = Hub::start_with(queues).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let post = |token: &str, body: Value| {
        let token = token.to_owned();
        let hub = &hub;
        async move { hub.call(Method::POST, "/api/v1/workloads", Some(&token), Some(body)).await }
    };
    // bob's only queue is his default; alice may not use it, nor a queue that does not exist
    let b1 = hub.submit(&bob, job("b1", 1)).await;
    assert_eq!(b1["queue"], "nlp");
    let (s, v) = post(&alice, with(job("x", 1), "queue", json!("nlp"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(v["detail"].as_str().unwrap().contains("queue nlp is for its members (bob)"), "{v}");
    let (s, v) = post(&alice, with(job("x", 1), "queue", json!("cv"))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(v["detail"].as_str().unwrap().contains("no queue named \"cv\" (queues: nlp, vision)"), "{v}");
    // nlp may not borrow: 2 GPUs can never start there
    let (s, v) = post(&bob, job("big", 2)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("can never start"), "{v}");
    // bob holds his guarantee; his next GPU job waits at the queue's limit though a GPU is free
    hub.wait_state(&bob, "b1", "running").await;
    hub.submit(&bob, job("b2", 1)).await;
    let b2 = explanation(&hub, &bob, "b2").await;
    assert_eq!(b2["state"], "queued");
    assert_eq!(b2["explanation"]["reason"], "queue-limit", "{b2}");
    // alice's vision job takes the free GPU
    let a1 = hub.submit(&alice, with(job("a1", 1), "queue", json!("vision"))).await;
    assert_eq!(a1["queue"], "vision");
    hub.wait_state(&alice, "a1", "running").await;
    // the queues view: what each holds and waits for, who may use it; members only for admins
    let queues = |token: String| {
        let hub = &hub;
        async move {
            let (s, v) = hub.call(Method::GET, "/api/v1/queues", Some(&token), None).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            let by_name: BTreeMap<String, Value> =
                v.as_array().unwrap().iter().map(|q| (q["name"].as_str().unwrap().to_owned(), q.clone())).collect();
            by_name
        }
    };
    let seen = queues(bob.clone()).await;
    let nlp = &seen["nlp"];
    assert_eq!(
        (nlp["used"]["gpus"].as_f64(), nlp["running"].as_u64(), nlp["queued"].as_u64()),
        (Some(1.0), Some(1), Some(1))
    );
    assert_eq!(nlp["guarantee"]["gpus"], 1.0);
    assert_eq!(nlp["borrow_limit"]["gpus"], 0.0);
    assert_eq!(nlp["open_to_you"], true);
    assert!(nlp.get("members").is_none(), "{nlp}");
    assert_eq!(seen["vision"]["used"]["gpus"], 1.0);
    assert_eq!(queues(alice.clone()).await["nlp"]["open_to_you"], false);
    assert_eq!(queues(admin.clone()).await["nlp"]["members"], json!(["bob"]));
}

#[tokio::test]
async fn scheduling_input_is_checked() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let cases = [
        (with(job("c", 1), "constraint", json!("gpu.model == ")), "at position 12: expected a number"),
        (with(job("c", 1), "constraint", json!("gpu.model == \"A100\"")), "can never start"),
        (with(job("c", 1), "constraint", json!("gpu.memory >= 200GiB")), "can never start"),
        (with(job("c", 1), "members", json!(3)), "can never start"),
        (with(job("c", 1), "members", json!(0)), "at least 1 member"),
        (with(job("c", 1), "members", json!(65)), "at most 64 members"),
        (with(job("c", 1), "runtime_limit", json!("0s")), "runtime_limit"),
        (with(job("c", 1), "runtime_limit", json!("2 weeks")), "unknown unit"),
        (with(job("c", 0), "resources", json!({"gpus": 1, "gpu_milli": 500})), "not both"),
        (with(job("c", 0), "resources", json!({"gpu_milli": 1000})), "from 1 to 999"),
        (with(job("c", 0), "resources", json!({"gpu_milli": 500, "gpu_memory": "200GiB"})), "largest GPU"),
    ];
    for (body, want) in cases {
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body.clone())).await;
        assert!(s.is_client_error(), "{body}: {s} {v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(want), "{body}: want {want:?} in {v}");
    }
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!(list, json!([]), "a refused request stores nothing");
    // a constraint that holds is kept and the job runs
    let ok = with(job("ok", 1), "constraint", json!("gpu.model == \"H200\" && gpu.memory >= 80GiB"));
    let v = hub.submit(&alice, ok).await;
    assert_eq!(v["constraint"], "gpu.model == \"H200\" && gpu.memory >= 80GiB");
    hub.wait_state(&alice, "ok", "running").await;
}

#[tokio::test]
async fn a_job_is_stopped_at_its_runtime_limit() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({"name": "nb", "kind": "workspace", "image": "busybox:latest", "runtime_limit": 1});
    hub.submit(&alice, with(job("t", 1), "runtime_limit", json!(1))).await;
    hub.submit(&alice, ws).await;
    // the controller wakes at the limit (no periodic tick in between: reconcile_secs is 30)
    let t = hub.wait_state(&alice, "t", "failed").await;
    assert!(t["message"].as_str().unwrap().contains("reached its run-time limit of 1s"), "{t}");
    assert_eq!(t["interruption"]["reason"], "time-limit", "{t}");
    assert_eq!(t["runtime_limit"], "1s");
    let nb = hub.wait_state(&alice, "nb", "stopped").await;
    assert!(nb["message"].as_str().unwrap().contains("run-time limit"), "{nb}");
}

#[tokio::test]
async fn backfill_starts_only_what_ends_before_the_reserved_start() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, with(job("r", 1), "runtime_limit", json!("1h"))).await;
    hub.wait_state(&alice, "r", "running").await;
    // the 2-GPU job waits for r and gets a reserved start when r's limit ends
    hub.submit(&alice, job("big", 2)).await;
    let big = explanation(&hub, &alice, "big").await;
    assert!(big["explanation"]["estimated_start"].is_string(), "{big}");
    // a job that would still run then may not take the free GPU, nor one without a limit
    hub.submit(&alice, with(job("long", 1), "runtime_limit", json!("2h"))).await;
    hub.submit(&alice, job("unlimited", 1)).await;
    for name in ["long", "unlimited"] {
        let v = explanation(&hub, &alice, name).await;
        assert_eq!(v["state"], "queued", "{v}");
        assert_eq!(v["explanation"]["reason"], "backfill", "{v}");
    }
    // one that ends before may
    hub.submit(&alice, with(job("short", 1), "runtime_limit", json!("30m"))).await;
    hub.wait_state(&alice, "short", "running").await;
    assert_eq!(hub.get(&alice, "long").await["state"], "queued");
}

#[tokio::test]
async fn a_job_without_gpus_is_not_held_back_by_a_gpu_reservation() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let cpus = |name: &str, gpus: u32, cpus: u32| {
        let mut j = job(name, gpus);
        j["resources"]["cpus"] = json!(cpus);
        j
    };
    // both GPUs and 4 of the 8 CPUs, for an hour; a job for both GPUs and 6 CPUs waits for its end
    hub.submit(&alice, with(cpus("r", 2, 4), "runtime_limit", json!("1h"))).await;
    hub.wait_state(&alice, "r", "running").await;
    hub.submit(&alice, cpus("big", 2, 6)).await;
    let big = explanation(&hub, &alice, "big").await;
    assert!(big["explanation"]["estimated_start"].is_string(), "{big}");
    // a job of 2 CPUs and no GPU, without a limit, starts at once: at big's start it still fits beside it
    hub.submit(&bob, cpus("cpu", 0, 2)).await;
    hub.wait_state(&bob, "cpu", "running").await;
    // another would take the CPUs big needs then: it waits, naming big by owner and name
    hub.submit(&bob, cpus("more", 0, 2)).await;
    let v = explanation(&hub, &bob, "more").await;
    assert_eq!(v["explanation"]["reason"], "backfill", "{v}");
    assert_eq!(v["explanation"]["message"], "starting now would delay the reserved start of alice/big", "{v}");
}

#[tokio::test]
async fn a_queue_below_its_guarantee_reclaims_by_preemption() {
    let hub = Hub::start_with(|cfg| {
        queues(cfg);
        // nlp may borrow too, so it can hold both GPUs
        cfg.scheduler.queues[1].borrow_limit = None;
        cfg.scheduler.preemption = Preemption { enabled: true, grace_ms: 0 };
    })
    .await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    hub.submit(&bob, job("b1", 1)).await;
    hub.wait_state(&bob, "b1", "running").await;
    hub.submit(&bob, job("b2", 1)).await;
    hub.wait_state(&bob, "b2", "running").await;
    // vision holds nothing of its 1-GPU guarantee: it takes back the newest borrowed GPU
    hub.submit(&alice, with(job("a1", 1), "queue", json!("vision"))).await;
    let a1 = hub.wait_state(&alice, "a1", "running").await;
    let b2 = hub.wait_state(&bob, "b2", "queued").await;
    assert!(b2["started_at"].is_string(), "b2 ran, was stopped and queued again: {b2}");
    // it says why, by whom, when and what happens next: from the typed, stored reason
    let why = &b2["interruption"];
    assert_eq!(
        (why["reason"].as_str(), why["by"].as_str(), why["queue"].as_str()),
        (Some("preempted"), Some("alice/a1"), Some("vision")),
        "{b2}"
    );
    assert!(why["at"].is_string() && why["next"].as_str().unwrap().starts_with("queued again"), "{b2}");
    let (b1_cid, stops) = (hub.run(&bob, "b1").await, hub.runtime.calls());
    let stopped: Vec<_> = stops.iter().filter_map(|c| if let Call::Cancel(id) = c { Some(id) } else { None }).collect();
    assert_eq!(stopped.len(), 1, "one victim: {stopped:?}");
    assert_ne!(stopped[0], &b1_cid);
    let b1 = hub.get(&bob, "b1").await;
    assert_eq!(b1["state"], "running", "the job within nlp's guarantee keeps running");
    assert_ne!(gpus_of(&a1), gpus_of(&b1));
    // once a GPU frees, the preempted job runs again
    hub.runtime.exit(&hub.run(&alice, "a1").await, 0);
    let b2 = hub.wait_state(&bob, "b2", "running").await;
    assert!(b2.get("interruption").is_none(), "running again, no longer interrupted: {b2}");
}

#[tokio::test]
async fn a_reservation_keeps_gpus_free_for_its_queue() {
    let hub = Hub::start_with(|cfg| {
        queues(cfg);
        cfg.scheduler.queues[1].borrow_limit = None;
    })
    .await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let now = chrono::Utc::now();
    let book = |body: Value| {
        let admin = admin.clone();
        let hub = &hub;
        async move { hub.call(Method::POST, "/api/v1/reservations", Some(&admin), Some(body)).await }
    };
    let window = |gpus: u32| {
        json!({"id": "deadline", "queue": "vision", "gpus": gpus, "model": "H200",
               "start": now - chrono::Duration::minutes(1), "end": now + chrono::Duration::hours(1)})
    };
    // refused: an unknown queue, more GPUs than the node has, a window already over, a user
    let mut bad = window(1);
    bad["queue"] = json!("cv");
    let (s, v) = book(bad).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, v) = book(window(3)).await;
    assert!(s == StatusCode::UNPROCESSABLE_ENTITY && v["detail"].as_str().unwrap().contains("2 H200 GPUs"), "{v}");
    let mut over = window(1);
    over["end"] = json!(now - chrono::Duration::seconds(1));
    assert_eq!(book(over).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    let (s, _) = hub.call(Method::POST, "/api/v1/reservations", Some(&bob), Some(window(1))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    // one GPU booked for vision now; a second overlapping booking of 2 would overbook the node
    let (s, v) = book(window(1)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["created_by"], "admin");
    let mut more = window(2);
    more["id"] = json!("more");
    assert_eq!(book(more).await.0, StatusCode::CONFLICT);
    let (_, list) = hub.call(Method::GET, "/api/v1/reservations", Some(&bob), None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    // bob's nlp jobs get one GPU; the booked one waits for vision
    hub.submit(&bob, job("b1", 1)).await;
    hub.wait_state(&bob, "b1", "running").await;
    hub.submit(&bob, job("b2", 1)).await;
    let b2 = explanation(&hub, &bob, "b2").await;
    assert_eq!(b2["explanation"]["reason"], "reservation", "{b2}");
    hub.submit(&alice, with(job("a1", 1), "queue", json!("vision"))).await;
    hub.wait_state(&alice, "a1", "running").await;
    // cancelled, the booking frees nothing more here, and bob's job follows once a GPU frees
    let (s, _) = hub.call(Method::DELETE, "/api/v1/reservations/deadline", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = hub.call(Method::DELETE, "/api/v1/reservations/deadline", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    hub.runtime.exit(&hub.run(&alice, "a1").await, 0);
    let b2 = hub.wait_state(&bob, "b2", "running").await;
    assert!(b2.get("interruption").is_none(), "running again, no longer interrupted: {b2}");
}
