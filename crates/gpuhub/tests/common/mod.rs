//! Fixtures for the end-to-end tests (and the foundation benchmark): a real `gpuhub serve` subprocess on
//! fake GPU device nodes, CLI users each with their own `XDG_CONFIG_HOME`, and Docker inspection and
//! cleanup through the `docker` CLI.
//!
//! Every gpuhub server reconciles *all* containers labelled `gpuhub.workload` on the engine and removes
//! those its own database does not know, so two servers on one engine remove each other's containers.
//! Tests therefore take [`serial`] and run one server at a time.

#![allow(dead_code)]

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use gpuhub_testkit::mounts::unmount_under;
pub use gpuhub_testkit::process::clean_command;
pub use gpuhub_testkit::process::{describe, remove_user_containers, repo_root, suffix};
use gpuhub_testkit::process::{fake_gpu, keep_server_output, push_line};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_gpuhub");
/// The first admin's password (`GPUHUB_ADMIN_PASSWORD`).
pub const ADMIN_PASSWORD: &str = "adminpass1";
/// Every test user's password.
pub const PASSWORD: &str = "userpass1";
/// The local image `scripts/build-busybox-image.sh` builds.
pub const IMAGE: &str = "gpuhub/busybox";
/// How long any single wait may take before the test fails (2 shared cores, a busy engine).
pub const WAIT: Duration = Duration::from_secs(90);

/// Serialises the tests of one binary: see the module documentation.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Builds `gpuhub/busybox:latest` once per process (the script does nothing when it exists).
pub fn ensure_image() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let script = repo_root().join("scripts/build-busybox-image.sh");
        match Command::new("bash").arg(&script).output() {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!("{} failed: {}", script.display(), String::from_utf8_lossy(&o.stderr))),
            Err(e) => Err(format!("cannot run {}: {e}", script.display())),
        }
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// A `gpuhub serve` subprocess with its own data dir, config and GPU device nodes; killed when dropped.
pub struct Server {
    /// The API's base URL (`http://127.0.0.1:PORT`); a restart changes it, and [`User`]s follow it.
    url: Arc<Mutex<String>>,
    /// The data directory (SQLite database, homes, archived logs).
    pub data_dir: PathBuf,
    /// The host paths of the fake GPU device nodes, by index.
    pub devices: Vec<PathBuf>,
    config: PathBuf,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    dir: tempfile::TempDir,
}

impl Server {
    /// Makes `gpus` fake GPUs (`mknod … c 195 N`), writes the config and starts the server.
    pub fn start(gpus: u32) -> Result<Server> {
        let server = Self::prepare(gpus)?;
        server.launch()
    }

