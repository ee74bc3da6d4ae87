//! gpuhub on LXD, end to end: the real binary with `engine = "lxd"` against this machine's LXD daemon
//! (`scripts/setup-debian.sh` installs and starts it), driven by the real CLI and HTTP through the hub's
//! proxy, the same scenarios as on Docker.
//!
//! Checks: a job runs as its owner's UID in its home, writes the home as that UID, and ends with its exit
//! code and output; a job granted a GPU sees exactly that GPU's device node and `CUDA_VISIBLE_DEVICES`;
//! two users' shares of one GPU run at once, each with the GPU's node and its limits; a share of an `mps`
//! GPU reaches gpuhub's MPS daemon (a stand-in program) through its pipe directory and shared memory; a
//! registry's image that Docker lacks is pulled on first use and runs; a JupyterLab workspace answers
//! through `/w/<user>/<name>/lab/` (started by the hub with exec in the container, reached through an LXD
//! proxy device) and writes a notebook into the home; SSH and the browser terminal reach it; `gpuhub save` makes a personal image of the workspace that a new job runs with the
//! workspace's files; stopping the workspace ends it; removing the image removes it from LXD. `gpuhub
//! serve` without a daemon stops at start naming the socket.
//!
//! Needs root, Docker (the images come from it) and LXD. When LXD does not answer, the test fails saying
//! how to start it, unless `GPUHUB_LXD_TESTS=skip`.

mod access_support;
#[allow(dead_code)]
use gpuhub_testkit::registry as registry_support;

use access_support::channels;
use access_support::ssh as sshc;
use access_support::{Hub, User, WAIT, describe};
use anyhow::{Context as _, Result, bail, ensure};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

const IMAGE: &str = "gpuhub/busybox:latest";

/// Whether LXD answers; `None` (after saying so) when the test is to be skipped.
fn lxd_up() -> Result<Option<()>> {
    let answers = Command::new("lxc").args(["info"]).output().is_ok_and(|o| o.status.success());
    if answers {
        return Ok(Some(()));
    }
    if std::env::var("GPUHUB_LXD_TESTS").as_deref() == Ok("skip") {
        println!("SKIPPED: LXD does not answer and GPUHUB_LXD_TESTS=skip");
        return Ok(None);
    }
    bail!(
        "LXD does not answer (`lxc info` failed): run scripts/setup-debian.sh as root, which installs and starts \
         it (or set GPUHUB_LXD_TESTS=skip)"
    )
}

/// Removes the LXD containers and saved images of the test's users, whatever happened.
struct LxdCleanup(Vec<String>);

