//! The API on the Kubernetes engine behaves as on Docker, through the service layer: the hub runs on
//! the real `gpuhub_kube::KubeEngine`, which talks to an in-process fake API server on 127.0.0.1:0
//! (objects kept in memory, a watch streaming their changes, and a "kubelet" that starts each pod and
//! ends a job's with the code its command exits with). A job succeeds and fails with its code, a
//! two-member gang gets its ranks and its headless service, a workspace runs until stopped (its stop
//! by the pod's deadline keeps its record), its output comes through the API server's log, and a
//! workspace's JupyterLab, started through the exec stream, is served through the hub's proxy.

use gpuhub_testkit as common;

mod kube_fake;

use common::Hub;
use kube_fake::{hub, hub_and_engine, hub_with};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn job(name: &str, command: &str) -> Value {
    json!({ "name": name, "kind": "job", "image": "busybox:latest", "command": ["sh", "-c", command], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 1 } })
}

/// A stand-in JupyterLab on the test's loopback (where the fake cluster's pods are) answering every
/// path with its title and the path; its port.
async fn lab() -> u16 {
    let app =
        axum::Router::new().fallback(|uri: axum::http::Uri| async move { format!("<title>JupyterLab</title> {uri}") });
    common::http::listen(app).await.unwrap().port()
}

#[tokio::test]
async fn a_job_succeeds_or_fails_with_its_code() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, job("ok", "true")).await;
    hub.submit(&alice, job("bad", "exit 3")).await;
    let ok = hub.wait_for(&alice, "ok", 20, |w| w["state"] == "succeeded").await;
    assert_eq!(ok["members"][0]["exit_code"], 0, "{ok}");
    let bad = hub.wait_for(&alice, "bad", 20, |w| w["state"] == "failed").await;
    assert_eq!(bad["members"][0]["exit_code"], 3, "{bad}");
    let c = cluster.lock().unwrap();
    let pod = c.pods.values().find(|p| p["metadata"]["labels"]["gpuhub.workload"] == ok["id"]).expect("its pod");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert!(c.jobs.len() == 2, "a job's pod is a Job's");
}

#[tokio::test]
async fn a_gang_of_two_gets_its_ranks_and_a_headless_service() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut gang = job("ddp", "true");
    gang["members"] = json!(2);
    hub.submit(&alice, gang).await;
    let w = hub.wait_for(&alice, "ddp", 20, |w| w["state"] == "succeeded").await;
    assert_eq!(w["members"].as_array().unwrap().len(), 2, "{w}");
    let (s, out) = hub.call(Method::GET, "/api/v1/workloads/ddp/logs?member=1", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    let text = out.as_str().map(str::to_owned).unwrap_or_else(|| out.to_string());
    assert!(text.contains("rank 1 of 2 at ddp-0."), "{text}");
    assert_eq!(cluster.lock().unwrap().services.len(), 1, "the gang's headless service");
}

#[tokio::test]
async fn a_workspace_runs_until_stopped_and_keeps_its_record() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({ "name": "dev", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 } });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "dev", 20, |w| w["state"] == "running").await;
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/dev/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let w = hub.wait_for(&alice, "dev", 20, |w| w["state"] == "stopped").await;
    assert_eq!(w["exit_code"], 143, "{w}");
    let pod = cluster.lock().unwrap().pods.values().next().cloned().expect("the stopped pod is kept");
    assert_eq!(pod["metadata"]["annotations"]["gpuhub.io/cancelled"], "true");
}

