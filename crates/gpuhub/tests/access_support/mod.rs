//! Fixtures for the workspace-access tests (`tests/access.rs`) and benchmark (`benches/access.rs`): a real
//! `gpuhub serve` subprocess on the local Docker engine, users with API tokens, the `gpuhub` CLI as
//! them, and workspaces serving JupyterLab or a plain HTTP server.
//!
//! Tests take [`serial`]: one server and one workspace at a time (they share 2 cores with the build).
//! Servers on one engine leave each other's containers alone (each labels its own with its
//! installation id); the config here also reconciles rarely after the start.

#![allow(dead_code)]

pub mod browser;
pub mod channels;
pub mod ssh;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use gpuhub_testkit::process::keep_server_output;
pub use gpuhub_testkit::process::{
    clean_async_command as clean_command, describe, eventually, free_port, remove_user_containers, repo_root, suffix,
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_gpuhub");
/// The first admin's password.
pub const ADMIN_PASSWORD: &str = "adminpass1";
/// Every test user's password.
pub const PASSWORD: &str = "userpass1";
/// The JupyterLab image `scripts/build-jupyter-image.sh` builds.
pub const JUPYTER_IMAGE: &str = "gpuhub/jupyter:latest";
/// The catalog entry's app: JupyterLab under the hub's prefix, as the owner, without its own auth.
pub const LAB_APP: &str = "lab:8888=jupyter lab --ServerApp.base_url={base_url} --port={port} \
     --ServerApp.ip=0.0.0.0 --ServerApp.token= --ServerApp.password= --no-browser --ServerApp.allow_remote_access=True";
/// The longest any wait may take before a check fails (2 shared cores, a busy engine): a safety net.
pub const WAIT: Duration = Duration::from_secs(120);

/// Serialises the tests of one binary.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Runs `scripts/NAME` once per process (the image scripts do nothing when the image is current).
pub async fn ensure_image(script: &'static str) -> Result<()> {
    static DONE: OnceLock<Mutex<Vec<&'static str>>> = OnceLock::new();
    let done = DONE.get_or_init(Mutex::default);
    if done.lock().unwrap().contains(&script) {
        return Ok(());
    }
    let path = repo_root().join("scripts").join(script);
    let out = tokio::process::Command::new("bash").arg(&path).output().await.context("run bash")?;
    ensure!(out.status.success(), "{} failed: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    done.lock().unwrap().push(script);
    Ok(())
}

/// An HTTP client that shows redirects instead of following them.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest client")
}

/// A `gpuhub serve` subprocess on a fresh data dir, its admin, and the users made for a test; on drop the
/// server is killed and the users' containers and networks are removed.
pub struct Hub {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The SSH gateway's port (from `/api/v1/info`).
    pub ssh_port: u16,
    /// The first admin, logged in.
    pub admin: User,
    child: Child,
    log: Arc<Mutex<String>>,
    suffix: String,
    users: Vec<String>,
    quiet: bool,
    /// Data dir, config and client homes.
    pub dir: tempfile::TempDir,
}

/// Starts `gpuhub serve --config CONFIG`; returns the process, its output so far (kept up to date) and
/// its URL once it prints it.
async fn spawn_server(config: &Path) -> Result<(Child, Arc<Mutex<String>>, String)> {
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .env("GPUHUB_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("GPUHUB_LOG", "info,tower_http=warn,sqlx=warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn gpuhub serve")?;
    let log: Arc<Mutex<String>> = Arc::default();
    let stdout = child.stdout.take().context("stdout")?;
    let stderr = child.stderr.take().context("stderr")?;
    let rx = keep_server_output(&log, stdout, stderr);
    match tokio::task::spawn_blocking(move || rx.recv_timeout(WAIT)).await {
        Ok(Ok(url)) => Ok((child, log, url)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            let out = log.lock().unwrap().clone();
            bail!("gpuhub serve printed no address; its output:\n{out}")
        }
    }
}

impl Hub {
    /// Builds the JupyterLab image if needed, starts a server without GPUs and logs the admin in.
    pub async fn start() -> Result<Hub> {
        ensure_image("build-jupyter-image.sh").await?;
        Self::start_with("gpu_mode = \"none\"\nreconcile_secs = 600\n").await
    }

    /// Starts a server whose configuration is the test's defaults (listen addresses, data dir, a short
    /// stop grace) and then `extra` (more keys, sections), and logs the admin in.
    pub async fn start_with(extra: &str) -> Result<Hub> {
        Self::start_on("127.0.0.1:0", extra).await
    }

    /// [`Hub::start_with`] listening on `listen` (a port known before it starts, for a provider's
    /// redirect URL).
    pub async fn start_on(listen: &str, extra: &str) -> Result<Hub> {
        let dir = tempfile::Builder::new().prefix("gpuhub-access-").tempdir()?;
        let data = dir.path().join("data");
        let config = dir.path().join("gpuhub.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"{listen}\"\nssh_listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nstop_grace_secs = 2\n\
                 pids_limit = 1024\n{extra}",
                data.display()
            ),
        )?;
        let (child, log, url) = spawn_server(&config).await?;
        let suffix = suffix();
        let admin_home = dir.path().join("clients/admin");
        let admin = User::login(&url, "admin", ADMIN_PASSWORD, admin_home).await?;
        let mut hub = Hub { url, ssh_port: 0, admin, child, log, suffix, users: Vec::new(), quiet: false, dir };
        hub.read_ssh_port().await?;
        Ok(hub)
    }

    async fn read_ssh_port(&mut self) -> Result<()> {
        let (status, info) = self.admin.api(Method::GET, "/api/v1/info", None).await?;
        ensure!(status == StatusCode::OK, "info: {status} {info}");
        self.ssh_port = info["ssh_port"].as_u64().and_then(|p| u16::try_from(p).ok()).context("no ssh_port")?;
        Ok(())
    }

    /// Kills the server with SIGKILL (no shutdown of any kind).
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Starts the server again on the same configuration and data dir (after [`Hub::kill`]); users keep
    /// their tokens and follow the new address.
    pub async fn restart(&mut self, users: &mut [&mut User]) -> Result<()> {
        let (child, log, url) = spawn_server(&self.dir.path().join("gpuhub.toml")).await?;
        let old = std::mem::take(&mut *self.log.lock().unwrap());
        log.lock().unwrap().insert_str(0, &format!("{old}---- restarted ----\n"));
        (self.child, self.log, self.url) = (child, log, url.clone());
        self.admin.url = url.clone();
        for u in users.iter_mut() {
            u.url = url.clone();
        }
        self.read_ssh_port().await
    }

    /// Creates (as the admin) and logs in the user `BASE-SUFFIX`, or an admin.
    pub async fn user_with_role(&mut self, base: &str, admin: bool) -> Result<User> {
        let name = format!("{base}-{}", self.suffix);
        let body = json!({"username": name, "password": PASSWORD, "admin": admin});
        let (status, v) = self.admin.api(Method::POST, "/api/v1/users", Some(body)).await?;
        ensure!(status.is_success(), "create user {name}: {status} {v}");
        self.users.push(name.clone());
        User::login(&self.url, &name, PASSWORD, self.dir.path().join("clients").join(&name)).await
    }

    /// A new user without privileges.
    pub async fn user(&mut self, base: &str) -> Result<User> {
        self.user_with_role(base, false).await
    }

    /// Adds the `jupyter` catalog image with its JupyterLab app, with the admin's `gpuhub images add`.
    pub async fn add_jupyter_catalog_entry(&self) -> Result<()> {
        self.admin.ok(&["images", "add", "jupyter", JUPYTER_IMAGE, "--app", LAB_APP]).await.map(drop)
    }

    /// Does not print the server's output when dropped (for the benchmark).
    pub fn quiet(&mut self) {
        self.quiet = true;
    }

    /// Everything the server printed so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The gateway's address as `ssh` takes it.
    pub fn ssh_host(&self) -> &'static str {
        "127.0.0.1"
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // the harness shows what a test printed only when it fails
        if !self.quiet {
            eprintln!("---- gpuhub serve output ----\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for user in &self.users {
            remove_user_containers(user);
        }
    }
}

/// A user of the hub: an API token, and the `gpuhub` CLI with its own config home.
#[derive(Debug, Clone)]
pub struct User {
    /// The account name.
    pub name: String,
    /// A bearer token.
    pub token: String,
    /// The account's UID (what its processes run as).
    pub uid: u64,
    /// The hub's URL.
    pub url: String,
    config_home: PathBuf,
}

impl User {
    /// Logs in through the API.
    pub async fn login(url: &str, name: &str, password: &str, config_home: PathBuf) -> Result<User> {
        let resp = http()
            .post(format!("{url}/api/v1/login"))
            .json(&json!({"username": name, "password": password}))
            .send()
            .await?;
        ensure!(resp.status().is_success(), "login {name}: {}", resp.status());
        let token = resp.json::<Value>().await?["token"].as_str().context("no token")?.to_owned();
        let mut user = User { name: name.to_owned(), token, uid: 0, url: url.to_owned(), config_home };
        let (_, me) = user.api(Method::GET, "/api/v1/me", None).await?;
        user.uid = me["uid"].as_u64().with_context(|| format!("me: {me}"))?;
        Ok(user)
    }

    /// A browser session of this user: `POST /api/v1/login`'s `gpuhub_session` cookie, as a `Cookie` line.
    pub async fn session_cookie(&self, password: &str) -> Result<String> {
        let resp = http()
            .post(format!("{}/api/v1/login", self.url))
            .json(&json!({"username": self.name, "password": password}))
            .send()
            .await?;
        ensure!(resp.status().is_success(), "login {}: {}", self.name, resp.status());
        let cookie = resp
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("gpuhub_session="))
            .context("no gpuhub_session cookie")?;
        Ok(cookie.split(';').next().unwrap_or_default().to_owned())
    }

    /// A request to the hub with this user's token; the status and the JSON body (`null` when none).
    pub async fn api(&self, method: Method, path: &str, body: Option<Value>) -> Result<(StatusCode, Value)> {
        let mut req = http().request(method, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    /// `gpuhub ARGS` as this user (`GPUHUB_TOKEN`, `GPUHUB_SERVER`, its own config home), not run yet.
    pub fn cmd(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = clean_command(BIN);
        cmd.env("XDG_CONFIG_HOME", &self.config_home)
            .env("GPUHUB_SERVER", &self.url)
            .env("GPUHUB_TOKEN", &self.token)
            .args(args);
        cmd
    }

    /// Runs `gpuhub ARGS`, whatever its outcome (at most [`WAIT`]).
    pub async fn output(&self, args: &[&str]) -> Result<Output> {
        let out = tokio::time::timeout(WAIT, self.cmd(args).output()).await;
        out.map_err(|_| anyhow!("gpuhub {args:?} ran longer than {WAIT:?}"))?.context("run gpuhub")
    }

    /// Runs `gpuhub ARGS`, which must succeed; returns its standard output.
    pub async fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.output(args).await?;
        ensure!(out.status.success(), "{}: `gpuhub {}` failed: {}", self.name, args.join(" "), describe(&out));
        Ok(String::from_utf8(out.stdout)?)
    }

    /// The workload `name` of this user, as the API shows it.
    pub async fn workload(&self, name: &str) -> Result<Value> {
        let (status, w) = self.api(Method::GET, &format!("/api/v1/workloads/{name}"), None).await?;
        ensure!(status == StatusCode::OK, "workload {name}: {status} {w}");
        Ok(w)
    }

    /// Waits until the workload is in `state` (polling: the API has no watch).
    pub async fn wait_state(&self, name: &str, state: &str) -> Result<Value> {
        eventually(&format!("{name} {state}"), WAIT, Duration::from_millis(100), || async {
            let w = self.workload(name).await?;
            if w["state"] == state {
                return Ok(Some(w));
            }
            if w["state"].as_str().is_some_and(|s| ["failed", "lost", "succeeded"].contains(&s)) {
                bail!("{name} ended: {w}");
            }
            Ok(None)
        })
        .await
    }

    /// `/w/<me>/<workspace>/<app>/` on the hub.
    pub fn app_url(&self, workspace: &str, app: &str) -> String {
        format!("{}/w/{}/{workspace}/{app}/", self.url, self.name)
    }

    /// Waits until `url` answers 200 to this user (an app starting inside its workspace).
    pub async fn wait_http_ok(&self, url: &str) -> Result<()> {
        eventually(&format!("{url} answering 200"), WAIT, Duration::from_millis(250), || async {
            let resp = http().get(url).bearer_auth(&self.token).send().await;
            Ok(resp.ok().filter(|r| r.status() == StatusCode::OK).map(drop))
        })
        .await
    }

    /// Starts the JupyterLab workspace `name` (catalog image `jupyter`) and waits for the lab's API.
    pub async fn start_notebook(&self, name: &str) -> Result<()> {
        self.ok(&["run", "--workspace", "--name", name, "--image", "jupyter", "--", "sleep", "infinity"]).await?;
        self.wait_state(name, "running").await?;
        self.wait_http_ok(&format!("{}api/status", self.app_url(name, "lab"))).await
    }

    /// Starts the workspace `name` whose command serves its app prefix `/w/<me>/<name>/web/` with
    /// Python's `http.server` on port 8000 (the app `web`; the proxy passes paths on unchanged), after
    /// running `setup` in that directory; waits until the app answers. The directory holds `hello.txt`.
    pub async fn start_web(&self, name: &str, setup: &str) -> Result<()> {
        let dir = format!("/tmp/site/w/{}/{name}/web", self.name);
        let script = format!(
            "set -e; mkdir -p {dir}; cd {dir}; echo hello > hello.txt; {setup}\n\
             cd /tmp/site; exec python3 -m http.server 8000 --bind 0.0.0.0"
        );
        let args = ["run", "--workspace", "--name", name, "--image", JUPYTER_IMAGE, "--app", "web:8000"];
        self.ok(&[&args[..], &["--", "sh", "-c", &script]].concat()).await?;
        self.wait_state(name, "running").await?;
        self.wait_http_ok(&format!("{}hello.txt", self.app_url(name, "web"))).await
    }
}

/// The container of a running workload (`container_id` as the API shows it, else by label).
pub fn container_id(w: &Value) -> Result<String> {
    if let Some(id) = w["container_id"].as_str() {
        return Ok(id.to_owned());
    }
    let id = w["id"].as_str().context("workload without id")?;
    let out = Command::new("docker")
        .args(["ps", "-q", "--no-trunc", "--filter", &format!("label=gpuhub.workload={id}")])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    text.lines().next().map(str::to_owned).with_context(|| format!("no container for {id}"))
}

/// The container's IP address on its network.
pub fn container_ip(container: &str) -> Result<String> {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", container])
        .output()?;
    ensure!(out.status.success(), "docker inspect: {}", describe(&out));
    let text = String::from_utf8(out.stdout)?;
    text.split_whitespace().next().map(str::to_owned).context("the container has no address")
}