impl Drop for LxdCleanup {
    fn drop(&mut self) {
        let list = |args: &[&str]| -> Vec<String> {
            Command::new("lxc")
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        for name in list(&["list", "--format", "csv", "-c", "n"]) {
            if self.0.iter().any(|u| name.contains(u.as_str())) {
                // a container the hub just stopped is busy stopping for a moment
                let deadline = std::time::Instant::now() + WAIT;
                loop {
                    match Command::new("lxc").args(["delete", "-f", &name]).output() {
                        Ok(o) if o.status.success() => break,
                        Ok(o)
                            if String::from_utf8_lossy(&o.stderr).contains("busy")
                                && std::time::Instant::now() < deadline =>
                        {
                            std::thread::sleep(std::time::Duration::from_millis(200))
                        }
                        Ok(o) => break eprintln!("cannot delete the container {name}: {}", describe(&o)),
                        Err(e) => break eprintln!("cannot run lxc delete: {e}"),
                    }
                }
            }
        }
        for alias in list(&["image", "alias", "list", "--format", "csv"]) {
            let alias = alias.split(',').next().unwrap_or_default().to_owned();
            if self.0.iter().any(|u| alias.contains(u.as_str())) {
                let _ = Command::new("lxc").args(["image", "delete", &alias]).output();
            }
        }
    }
}

/// The hub's configuration: the LXD engine with its state under `dir`, one fake GPU (a character device
/// node with NVIDIA's major number, as the Docker tests use) handed out as its device node.
fn lxd_config(dir: &Path) -> Result<String> {
    let node = dir.join("nvidia0");
    let out = Command::new("mknod").arg(&node).args(["c", "195", "0"]).output()?;
    ensure!(out.status.success(), "mknod {}: {}", node.display(), String::from_utf8_lossy(&out.stderr));
    Ok(format!(
        "engine = \"lxd\"\ngpu_mode = \"devices\"\nreconcile_secs = 5\n[lxd]\nstate_dir = \"{}\"\npoll_ms = 300\n\
         [[gpus]]\nuuid = \"GPU-fake-0\"\nmodel = \"H200\"\nmemory = \"141GiB\"\ndevice = \"{}\"\n",
        dir.join("lxd").display(),
        node.display()
    ))
}

/// `gpuhub ARGS` as `user`: its exit code and standard output.
async fn run(user: &User, args: &[&str]) -> Result<(Option<i32>, String)> {
    let out = user.output(args).await?;
    Ok((out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_a_jupyterlab_workspace_and_save_as_image_on_lxd() -> Result<()> {
    let _serial = access_support::serial().await;
    if lxd_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    access_support::ensure_image("build-jupyter-image.sh").await?;
    let state = tempfile::Builder::new().prefix("gpuhub-lxd-e2e-").tempdir()?;
    let mut hub = Hub::start_with(&lxd_config(state.path())?).await?;
    let mut alice = hub.user("alice").await?;
    let _cleanup = LxdCleanup(vec![alice.name.clone()]);
    let home = hub.dir.path().join("data/homes").join(&alice.name);

    // a job: its owner's UID, its home, its output and exit code
    let script = "echo uid=$(id -u) pwd=$(pwd); echo from-the-job > out.txt; exit 3";
    let (code, out) =
        run(&alice, &["run", "--name", "job", "--image", IMAGE, "--follow", "--", "sh", "-c", script]).await?;
    ensure!(code == Some(3), "the job's exit code: {code:?}; output: {out}");
    ensure!(out.contains(&format!("uid={} pwd=/home/{}", alice.uid, alice.name)), "the job's output: {out}");
    let written = home.join("out.txt");
    let meta = std::fs::metadata(&written).with_context(|| format!("{}", written.display()))?;
    ensure!(u64::from(meta.uid()) == alice.uid, "out.txt belongs to {}, not {}", meta.uid(), alice.uid);
    let w = alice.workload("job").await?;
    ensure!(w["state"] == "failed" && w["exit_code"] == 3, "the job's record: {w}");
    let logs = alice.ok(&["logs", "job"]).await?;
    ensure!(logs.contains("uid="), "gpuhub logs: {logs}");

    // a GPU job sees its GPU's device node and no other
    let script = "ls /dev/ | grep nvidia; echo cvd=$CUDA_VISIBLE_DEVICES";
    let args = ["run", "--name", "gpu", "--image", IMAGE, "--gpus", "1", "--follow", "--", "sh", "-c", script];
    let (code, out) = run(&alice, &args).await?;
    ensure!(code == Some(0), "the GPU job: {code:?} {out}");
    ensure!(out.contains("nvidia0") && out.contains("cvd=GPU-fake-0"), "the GPU job's output: {out}");

    // a JupyterLab workspace through the hub's proxy; a notebook written through it lands in the home
    hub.add_jupyter_catalog_entry().await?;
    let setup = "echo made-in-the-workspace > /tmp/saved.txt; exec sleep infinity";
    alice.ok(&["run", "--workspace", "--name", "nb", "--image", "jupyter", "--", "sh", "-c", setup]).await?;
    alice.wait_state("nb", "running").await?;
    let lab = alice.app_url("nb", "lab");
    alice.wait_http_ok(&format!("{lab}api/status")).await?;
    let page = access_support::http().get(format!("{lab}lab")).bearer_auth(&alice.token).send().await?;
    ensure!(page.status() == StatusCode::OK, "the lab page: {}", page.status());
    // Jupyter's XSRF token, from the cookie the lab page sets, goes with a write (as a browser's would)
    let xsrf = page
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("_xsrf=").map(|v| v.split(';').next().unwrap_or_default().to_owned()))
        .context("the lab page set no _xsrf cookie")?;
    ensure!(page.text().await?.contains("<title>JupyterLab"), "the lab page is not JupyterLab's");
    let notebook = json!({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5});
    let put = access_support::http()
        .request(Method::PUT, format!("{lab}api/contents/hello.ipynb"))
        .bearer_auth(&alice.token)
        .header("cookie", format!("_xsrf={xsrf}"))
        .header("x-xsrftoken", &xsrf)
        .json(&json!({"type": "notebook", "format": "json", "content": notebook}))
        .send()
        .await?;
    ensure!(put.status().is_success(), "writing a notebook through the lab: {} {}", put.status(), put.text().await?);
    let nb = std::fs::metadata(home.join("hello.ipynb")).context("the notebook in the home")?;
    ensure!(u64::from(nb.uid()) == alice.uid, "the notebook belongs to {}", nb.uid());

    // SSH through the gateway: a command as the owner with its exit status (LXD exec, no terminal)
    let keys = hub.dir.path().join("keys");
    std::fs::create_dir_all(&keys)?;
    let key = sshc::keygen(&keys, &alice.name).await?;
    alice.ok(&["ssh-key", "add", &key.public.display().to_string()]).await?;
    let port = hub.ssh_port;
    let uid = sshc::ok(port, &key, "nb@127.0.0.1", &["id", "-u"]).await?;
    ensure!(uid.trim() == alice.uid.to_string(), "ssh id -u: {uid}");
    let out = sshc::run(sshc::ssh(port, &key, "nb@127.0.0.1", &["exit 7"]), WAIT).await?;
    ensure!(out.status.code() == Some(7), "ssh exit 7: {}", describe(&out));
    // the browser terminal: a shell with a terminal (LXD exec), through the hub's WebSocket
    let term = channels::terminal_url(&hub.url, &alice.name, "nb");
    let mut ws = channels::connect(&term, &channels::Auth::Bearer(alice.token.clone()))
        .await
        .map_err(|e| anyhow::anyhow!("the terminal: {e:?}"))?;
    channels::terminal_roundtrip(&mut ws, "echo $((6*7))", "42").await?;
    drop(ws);

    // gpuhub killed and started again finds the workspace running, its lab still served
    hub.kill()?;
    hub.restart(&mut [&mut alice]).await?;
    let lab = alice.app_url("nb", "lab");
    alice.wait_state("nb", "running").await?;
    alice.wait_http_ok(&format!("{lab}api/status")).await?;

    // save as image, and a job of that image sees the workspace's files
    let saved = alice.ok(&["save", "nb", "--as", "myenv"]).await?;
    ensure!(saved.contains("saved nb as myenv"), "gpuhub save: {saved}");
    let reference = saved
        .split(|c: char| c.is_whitespace() || c == '(' || c == ',')
        .find(|w| w.starts_with("gpuhub-user/"))
        .unwrap_or_default()
        .to_owned();
    let alias = gpuhub_lxd::images::saved_alias(&reference);
    let info = Command::new("lxc").args(["image", "info", &alias]).output()?;
    ensure!(info.status.success(), "lxd has no image {alias}: {}", describe(&info));
    let mine = alice.ok(&["images", "--mine"]).await?;
    ensure!(mine.contains("myenv") && mine.contains(&reference), "images --mine: {mine}");
    let args = ["run", "--name", "again", "--image", "myenv", "--follow", "--", "cat", "/tmp/saved.txt"];
    let (code, out) = run(&alice, &args).await?;
    ensure!(code == Some(0) && out.contains("made-in-the-workspace"), "a job of the saved image: {code:?} {out}");

    // stop the workspace; remove the job and the image, which goes from LXD
    alice.ok(&["stop", "nb"]).await?;
    let w = alice.workload("nb").await?;
    ensure!(w["state"] == "stopped", "the stopped workspace: {}", w["state"]);
    alice.ok(&["rm", "again"]).await?;
    alice.ok(&["images", "--mine", "rm", "myenv"]).await?;
    let info = Command::new("lxc").args(["image", "info", &alias]).output()?;
    ensure!(!info.status.success(), "the image {alias} is still in lxd");
    let (status, _) = alice.api(Method::GET, "/api/v1/workloads/again", None).await?;
    ensure!(status == StatusCode::NOT_FOUND, "the removed job: {status}");
    hub.quiet();
    Ok(())
}

/// What a share's job prints about itself: its GPU's nodes, its limits and its `/dev/shm`; then `ready`,
/// and it holds its share until stopped.
const SHARE_REPORT: &str = "ls /dev | grep nvidia; echo cvd=$CUDA_VISIBLE_DEVICES milli=$GPUHUB_GPU_MILLI \
     mem=$GPUHUB_GPU_MEMORY limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE \
     pipe=$CUDA_MPS_PIPE_DIRECTORY; echo shm=$(grep ' /dev/shm ' /proc/mounts | cut -d' ' -f3); \
     ls /run/gpuhub/mps 2>/dev/null; echo from-$(id -u) > /dev/shm/client-$(id -u) && echo ready; exec sleep 600";

/// `--gpus 0.5 --gpu-memory 4GiB` job `name` of `user` running [`SHARE_REPORT`]; its output once ready.
async fn share_job(user: &User, name: &str) -> Result<String> {
    let args = [
        "run",
        "--name",
        name,
        "--image",
        IMAGE,
        "--gpus",
        "0.5",
        "--gpu-memory",
        "4GiB",
        "--",
        "sh",
        "-c",
        SHARE_REPORT,
    ];
    user.ok(&args).await?;
    user.wait_state(name, "running").await?;
    access_support::eventually(&format!("{name} ready"), WAIT, std::time::Duration::from_millis(200), || async {
        let out = user.ok(&["logs", name]).await?;
        Ok(out.contains("ready").then_some(out))
    })
    .await
}

/// The limits every share job here is told: half of the fake GPU, with 4 GiB.
fn share_limits() -> String {
    format!("cvd=GPU-fake-0 milli=500 mem={} limit=0=4096M threads=50", 4u64 << 30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_shares_of_one_gpu_run_at_once_on_lxd() -> Result<()> {
    let _serial = access_support::serial().await;
    if lxd_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    let state = tempfile::Builder::new().prefix("gpuhub-lxd-shares-").tempdir()?;
    let mut hub = Hub::start_with(&lxd_config(state.path())?).await?;
    let alice = hub.user("alice").await?;
    let bob = hub.user("bob").await?;
    let _cleanup = LxdCleanup(vec![alice.name.clone(), bob.name.clone()]);
    // each user's half of the one GPU (not in the mps mode: any users may share it), at the same time
    let a = share_job(&alice, "half").await?;
    let b = share_job(&bob, "half").await?;
    for (who, out) in [(&alice, &a), (&bob, &b)] {
        ensure!(out.starts_with("nvidia0\n") && out.contains(&share_limits()), "{}'s share: {out}", who.name);
        ensure!(out.contains("pipe=\nshm=tmpfs\nready"), "{}'s share has a /dev/shm of its own: {out}", who.name);
        let w = who.workload("half").await?;
        ensure!(w["state"] == "running" && w["gpus"] == json!(["GPU-fake-0"]), "{}'s share: {w}", who.name);
    }
    let nodes = alice.ok(&["nodes"]).await?;
    ensure!(
        nodes.contains(&format!("{}/half 0.5", alice.name)) && nodes.contains(&format!("{}/half 0.5", bob.name)),
        "gpuhub nodes shows both shares: {nodes}"
    );
    for who in [&alice, &bob] {
        who.ok(&["stop", "half"]).await?;
    }
    hub.quiet();
    Ok(())
}

/// Ends a stand-in MPS daemon the test left running and unmounts its shared memory, whatever happened.
struct MpsCleanup(std::path::PathBuf);

impl Drop for MpsCleanup {
    fn drop(&mut self) {
        let gpu = self.0.join("GPU-fake-0");
        if let Ok(pid) = std::fs::read_to_string(gpu.join("pipe/nvidia-cuda-mps-control.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).output();
        }
        let _ = Command::new("umount").arg(gpu.join("shm")).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mps_share_reaches_its_daemon_on_lxd() -> Result<()> {
    let _serial = access_support::serial().await;
    if lxd_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    let state = tempfile::Builder::new().prefix("gpuhub-lxd-mps-").tempdir()?;
    // MPS starts each user's server as that user: the kit makes the daemons' directory one every user
    // enters
    let program = gpuhub_testkit::mps::scripted_control(state.path())?;
    let record = gpuhub_testkit::mps::record(state.path());
    let mps = state.path().join("mps");
    let _daemon = MpsCleanup(mps.clone());
    let config = format!(
        "{}sharing = \"mps\"\n[mps]\ncontrol = \"{}\"\ndir = \"{}\"\nexclusive_process = false\n",
        lxd_config(state.path())?,
        program.display(),
        mps.display()
    );
    let mut hub = Hub::start_with(&config).await?;
    let alice = hub.user("alice").await?;
    let _cleanup = LxdCleanup(vec![alice.name.clone()]);
    let out = share_job(&alice, "mps").await?;
    ensure!(out.starts_with("nvidia0\n") && out.contains(&share_limits()), "the MPS share: {out}");
    ensure!(out.contains("pipe=/run/gpuhub/mps\n"), "the MPS share's pipe directory variable: {out}");
    // the daemon's pipe directory (its `control` pipe) and its tmpfs as the share's /dev/shm, written as
    // the user through LXD's 1:1 map
    ensure!(out.contains("shm=tmpfs\ncontrol\n"), "the MPS share's mounts: {out}");
    let client = mps.join("GPU-fake-0/shm").join(format!("client-{}", alice.uid));
    let meta = std::fs::metadata(&client).with_context(|| format!("{}", client.display()))?;
    ensure!(u64::from(meta.uid()) == alice.uid, "{} belongs to {}", client.display(), meta.uid());
    let started = std::fs::read_to_string(&record)?;
    ensure!(
        started.lines().any(|l| l.starts_with("daemon pid=") && l.contains(" gpu=GPU-fake-0 ")),
        "the daemon's record: {started}"
    );
    // the share ends; the daemon, holding no share, is told to quit
    alice.ok(&["stop", "mps"]).await?;
    access_support::eventually("the daemon quits", WAIT, std::time::Duration::from_millis(200), || async {
        Ok(std::fs::read_to_string(&record)?.contains("quit gpu=GPU-fake-0").then_some(()))
    })
    .await?;
    hub.quiet();
    Ok(())
}

/// Removes a pulled image from Docker and its conversion from LXD, whatever happened.
struct ImageCleanup(String);

impl Drop for ImageCleanup {
    fn drop(&mut self) {
        let inspect = Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", &self.0]).output();
        if let Some(o) = inspect.ok().filter(|o| o.status.success()) {
            let alias = gpuhub_lxd::images::docker_alias(String::from_utf8_lossy(&o.stdout).trim());
            let _ = Command::new("lxc").args(["image", "delete", &alias]).output();
        }
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_image_is_pulled_on_first_use_on_lxd() -> Result<()> {
    let _serial = access_support::serial().await;
    if lxd_up()?.is_none() {
        return Ok(());
    }
    access_support::ensure_image("build-busybox-image.sh").await?;
    // an image only the registry has (pushed, then removed from Docker)
    let registry = registry_support::Registry::start()?;
    let path = registry_support::push_test_image(&registry.addr, IMAGE, &access_support::suffix())?;
    let image = format!("{}/{path}", registry.addr);
    let _image = ImageCleanup(image.clone());
    let state = tempfile::Builder::new().prefix("gpuhub-lxd-pull-").tempdir()?;
    let config = format!("image_allow = [\"{}/*\"]\n{}", registry.addr, lxd_config(state.path())?);
    let mut hub = Hub::start_with(&config).await?;
    let alice = hub.user("alice").await?;
    let _cleanup = LxdCleanup(vec![alice.name.clone()]);
    let script = "ls /blob && echo pulled-ok";
    let args = ["run", "--name", "pulled", "--image", &image, "--follow", "--", "sh", "-c", script];
    let (code, out) = run(&alice, &args).await?;
    ensure!(code == Some(0) && out.contains("/blob\npulled-ok"), "the pulled image's job: {code:?} {out}");
    let w = alice.workload("pulled").await?;
    let states: Vec<&str> =
        w["history"].as_array().context("history")?.iter().filter_map(|s| s["state"].as_str()).collect();
    ensure!(w["state"] == "succeeded" && states.starts_with(&["pulling", "queued"]), "the pulled job: {w}");
    hub.quiet();
    Ok(())
}

#[tokio::test]
async fn serve_without_a_daemon_stops_naming_the_socket() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gpuhub.toml");
    let socket = dir.path().join("no-lxd.socket");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nssh_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nengine = \"lxd\"\n\
             [lxd]\nsocket = \"{}\"\nstate_dir = \"{}\"\n",
            dir.path().join("data").display(),
            socket.display(),
            dir.path().join("lxd").display()
        ),
    )?;
    let run = access_support::clean_command(access_support::BIN).args(["serve", "--config"]).arg(&config).output();
    let out = tokio::time::timeout(access_support::WAIT, run).await.context("gpuhub serve did not stop")??;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "gpuhub serve started without lxd: {}", describe(&out));
    ensure!(
        err.contains("no-lxd.socket") && err.contains("is LXD installed and running"),
        "gpuhub serve's error: {err}"
    );
    Ok(())
}
