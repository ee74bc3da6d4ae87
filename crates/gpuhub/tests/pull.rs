//! Images pulled on first use from a real registry: Debian's `docker-registry`, started by the test on
//! loopback, serves an image (busybox with a 24 MiB layer of its own) that the local Docker engine does
//! not have, through a relay that holds the pull part-way until the test has seen its progress in the
//! API. With `image_allow` naming that registry, `gpuhub run --follow` submits it `pulling`, prints the
//! pull's progress and what it fetched, and runs it once pulled; a registry no pattern names is
//! refused with the policy's reason, and a tag the registry lacks fails the workload in the registry's
//! words. Needs root, Docker and docker-registry.

mod common;

use anyhow::{Context, Result, ensure};
use common::{Hub, IMAGE, docker};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A `docker-registry serve` on a free loopback port; killed when dropped.
struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    fn start() -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("docker-registry (apt-get install docker-registry)")?;
        let mut r = Registry { child, addr, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while common::http_get(&format!("http://{}", r.addr), "/v2/").is_err() {
            ensure!(r.child.try_wait()?.is_none(), "docker-registry exited");
            ensure!(Instant::now() < deadline, "docker-registry did not answer within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(r)
    }
}

/// A TCP relay to a registry that stops passing the registry's answers once `after` bytes went through,
/// until it is opened: a pull stands part-way for as long as the test looks at it (a pull from loopback
/// is otherwise over between two polls). Opened when dropped.
struct Valve {
    addr: String,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl Valve {
    fn start(upstream: &str, after: u64) -> Result<Valve> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let passed = Arc::new(AtomicU64::new(0));
        let (upstream, gate) = (upstream.to_owned(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(&upstream)) else { continue };
                let (Ok(mut c_in), Ok(mut s_out)) = (client.try_clone(), server.try_clone()) else { continue };
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let (gate, passed) = (gate.clone(), passed.clone());
                std::thread::spawn(move || relay(server, client, &gate, &passed, after));
            }
        });
        Ok(Valve { addr, open })
    }

    fn open(&self) {
        *self.open.0.lock().unwrap() = true;
        self.open.1.notify_all();
    }
}

impl Drop for Valve {
    fn drop(&mut self) {
        self.open();
    }
}

/// Passes `from`'s bytes to `to`, waiting at the gate once `after` bytes (over all connections) went.
fn relay(mut from: TcpStream, mut to: TcpStream, gate: &(Mutex<bool>, Condvar), passed: &AtomicU64, after: u64) {
    let mut buf = vec![0; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if passed.fetch_add(n as u64, Ordering::SeqCst) + n as u64 > after {
            let mut open = gate.0.lock().unwrap();
            while !*open {
                open = gate.1.wait(open).unwrap();
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[test]
fn an_allowed_image_is_pulled_on_first_use_with_progress() -> Result<()> {
    let _serial = common::serial();
    common::ensure_image()?;
    let registry = Registry::start()?;
    let suffix = common::suffix();
    let valve = Valve::start(&registry.addr, 2 << 20)?;
    // pushed to the registry, pulled through the valve
    let pushed = format!("{}/pull-test/busybox:{suffix}", registry.addr);
    let image = format!("{}/pull-test/busybox:{suffix}", valve.addr);
    // an image of our own with a layer big enough for the pull to show progress, pushed, then
    // removed from the engine
    let maker = format!("pull-maker-{suffix}");
    docker(&[
        "run",
        "--network",
        "none",
        "--name",
        &maker,
        IMAGE,
        "dd",
        "if=/dev/urandom",
        "of=/blob",
        "bs=1M",
        "count=24",
    ])?;
    docker(&["commit", &maker, &pushed])?;
    docker(&["rm", &maker])?;
    docker(&["push", &pushed])?;
    docker(&["rmi", &pushed])?;

    let mut hub = Hub::start_with(&format!("image_allow = [\"{}/*\"]", valve.addr))?;
    let alice = hub.user("alice")?;
    let run = alice
        .cmd(&[
            "run",
            "--name",
            "pulled",
            "--image",
            &image,
            "--follow",
            "--",
            "sh",
            "-c",
            "ls -l /blob && echo pulled-ok",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // the pull stands part-way at the valve: the API shows how far it is
    let deadline = Instant::now() + common::WAIT;
    let w = loop {
        let out = alice.output(&["--json", "inspect", "pulled"])?;
        if out.status.success() {
            let w: serde_json::Value = serde_json::from_slice(&out.stdout)?;
            if w["pull"]["current_bytes"].as_u64().unwrap_or(0) > 0 {
                break w;
            }
            ensure!(w["state"] == "pulling", "no progress seen while pulling: {w:#}");
        }
        ensure!(Instant::now() < deadline, "no pull progress through the API: {}", common::describe(&out));
        std::thread::sleep(Duration::from_millis(50));
    };
    let p = &w["pull"];
    let (current, total) = (p["current_bytes"].as_u64().unwrap_or(0), p["total_bytes"].as_u64().unwrap_or(0));
    ensure!(total >= 24 << 20 && current < total, "the progress of a 24MiB layer held at 2MiB: {p}");
    ensure!(p["layers"].as_u64() >= Some(1) && p["layers_done"].as_u64() < p["layers"].as_u64(), "layers: {p}");
    valve.open();
    let out = run.wait_with_output()?;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success() && stdout.contains("pulled-ok"), "the pulled image ran: {stdout} {stderr}");
    ensure!(stderr.contains(&format!("pulling {image}")), "no pull progress printed: {stderr}");
    // the bar's figures come and go with the CLI's polls; what the pull fetched is told at its end
    let end = stderr.lines().find(|l| l.starts_with(&format!("{image}: pulled "))).context(stderr.to_string())?;
    ensure!(end.contains("MiB (") && end.contains("layers); queued"), "the pull's end shows no figures: {end}");
    let w = alice.inspect("pulled")?;
    let states: Vec<&str> =
        w["history"].as_array().context("history")?.iter().filter_map(|s| s["state"].as_str()).collect();
    ensure!(states.starts_with(&["pulling", "queued"]), "history: {states:?}");
    docker(&["image", "inspect", &image]).context("the engine has the image now")?;

    let other = "127.0.0.2:5999/x:1";
    let err = alice.fails(&["run", "--name", "no", "--image", other, "--", "true"])?;
    ensure!(err.contains("registry 127.0.0.2:5999 is not allowed"), "a disallowed registry: {err}");

    let missing = format!("{}/pull-test/busybox:no-such-tag", valve.addr);
    let out = alice.output(&["run", "--name", "missing", "--image", &missing, "--follow", "--", "true"])?;
    ensure!(!out.status.success(), "a tag the registry lacks ran");
    let w = alice.inspect("missing")?;
    let m = w["message"].as_str().unwrap_or_default();
    ensure!(w["state"] == "failed" && m.contains("could not pull") && m.contains("not found"), "{w:#}");
    let _ = docker(&["rmi", &image]);
    drop(registry);
    Ok(())
}