#[tokio::test]
async fn a_workspace_with_jupyterlab_is_served_through_the_hubs_proxy() {
    // the lab, at the pod's ip (the fake cluster's pods are at 127.0.0.1) and the app's port
    let port = lab().await;
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({
        "name": "nb", "kind": "workspace", "image": "jupyter/base-notebook:latest", "command": ["sleep", "3600"],
        "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 },
        "apps": [{ "name": "lab", "port": port, "command": ["jupyter", "lab", "--port={port}"] }],
    });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "nb", 20, |w| w["state"] == "running").await;
    let url = format!("{}/w/alice/nb/lab/lab/tree", hub.url);
    let mut body = String::new();
    for _ in 0..200 {
        let r = hub.http.get(&url).bearer_auth(&alice).send().await.unwrap();
        if r.status() == StatusCode::OK {
            body = r.text().await.unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(body.contains("JupyterLab"), "the lab through the hub's proxy: {body:?}");
    let execs = cluster.lock().unwrap().execs.clone();
    assert!(execs.iter().any(|q| q.contains("command=jupyter")), "the lab was started by exec: {execs:?}");
}

#[tokio::test]
async fn from_outside_the_cluster_the_lab_is_reached_through_the_api_servers_port_forward() {
    let port = lab().await;
    // the pods' ip is one the hub cannot reach (TEST-NET-1): only the api server reaches the lab
    let cfg = gpuhub_kube::KubeConfig { app_access: gpuhub_kube::AppAccess::PortForward, ..Default::default() };
    let (hub, cluster, _) = hub_with(cfg, Some("192.0.2.1")).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({
        "name": "nb", "kind": "workspace", "image": "jupyter/base-notebook:latest", "command": ["sleep", "3600"],
        "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 },
        "apps": [{ "name": "lab", "port": port, "command": ["jupyter", "lab", "--port={port}"] }],
    });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "nb", 20, |w| w["state"] == "running").await;
    let mut body = String::new();
    for path in ["lab/tree", "api/contents"] {
        let url = format!("{}/w/alice/nb/lab/{path}", hub.url);
        for _ in 0..100 {
            let r = hub.http.get(&url).bearer_auth(&alice).send().await.unwrap();
            if r.status() == StatusCode::OK {
                body = r.text().await.unwrap();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(body.contains("JupyterLab") && body.contains(path), "{path} through the port-forward: {body:?}");
    }
    let forwards = cluster.lock().unwrap().forwards.clone();
    assert!(!forwards.is_empty(), "the api server's port-forward was used");
    assert!(forwards.iter().all(|f| f.ends_with(&format!(":{port}"))), "{forwards:?}");
}

#[tokio::test]
async fn usage_figures_come_from_the_metrics_api_once_it_is_installed_without_a_restart() {
    let (hub, cluster, (engine, api)) = hub_and_engine().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let ws = json!({ "name": "dev", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 } });
    hub.submit(&alice, ws).await;
    hub.wait_for(&alice, "dev", 20, |w| w["state"] == "running").await;
    let metrics = &hub.server.as_ref().unwrap().state.metrics;
    let mut rounds = metrics.rounds();
    let next = async |rounds: &mut tokio::sync::watch::Receiver<_>| {
        tokio::time::timeout(std::time::Duration::from_secs(10), rounds.changed()).await.unwrap().unwrap();
        metrics.get()
    };
    // no metrics-server yet: the hub's start found no metrics api, and the monitor measures nothing
    let s = next(&mut rounds).await;
    assert!(s.members.is_empty(), "{s:?}");
    // metrics-server is installed; the controller's next look at the nodes (every reconcile_secs: made
    // here) asks again only once METRICS_REPROBE has passed by the engine's clock
    cluster.lock().unwrap().metrics = true;
    use gpuhub_driver::Engine;
    engine.inventory().await.unwrap();
    assert!(!engine.capabilities().usage, "asked again only after the wait");
    *api.ahead.lock().unwrap() += gpuhub_kube::METRICS_REPROBE;
    engine.inventory().await.unwrap();
    assert!(engine.capabilities().usage, "picked up without a restart");
    let mut member = None;
    for _ in 0..20 {
        let s = next(&mut rounds).await;
        if let Some(m) = s.members.iter().find(|m| m.workload == "dev" && m.cpu_cores.is_some()) {
            member = Some(m.clone());
            break;
        }
    }
    let m = member.expect("a round with the workspace's cpu and memory");
    assert_eq!((m.memory_used, m.memory_limit), (300 << 20, Some(1 << 30)), "{m:?}");
    let cores = m.cpu_cores.unwrap();
    assert!((0.1..=1.5).contains(&cores), "half a core, give or take the rounds' timing under load: {cores}");
}

#[tokio::test]
async fn after_a_restart_runs_are_found_again_and_an_end_meanwhile_is_recorded() {
    let (mut hub, cluster, (engine, api)) = hub_and_engine().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    for name in ["stays", "ends"] {
        let ws = json!({ "name": name, "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 0 } });
        hub.submit(&alice, ws).await;
        hub.wait_for(&alice, name, 20, |w| w["state"] == "running").await;
    }
    let ends_id = hub.get(&alice, "ends").await["id"].clone();
    hub.server.take().unwrap().shutdown().await;
    // while the hub is down, one workspace's command ends with 5
    {
        let mut c = cluster.lock().unwrap();
        let name = c
            .pods
            .iter()
            .find(|(_, p)| p["metadata"]["labels"]["gpuhub.workload"] == ends_id)
            .map(|(n, _)| n.clone())
            .unwrap();
        let mut pod = c.pods[&name].clone();
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["containerStatuses"][0]["state"] = json!({ "terminated": { "exitCode": 5, "reason": "Error" } });
        api.emit(&mut c, "MODIFIED", &pod);
        c.pods.insert(name, pod);
    }
    let mut cfg = common::config(hub.dir.path());
    cfg.engine = gpuhub_server::config::EngineKind::Kubernetes;
    let server = gpuhub_server::start(cfg, engine).await.unwrap();
    hub.url = format!("http://{}", server.addr);
    hub.server = Some(server);
    let alice = hub.login("alice", "alice-password").await;
    let ended = hub.wait_for(&alice, "ends", 20, |w| w["state"] == "failed").await;
    assert_eq!(ended["exit_code"], 5, "{ended}");
    let stays = hub.get(&alice, "stays").await;
    assert_eq!(stays["state"], "running", "{stays}");
}

/// Alice's service `web` (`sleep 3600`) running, its readiness answered by a server of its own on the
/// test's loopback.
async fn run_web(hub: &Hub, alice: &str) {
    let port = common::http::listen(axum::Router::new().fallback(|| async { "ok" })).await.unwrap().port();
    let body = json!({ "name": "web", "kind": "service", "image": "busybox:latest", "command": ["sleep", "3600"],
        "resources": { "cpus": 1, "memory": "1GiB" }, "service": { "port": port, "ready": { "http": "/" } } });
    hub.submit(alice, body).await;
    hub.wait_for(alice, "web", 20, |w| w["state"] == "running").await;
}

/// A service's rollout under way when the hub stops is followed again after it starts: the Deployment
/// that finished its rollout meanwhile completes the update with the new terms.
#[tokio::test]
async fn a_rollout_under_way_across_a_restart_completes_after_it() {
    let (mut hub, cluster, (engine, api)) = hub_and_engine().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    run_web(&hub, &alice).await;
    // the new pod runs without getting ready: the update is under way when the hub stops
    cluster.lock().unwrap().hold = true;
    let (s, v) =
        hub.call(Method::PATCH, "/api/v1/workloads/web", Some(&alice), Some(json!({ "image": "busybox:1.36" }))).await;
    assert_eq!((s, v["service"]["update"]["state"].clone()), (StatusCode::OK, json!("rolling")), "{v}");
    assert_eq!(cluster.lock().unwrap().pods.len(), 2, "both pods while it rolls");
    hub.server.take().unwrap().shutdown().await;
    kube_fake::finish_rollouts(&api, &mut cluster.lock().unwrap());
    let mut cfg = common::config(hub.dir.path());
    cfg.engine = gpuhub_server::config::EngineKind::Kubernetes;
    let server = gpuhub_server::start(cfg, engine).await.unwrap();
    hub.url = format!("http://{}", server.addr);
    hub.server = Some(server);
    let alice = hub.login("alice", "alice-password").await;
    let w = hub.wait_for(&alice, "web", 20, |w| w["service"]["update"]["state"] == "done").await;
    assert_eq!((w["state"].clone(), w["image"].clone()), (json!("running"), json!("busybox:1.36")), "{w}");
}

mod portal {
    //! The portal on this engine, as a browser sends it (session cookie, CSRF token, form posts), as
    //! `portal.rs` does it on Docker's stand-in: the new-workload form submits a job and a gang, the
    //! list and a workload's page show their states, members, nodes and exit codes, the logs page
    //! shows the API server's log, and a workspace's app and its stop from its page.

    use super::*;
    use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};

    pub(super) struct Session {
        pub(super) cookie: String,
        csrf: String,
    }

    fn browser() -> reqwest::Client {
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
    }

    pub(super) async fn session(hub: &Hub, user: &str, password: &str) -> Session {
        let r =
            hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = r.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
        let page = get(hub, &cookie, "/new").await.1;
        let csrf = page.split("name=\"_csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
        Session { cookie, csrf }
    }

    pub(super) async fn get(hub: &Hub, cookie: &str, path: &str) -> (StatusCode, String) {
        let req = browser().get(format!("{}{path}", hub.url)).header("sec-fetch-mode", "navigate");
        let r = req.header(COOKIE, cookie).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// A form post from the portal's own page: status and `Location`.
    async fn post(hub: &Hub, s: &Session, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
        let mut form: Vec<(&str, &str)> = fields.to_vec();
        form.push(("_csrf", &s.csrf));
        let req = browser().post(format!("{}{path}", hub.url)).header("origin", hub.url.clone());
        let r = req.header(COOKIE, &s.cookie).form(&form).send().await.unwrap();
        let location = r.headers().get(LOCATION).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        (r.status(), location)
    }

    fn form<'a>(kind: &'a str, name: &'a str, command: &'a str, members: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("kind", kind),
            ("name", name),
            ("image_other", "busybox:latest"),
            ("command", command),
            ("cpus", "1"),
            ("memory", "1GiB"),
            ("gpus", "1"),
            ("members", members),
        ]
    }

    #[tokio::test]
    async fn the_form_submits_a_job_and_a_gang_whose_pages_and_logs_show_their_runs() {
        let (hub, cluster) = hub().await;
        let admin = hub.admin().await;
        let alice = hub.user(&admin, "alice").await;
        let s = session(&hub, "alice", "alice-password").await;
        let (status, location) = post(&hub, &s, "/new", &form("job", "fails", "sh -c 'exit 3'", "1")).await;
        assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/workloads/fails"));
        let (status, location) = post(&hub, &s, "/new", &form("job", "ddp", "true", "2")).await;
        assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/workloads/ddp"));
        hub.wait_for(&alice, "fails", 20, |w| w["state"] == "failed").await;
        hub.wait_for(&alice, "ddp", 20, |w| w["state"] == "succeeded").await;
        assert_eq!(cluster.lock().unwrap().jobs.len(), 3, "one Job per member");

        let (status, list) = get(&hub, &s.cookie, "/workloads").await;
        assert_eq!(status, StatusCode::OK);
        assert!(list.contains(r#"<tr data-name="fails" data-state="failed">"#), "{list}");
        assert!(list.contains(r#"<tr data-name="ddp" data-state="succeeded">"#), "{list}");
        assert!(list.contains("exit code 3"), "the failed job's code in the list: {list}");

        let (status, page) = get(&hub, &s.cookie, "/workloads/fails").await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("Member 0</th><td>exited on node1, GPUs") && page.contains("exit code 3"), "{page}");
        let (_, page) = get(&hub, &s.cookie, "/workloads/ddp").await;
        assert!(page.contains("— per member, 2 members"), "{page}");
        assert!(page.contains("Member 1</th><td>exited on node1"), "{page}");

        let (status, log) = get(&hub, &s.cookie, "/workloads/ddp/logs?member=1").await;
        assert_eq!(status, StatusCode::OK);
        assert!(log.contains("hello from ") && log.contains("rank 1 of 2 at ddp-0."), "{log}");
        let (_, log) = get(&hub, &s.cookie, "/workloads/fails/logs").await;
        assert!(log.contains("hello from "), "{log}");
    }

    #[tokio::test]
    async fn a_workspace_from_the_form_serves_its_app_and_stops_from_its_page() {
        let port = super::lab().await.to_string();
        let (hub, cluster) = hub().await;
        let admin = hub.admin().await;
        let alice = hub.user(&admin, "alice").await;
        let s = session(&hub, "alice", "alice-password").await;
        let apps = format!("lab:{port}");
        let mut fields = form("workspace", "nb", "sleep 3600", "1");
        fields.push(("apps", &apps));
        let (status, location) = post(&hub, &s, "/new", &fields).await;
        assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/workloads/nb"));
        hub.wait_for(&alice, "nb", 20, |w| w["state"] == "running").await;

        let (_, page) = get(&hub, &s.cookie, "/workloads/nb").await;
        assert!(page.contains(r#"href="/w/alice/nb/lab/""#) && page.contains("Terminal"), "{page}");
        let mut body = String::new();
        for _ in 0..100 {
            let (status, b) = get(&hub, &s.cookie, "/w/alice/nb/lab/lab/tree").await;
            if status == StatusCode::OK {
                body = b;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(body.contains("JupyterLab"), "the app through the hub's proxy with the session: {body:?}");

        let (status, confirm) = get(&hub, &s.cookie, "/workloads/nb/stop").await;
        assert_eq!(status, StatusCode::OK, "{confirm}");
        let (status, location) = post(&hub, &s, "/workloads/nb/stop", &[]).await;
        assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/workloads/nb"));
        let w = hub.wait_for(&alice, "nb", 20, |w| w["state"] == "stopped").await;
        assert_eq!(w["exit_code"], 143, "{w}");
        let (_, list) = get(&hub, &s.cookie, "/workloads").await;
        assert!(list.contains(r#"<tr data-name="nb" data-state="stopped">"#), "{list}");
        let pod = cluster.lock().unwrap().pods.values().next().cloned().expect("the stopped pod is kept");
        assert_eq!(pod["metadata"]["annotations"]["gpuhub.io/cancelled"], "true");
    }
}

mod cli {
    //! The `gpuhub` client against the hub on this engine, as `crates/client/tests` drive it (parsed
    //! arguments through `run_with`, a config directory of its own): login, run (following a job to
    //! its exit code), ps, logs of a gang's member, stop of a workspace.

    use super::*;
    use clap::Parser;
    use gpuhub_client::{ClientCli, Context, run_with};

    async fn cli(ctx: &Context, args: &[&str]) -> (i32, String) {
        let parsed = ClientCli::try_parse_from(std::iter::once("gpuhub").chain(args.iter().copied())).unwrap();
        let mut out = Vec::new();
        let code = run_with(ctx, parsed.global, parsed.command, &mut out).await;
        let out = String::from_utf8(out).unwrap();
        (code.unwrap_or_else(|e| panic!("gpuhub {args:?}: {e}; printed {out}")), out)
    }

    #[tokio::test]
    async fn run_ps_logs_and_stop_for_a_job_a_gang_and_a_workspace() {
        let (hub, cluster) = hub().await;
        let admin = hub.admin().await;
        let alice = hub.user(&admin, "alice").await;
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context::new(dir.path()).with_password("alice-password");
        let (code, _) = cli(&ctx, &["login", "--server", &hub.url, "--user", "alice"]).await;
        assert_eq!(code, 0);

        let run = ["run", "--image", "busybox:latest", "--cpus", "1", "--memory", "1GiB", "--gpus", "1"];
        let (code, out) = cli(&ctx, &[&run[..], &["--name", "bad", "-f", "--", "sh", "-c", "exit 3"]].concat()).await;
        assert_eq!(code, 3, "run --follow ends with the job's code: {out}");
        assert!(out.contains("hello from "), "the job's log followed: {out}");
        let (code, out) = cli(&ctx, &[&run[..], &["--name", "ddp", "--members", "2", "--", "true"]].concat()).await;
        assert_eq!((code, out.trim()), (0, "ddp"));
        let (code, out) =
            cli(&ctx, &[&run[..], &["--name", "dev", "--workspace", "--", "sleep", "3600"]].concat()).await;
        assert_eq!((code, out.trim()), (0, "dev"));
        hub.wait_for(&alice, "ddp", 20, |w| w["state"] == "succeeded").await;
        hub.wait_for(&alice, "dev", 20, |w| w["state"] == "running").await;

        let (_, ps) = cli(&ctx, &["ps"]).await;
        let state = |name: &str| {
            let row = ps.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {ps}"));
            row.split_whitespace().nth(2).unwrap().to_owned()
        };
        assert_eq!((state("bad"), state("ddp"), state("dev")), ("failed".into(), "succeeded".into(), "running".into()));
        let (_, log) = cli(&ctx, &["logs", "ddp", "--member", "1"]).await;
        assert!(log.contains("rank 1 of 2 at ddp-0."), "{log}");

        let (code, _) = cli(&ctx, &["stop", "dev"]).await;
        assert_eq!(code, 0);
        let w = hub.wait_for(&alice, "dev", 20, |w| w["state"] == "stopped").await;
        assert_eq!(w["exit_code"], 143, "{w}");
        let (_, ps) = cli(&ctx, &["ps"]).await;
        assert!(ps.lines().any(|l| l.starts_with("dev ") && l.contains(" stopped ")), "{ps}");
        assert_eq!(cluster.lock().unwrap().services.len(), 1, "the gang's headless service");
    }
}

#[tokio::test]
async fn without_volcano_a_gang_is_admitted_whole_or_waits_with_nothing_placed() {
    let (hub, cluster) = hub().await;
    cluster.lock().unwrap().nodes = vec![("node1".into(), 4), ("node2".into(), 4)];
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    // a workspace holds 2 of node1's 4 GPUs
    let hog = json!({ "name": "hog", "kind": "workspace", "image": "busybox:latest", "command": ["sleep", "3600"], "resources": { "cpus": 1, "memory": "1GiB", "gpus": 2 } });
    hub.submit(&alice, hog).await;
    hub.wait_for(&alice, "hog", 20, |w| w["state"] == "running").await;
    // two members of 3 GPUs: each would fit alone (on node2), both at once do not; kube-scheduler alone
    // would start member 0 there and leave member 1 waiting with its GPUs held
    let mut gang = job("ddp", "true");
    gang["members"] = json!(2);
    gang["resources"]["gpus"] = json!(3);
    hub.submit(&alice, gang).await;
    let w = hub
        .wait_for(&alice, "ddp", 20, |w| {
            w.to_string().contains("gpuhub admits a gang whole and the 2 members do not fit")
        })
        .await;
    let text = w.to_string();
    assert!(text.contains("member 1 needs 3 GPUs") && text.contains("node1 2 GPUs"), "why it waits: {w}");
    {
        let c = cluster.lock().unwrap();
        let members: Vec<&Value> =
            c.pods.values().filter(|p| p["metadata"]["labels"]["gpuhub.workload"] == w["id"]).collect();
        assert_eq!(members.len(), 2, "both members' pods exist");
        for p in &members {
            assert!(kube_fake::gated(p) && p["spec"]["nodeName"].is_null(), "none placed: {p}");
        }
    }
    // the workspace stops: its GPUs free, the watch sees its end and the gang is admitted whole
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads/hog/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let w = hub.wait_for(&alice, "ddp", 20, |w| w["state"] == "succeeded").await;
    let c = cluster.lock().unwrap();
    let mut nodes: Vec<String> = c
        .pods
        .values()
        .filter(|p| p["metadata"]["labels"]["gpuhub.workload"] == w["id"])
        .map(|p| {
            assert!(!kube_fake::gated(p), "ungated: {p}");
            assert_eq!(kube_fake::pinned(p), p["spec"]["nodeName"].as_str().map(str::to_owned), "bound where pinned");
            p["spec"]["nodeName"].as_str().unwrap().to_owned()
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node1", "node2"], "one member per node, placed together");
}

/// A service on Kubernetes is a Deployment, and its update the Deployment's rollout: one whose new pod
/// is ready completes (the new terms are the service's); one whose new pod crash-loops, or that the
/// cluster reports stalled (`ProgressDeadlineExceeded`), fails with Kubernetes' reason in the service's
/// `update` and its history, and the Deployment is rolled back to the old terms, whose pod serves on.
#[tokio::test]
async fn a_services_stalled_rollout_fails_its_update_with_the_reason_and_is_rolled_back() {
    let (hub, cluster) = hub().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    run_web(&hub, &alice).await;
    let update = async |body: Value| {
        let (s, v) = hub.call(Method::PATCH, "/api/v1/workloads/web", Some(&alice), Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v
    };
    let pods = || -> Vec<(String, Value)> {
        let c = cluster.lock().unwrap();
        c.pods.iter().map(|(n, p)| (n.clone(), p["spec"]["containers"][0]["command"].clone())).collect()
    };

    // an update whose new pod is ready completes: the new terms are the service's
    let v = update(json!({ "command": ["sleep", "3600", "v2"] })).await;
    assert_eq!(v["service"]["update"]["state"], "rolling", "{v}");
    let w = hub.wait_for(&alice, "web", 20, |w| w["service"]["update"]["state"] == "done").await;
    assert_eq!(w["command"], json!(["sleep", "3600", "v2"]), "{w}");
    let serving = pods();
    assert_eq!(serving.len(), 1, "only the new pod is left: {serving:?}");

    // one whose new pod crash-loops fails with the reason; the old terms serve on
    let v = update(json!({ "command": ["sh", "-c", "exit 1"] })).await;
    assert_eq!(v["service"]["update"]["state"], "rolling", "{v}");
    let w = hub.wait_for(&alice, "web", 20, |w| w["service"]["update"]["state"] == "failed").await;
    let message = w["service"]["update"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("crash-loops (CrashLoopBackOff, restarted 3 times, its last exit code 1)"), "{message}");
    assert_eq!((w["state"].clone(), w["command"].clone()), (json!("running"), json!(["sleep", "3600", "v2"])), "{w}");
    let history = w["history"].to_string();
    assert!(history.contains("CrashLoopBackOff"), "the history says why: {history}");
    // and the service's page in the portal
    let s = portal::session(&hub, "alice", "alice-password").await;
    let (status, page) = portal::get(&hub, &s.cookie, "/workloads/web").await;
    assert_eq!(status, StatusCode::OK);
    let shown = r#"data-update="failed">Last update — update failed: the new pod "#;
    assert!(page.contains(shown) && page.contains("crash-loops (CrashLoopBackOff, restarted 3 times"), "{page}");
    // rolled back: the Deployment's template is the old one again and only its pod is left
    let left = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let tpl =
                cluster.lock().unwrap().deployments.values().next().unwrap()["spec"]["template"]["spec"]["containers"]
                    [0]["command"]
                    .clone();
            if tpl == json!(["sleep", "3600", "v2"]) && pods() == serving {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    assert!(left.await.is_ok(), "rolled back to the old terms: {:?}", pods());

    // one the cluster reports stalled fails with Kubernetes' condition
    cluster.lock().unwrap().stall = true;
    update(json!({ "image": "busybox:1.36" })).await;
    let w = hub
        .wait_for(&alice, "web", 20, |w| {
            w["service"]["update"]["state"] == "failed"
                && w["service"]["update"]["message"].as_str().is_some_and(|m| m.contains("ProgressDeadlineExceeded"))
        })
        .await;
    assert_eq!(w["image"], "busybox:latest", "{w}");
}