    /// Like [`Server::start`], but does not start it yet (to fill the data dir first).
    pub fn prepare(gpus: u32) -> Result<Server> {
        let dir = tempfile::Builder::new().prefix("gpuhub-e2e-").tempdir()?;
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev)?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir(&data_dir)?;
        let mut config = format!(
            "listen = \"127.0.0.1:0\"\nssh_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\ngpu_mode = \"devices\"\n\
             stop_grace_secs = 5\npids_limit = 1024\n[monitor]\ninterval_secs = 1\n",
            data_dir.display()
        );
        let mut devices = Vec::new();
        for i in 0..gpus {
            config.push_str(&fake_gpu(&dev, i)?);
            devices.push(dev.join(format!("nvidia{i}")));
        }
        let config_path = dir.path().join("gpuhub.toml");
        std::fs::write(&config_path, config)?;
        Ok(Server {
            url: Arc::new(Mutex::new(String::new())),
            data_dir,
            devices,
            config: config_path,
            child: None,
            log: Arc::default(),
            dir,
        })
    }

    /// Adds lines to the config of a prepared server (top-level keys go before any table: they are
    /// put first).
    pub fn configure(&self, top_level: &str) -> Result<()> {
        let old = std::fs::read_to_string(&self.config)?;
        std::fs::write(&self.config, format!("{top_level}\n{old}"))?;
        Ok(())
    }

    /// Adds tables at the end of the config of a prepared server.
    pub fn append(&self, tables: &str) -> Result<()> {
        let old = std::fs::read_to_string(&self.config)?;
        std::fs::write(&self.config, format!("{old}\n{tables}\n"))?;
        Ok(())
    }

    /// Starts a prepared server.
    pub fn launch(mut self) -> Result<Server> {
        self.spawn()?;
        Ok(self)
    }

    /// Starts the process and waits for its `gpuhub serving on URL` line and a healthy answer.
    fn spawn(&mut self) -> Result<()> {
        ensure!(self.child.is_none(), "the server runs already");
        let mut child = clean_command(BIN)
            .args(["serve", "--config"])
            .arg(&self.config)
            .env("GPUHUB_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("GPUHUB_LOG", "info,tower_http=warn,sqlx=warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn gpuhub serve")?;
        let stdout = child.stdout.take().context("stdout")?;
        let stderr = child.stderr.take().context("stderr")?;
        let rx = keep_server_output(&self.log, stdout, stderr);
        self.child = Some(child);
        let url = match rx.recv_timeout(WAIT) {
            Ok(url) => url,
            Err(_) => bail!("gpuhub serve printed no address within {WAIT:?}; its output:\n{}", self.log()),
        };
        *self.url.lock().unwrap() = url.clone();
        let health = http_get(&url, "/api/v1/health")?;
        ensure!(health.starts_with("HTTP/1.1 200") || health.starts_with("HTTP/1.0 200"), "health: {health}");
        Ok(())
    }

    /// The API's current base URL.
    pub fn url(&self) -> String {
        self.url.lock().unwrap().clone()
    }

    /// The server process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything the server printed so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Kills the server with SIGKILL (no shutdown of any kind) and reaps it.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts the server again on the same data dir, config and address (the CLI keeps its token for
    /// that server URL only).
    pub fn restart(&mut self) -> Result<()> {
        self.kill()?;
        let addr = self.url().trim_start_matches("http://").to_owned();
        let config: String = std::fs::read_to_string(&self.config)?
            .lines()
            .map(|l| if l.starts_with("listen = ") { format!("listen = \"{addr}\"\n") } else { format!("{l}\n") })
            .collect();
        std::fs::write(&self.config, config)?;
        push_line(&self.log, "---- restart ----");
        self.spawn()?;
        ensure!(self.url() == format!("http://{addr}"), "the server moved to {}", self.url());
        Ok(())
    }

    /// The resident set size of the server process (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Result<u64> {
        let pid = self.pid().context("server not running")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
        Ok(line.split_whitespace().nth(1).context("VmRSS value")?.parse()?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.kill();
        // homes loop-mounted under the data dir (home quotas): detached, so the directory can go
        unmount_under(self.dir.path());
    }
}

/// A plain HTTP/1.0 GET (no client library needed); returns the whole response.
pub fn http_get(base: &str, path: &str) -> Result<String> {
    let addr = base.strip_prefix("http://").context("not an http URL")?;
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(WAIT))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp)
}

/// A CLI user: `gpuhub` with its own config directory, talking to the server's current URL.
pub struct User {
    /// The account name.
    pub name: String,
    config_home: PathBuf,
    url: Arc<Mutex<String>>,
}

