//! Headless Chromium driven over WebDriver (`chromedriver` + `fantoccini`); Debian's `chromium` and
//! `chromium-driver` packages (`scripts/setup-debian.sh`).

use super::{WAIT, free_port};
use anyhow::{Context as _, Result, bail};
use fantoccini::ClientBuilder;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// Chromium's flags: headless, no sandbox (root in a container), nothing phoning home.
const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
];

/// The Chromium binary: Debian's real one rather than its wrapper script, else `chromium` on `PATH`.
fn chromium() -> String {
    ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("chromium")
        .to_owned()
}

/// A WebDriver session in headless Chromium; chromedriver and its browsers (one process group) are
/// killed on drop.
pub struct Browser {
    /// The WebDriver client.
    pub client: fantoccini::Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port, waits for it to say it listens, and opens a session.
    pub async fn start() -> Result<Browser> {
        let port = free_port()?;
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start chromedriver (apt-get install chromium-driver)")?;
        let stdout = driver.stdout.take().context("stdout")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("started successfully") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        let profile = tempfile::Builder::new().prefix("gpuhub-chromium-").tempdir()?;
        let mut guard = DriverGuard(Some(driver));
        if tokio::time::timeout(WAIT, rx).await.map(|r| r.is_ok()) != Ok(true) {
            bail!("chromedriver did not start");
        }
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), json!({"binary": chromium(), "args": args}));
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .context("open a WebDriver session")?;
        let driver = guard.0.take().context("driver")?;
        Ok(Browser { client, driver, _profile: profile })
    }

    /// Ends the session (the browser quits), then the driver.
    pub async fn close(self) -> Result<()> {
        self.client.clone().close().await.context("close the WebDriver session")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}

/// Kills a chromedriver that has not become a [`Browser`] yet.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            kill_group(c);
        }
    }
}

/// SIGKILL to the process group the child leads (chromedriver and the browsers it started).
fn kill_group(child: &mut Child) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
    let _ = child.wait();
}
