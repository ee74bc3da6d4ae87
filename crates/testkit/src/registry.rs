//! A real registry for pull tests: Debian's `docker-registry` on a free loopback port, a relay in
//! front of it that can hold a pull part-way, and an image of the tests' own pushed to it. Needs root,
//! Docker and docker-registry (scripts/setup-debian.sh installs it). Used by gpuhub's pull tests and the
//! LXD engine's.

use anyhow::{Context, Result, ensure};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A `docker-registry serve` on a free loopback port; killed when dropped.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts the registry and waits (at most 20 s) until it takes connections.
    pub fn start() -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
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
        while TcpStream::connect(&r.addr).is_err() {
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
#[derive(Debug)]
pub struct Valve {
    pub addr: String,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl Valve {
    /// Starts the relay to `upstream`, holding answers once `after` bytes went through.
    pub fn start(upstream: &str, after: u64) -> Result<Valve> {
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

    /// Lets every answer through from now on.
    pub fn open(&self) {
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

/// `docker ARGS`, which must succeed.
fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker").args(args).output().context("run docker")?;
    ensure!(out.status.success(), "docker {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Pushes an image of `base` with a 24 MiB layer of random bytes (big enough for a pull to show
/// progress) to `registry` as `pull-test/busybox:TAG`, then removes it from the engine; returns
/// `pull-test/busybox:TAG`, the reference without its registry.
pub fn push_test_image(registry: &str, base: &str, tag: &str) -> Result<String> {
    let path = format!("pull-test/busybox:{tag}");
    let pushed = format!("{registry}/{path}");
    let maker = format!("pull-maker-{tag}");
    docker(&[
        "run",
        "--network",
        "none",
        "--name",
        &maker,
        base,
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
    Ok(path)
}