impl User {
    /// `gpuhub ARGS` as this user (not run yet).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = clean_command(BIN);
        cmd.env("XDG_CONFIG_HOME", &self.config_home).env("GPUHUB_SERVER", self.url.lock().unwrap().as_str());
        cmd.args(args);
        cmd
    }

    /// Runs `gpuhub ARGS` with `stdin` as standard input.
    pub fn output_with_stdin(&self, args: &[&str], stdin: &str) -> Result<Output> {
        let mut child = self.cmd(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        child.stdin.take().context("stdin")?.write_all(stdin.as_bytes())?;
        Ok(child.wait_with_output()?)
    }

    /// Runs `gpuhub ARGS`, whatever its outcome.
    pub fn output(&self, args: &[&str]) -> Result<Output> {
        self.cmd(args).output().with_context(|| format!("gpuhub {args:?}"))
    }

    /// Runs `gpuhub ARGS`, which must succeed; returns its standard output.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        ensure!(out.status.success(), "{} `gpuhub {}` failed: {}", self.name, args.join(" "), describe(&out));
        Ok(String::from_utf8(out.stdout)?)
    }

    /// Runs `gpuhub ARGS`, which must fail; returns its standard error.
    pub fn fails(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args)?;
        ensure!(!out.status.success(), "{} `gpuhub {}` succeeded: {}", self.name, args.join(" "), describe(&out));
        Ok(String::from_utf8(out.stderr)?)
    }

    /// `gpuhub --json ARGS`, parsed.
    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all)?;
        serde_json::from_str(&text).with_context(|| format!("`gpuhub {}` printed no JSON: {text}", all.join(" ")))
    }

    /// `gpuhub inspect NAME`.
    pub fn inspect(&self, name: &str) -> Result<Value> {
        self.json(&["inspect", name])
    }

    /// Polls `gpuhub inspect NAME` (every 100 ms, at most [`WAIT`]) until `done` holds; for states
    /// nothing signals to a client (a queue's reason, an adoption after a restart).
    pub fn wait_until(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let w = self.inspect(name)?;
            if done(&w) {
                return Ok(w);
            }
            if Instant::now() > deadline {
                bail!("{name} did not become {what} within {WAIT:?}; last seen: {w:#}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Follows `gpuhub logs -f NAME` until a line equal to `line` arrives; returns the output so far.
    pub fn logs_until(&self, name: &str, line: &str) -> Result<String> {
        self.follow(name)?.until(line)
    }

    /// Starts `gpuhub logs -f NAME`; read it with [`Follower::until`].
    pub fn follow(&self, name: &str) -> Result<Follower> {
        let mut child = self.cmd(&["logs", "-f", name]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(Follower { name: name.to_owned(), child, lines: rx, seen: String::new() })
    }
}

/// A running `gpuhub logs -f NAME`; killed when dropped.
pub struct Follower {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: String,
}

impl Follower {
    /// The next line; an error when the stream ended or `within` passed first.
    pub fn next_line(&mut self, within: Duration) -> Result<String, RecvTimeoutError> {
        let l = self.lines.recv_timeout(within)?;
        self.seen.push_str(&l);
        self.seen.push('\n');
        Ok(l)
    }

    /// Reads until a line equal to `line` arrives (at most [`WAIT`]); returns all output read so far.
    pub fn until(mut self, line: &str) -> Result<String> {
        let deadline = Instant::now() + WAIT;
        let outcome = loop {
            match self.next_line(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l == line => break Ok(()),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => break Err(format!("no line {line:?} within {WAIT:?}")),
                Err(RecvTimeoutError::Disconnected) => break Err(format!("the log stream ended without {line:?}")),
            }
        };
        let _ = self.child.kill();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        match outcome {
            Ok(()) => Ok(std::mem::take(&mut self.seen)),
            Err(why) => bail!("logs -f {}: {why}; output {:?}; stderr {stderr:?}", self.name, self.seen),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server with two fake GPUs, its logged-in admin, and test users with unique names; on drop the server
/// is killed and the users' containers and networks are removed.
pub struct Hub {
    pub server: Server,
    pub admin: User,
    suffix: String,
    users: Vec<String>,
}

impl Hub {
    /// Builds the image if needed, starts a two-GPU server and logs the admin in.
    pub fn start() -> Result<Hub> {
        Self::start_with("")
    }

    /// [`Hub::start`] with top-level config lines added.
    pub fn start_with(config: &str) -> Result<Hub> {
        Self::start_configured(config, "")
    }

    /// [`Hub::start`] with top-level config lines and tables (`[ldap]` …) added.
    pub fn start_configured(top_level: &str, tables: &str) -> Result<Hub> {
        ensure_image()?;
        let server = Server::prepare(2)?;
        server.configure(top_level)?;
        server.append(tables)?;
        let server = server.launch()?;
        let suffix = suffix();
        let admin = login(&server, "admin", ADMIN_PASSWORD, &format!("admin-{suffix}"))?;
        Ok(Hub { server, admin, suffix, users: Vec::new() })
    }

    /// Creates (as the admin) and logs in the user `BASE-SUFFIX`.
    pub fn user(&mut self, base: &str) -> Result<User> {
        let name = format!("{base}-{}", self.suffix);
        self.users.push(name.clone());
        let out = self.admin.output_with_stdin(&["user", "add", &name, "--password-stdin"], PASSWORD)?;
        ensure!(out.status.success(), "user add {name}: {}", describe(&out));
        login(&self.server, &name, PASSWORD, &name)
    }

    /// Logs `name` in with `password` (an account the hub did not make: a directory's), and removes
    /// their containers when the hub goes.
    pub fn sign_in(&mut self, name: &str, password: &str) -> Result<User> {
        self.users.push(name.to_owned());
        login(&self.server, name, password, name)
    }

    /// `gpuhub login` as `name` with `password`, which must fail: what it printed.
    pub fn sign_in_fails(&self, name: &str, password: &str) -> Result<String> {
        match login(&self.server, name, password, &format!("{name}-failing")) {
            Ok(_) => anyhow::bail!("{name} signed in with a wrong password"),
            Err(e) => Ok(e.to_string()),
        }
    }

    /// Prints the server's output, and any other gpuhub server of this host (for a failing test).
    pub fn dump(&self) {
        eprintln!("---- gpuhub serve output ----\n{}", self.server.log());
        let others = other_servers(self.server.pid());
        if !others.is_empty() {
            eprintln!(
                "---- other gpuhub servers run on this host: {others:?}; each one removes the containers of \
                 workloads its own database lacks (its reconciliation), so they may have broken this test ----"
            );
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // the harness shows what a test printed only when it fails
        self.dump();
        let _ = self.server.kill();
        for user in &self.users {
            remove_user_containers(user);
        }
    }
}

/// `gpuhub serve` processes of this host other than `own`: (pid, command line).
pub fn other_servers(own: Option<u32>) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = raw.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let is_server = args.first().is_some_and(|a| a.ends_with("/gpuhub") || a == "gpuhub")
            && args.get(1).is_some_and(|a| a == "serve");
        if is_server && Some(pid) != own {
            out.push((pid, args.join(" ").trim().to_owned()));
        }
    }
    out
}

/// Logs `name` in with a config home of its own (`dir` under the server's temp dir).
fn login(server: &Server, name: &str, password: &str, dir: &str) -> Result<User> {
    let user = User {
        name: name.to_owned(),
        config_home: server.dir.path().join("clients").join(dir),
        url: server.url.clone(),
    };
    let url = server.url();
    let out = user.output_with_stdin(&["login", "--server", &url, "--user", name, "--password-stdin"], password)?;
    ensure!(out.status.success(), "login {name}: {}", describe(&out));
    Ok(user)
}

/// Runs `docker ARGS`, which must succeed; returns its standard output, trimmed.
pub fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker").args(args).output().context("run docker")?;
    ensure!(out.status.success(), "docker {}: {}", args.join(" "), describe(&out));
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Full ids of the containers (running or not) of the workload with id `workload_id`.
pub fn containers_of(workload_id: &str) -> Result<Vec<String>> {
    let label = format!("label=gpuhub.workload={workload_id}");
    Ok(docker(&["ps", "-aq", "--no-trunc", "--filter", &label])?.lines().map(str::to_owned).collect())
}

/// The one container of a workload.
pub fn container_of(w: &Value) -> Result<String> {
    let id = w["id"].as_str().context("workload without id")?;
    match containers_of(id)?.as_slice() {
        [one] => Ok(one.clone()),
        other => Err(anyhow!("workload {} has containers {other:?}, expected one", w["name"])),
    }
}

/// `docker inspect ID`, the one object.
pub fn docker_inspect(id: &str) -> Result<Value> {
    let v: Value = serde_json::from_str(&docker(&["inspect", id])?)?;
    v.get(0).cloned().context("docker inspect returned nothing")
}

/// The host paths of the devices a container gets.
pub fn host_devices(container: &Value) -> Vec<String> {
    container["HostConfig"]["Devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["PathOnHost"].as_str().map(str::to_owned))
        .collect()
}

/// The `/dev/nvidiaN` lines (a GPU's own node, not the control nodes) of some output.
pub fn gpu_nodes(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.strip_prefix("/dev/nvidia").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
        .collect()
}

/// GPU UUID → holder (`owner/workload`) from `gpuhub nodes --json`; fails if a holder appears on a GPU
/// that does not exist.
pub fn gpu_holders(user: &User) -> Result<BTreeMap<String, Option<String>>> {
    let nodes = user.json(&["nodes"])?;
    let mut out = BTreeMap::new();
    for node in nodes.as_array().context("nodes is no list")? {
        for g in node["gpus"].as_array().context("gpus is no list")? {
            let uuid = g["uuid"].as_str().context("uuid")?.to_owned();
            let holder = g
                .get("holder")
                .filter(|h| !h.is_null())
                .map(|h| format!("{}/{}", h["owner"].as_str().unwrap_or("?"), h["workload"].as_str().unwrap_or("?")));
            ensure!(out.insert(uuid.clone(), holder).is_none(), "GPU {uuid} listed twice");
        }
    }
    Ok(out)
}

/// Checks that no GPU is held by two workloads, as `ps --all --json` (the GPU lists of the workloads that
/// hold resources: starting or running; an ended one shows what it held) tells; returns GPU UUID →
/// workload name.
pub fn exclusive_gpus(admin: &User) -> Result<BTreeMap<String, String>> {
    let all = admin.json(&["ps", "--all"])?;
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let holding = |w: &&Value| w["state"] == "starting" || w["state"] == "running";
    for w in all.as_array().context("ps is no list")?.iter().filter(holding) {
        let name = format!("{}/{}", w["owner"].as_str().unwrap_or("?"), w["name"].as_str().unwrap_or("?"));
        for g in w["gpus"].as_array().into_iter().flatten() {
            let uuid = g.as_str().context("gpu uuid")?.to_owned();
            if let Some(other) = held.insert(uuid.clone(), name.clone()) {
                bail!("GPU {uuid} is held by {other} and {name} at once: {all:#}");
            }
        }
    }
    Ok(held)
}
