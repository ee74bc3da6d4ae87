//! Headless Chromium driven over WebDriver (`chromedriver` + `fantoccini`); Debian's `chromium` and
//! `chromium-driver` packages (`scripts/setup-debian.sh`).

use super::{WAIT, free_port};
use anyhow::{Context as _, Result, bail};
use fantoccini::ClientBuilder;
use fantoccini::{Client, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// Types `code` into the notebook's first cell once its kernel is idle, runs it, and returns the text
/// of its output.
pub async fn run_cell(c: &Client, code: &str) -> Result<String> {
    let cell = ".jp-NotebookPanel .jp-Cell .cm-content";
    c.wait().at_most(WAIT).for_element(Locator::Css(cell)).await.context("no cell editor")?;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(".jp-Notebook-ExecutionIndicator[data-status=idle]"))
        .await
        .context("the kernel did not become idle")?;
    // typed until the editor holds it (keys sent while the editor still sets itself up can be lost)
    super::eventually("the code in the cell", WAIT, Duration::from_millis(500), || async {
        let editor = c.find(Locator::Css(cell)).await?;
        if editor.text().await?.trim() == code {
            return Ok(Some(()));
        }
        editor.click().await?;
        editor.send_keys(code).await?;
        Ok(None)
    })
    .await?;
    // run (Shift+Enter), and again while nothing came of it: under load the kernel's WebSocket may
    // still be connecting when the first run is sent, and JupyterLab then drops it without a word (the
    // cell shows no execution count)
    let deadline = std::time::Instant::now() + WAIT;
    let mut send = true;
    loop {
        if send {
            let editor = c.find(Locator::Css(cell)).await?;
            editor.click().await?;
            editor.send_keys("\u{E008}\u{E007}").await?; // Shift+Enter
        }
        let output =
            super::eventually("the cell's output", Duration::from_secs(20), Duration::from_millis(200), || async {
                match c.find(Locator::Css(".jp-OutputArea-output")).await {
                    Ok(e) => Ok(Some(e.text().await?)),
                    Err(_) => Ok(None),
                }
            })
            .await;
        match output {
            Ok(text) => return Ok(text),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => {
                // running (an execution count or `*`): a slow kernel, waited on; else the run was lost
                let prompt = c.find(Locator::Css(".jp-Cell .jp-InputPrompt")).await?.text().await?;
                send = !prompt.contains(|ch: char| ch.is_ascii_digit() || ch == '*');
                if send {
                    eprintln!("the cell did not run (prompt {prompt:?}): running it again");
                }
            }
        }
    }
}

/// Saves what the browser shows as `target/screenshots/<name>.png` (kept by CI), so that a
/// failed step can be seen.
pub async fn screenshot(c: &Client, name: &str) {
    let dir = super::repo_root().join("target/screenshots");
    if let Ok(png) = c.screenshot().await {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{name}.png")), png);
    }
}

/// Fills the login page's form as `name` and sends it.
pub async fn log_in(c: &Client, name: &str, password: &str) -> Result<()> {
    c.find(Locator::Css("input[name=username]")).await?.send_keys(name).await?;
    c.find(Locator::Css("input[name=password]")).await?.send_keys(password).await?;
    c.find(Locator::Css("form button")).await?.click().await?;
    Ok(())
}

/// Waits until the browser is at a URL whose host is `host`; returns it.
pub async fn at_host(c: &Client, host: &str) -> Result<reqwest::Url> {
    super::eventually(&format!("the browser at {host}"), WAIT, Duration::from_millis(100), || async {
        let at = c.current_url().await?;
        Ok((at.host_str() == Some(host)).then_some(at))
    })
    .await
}
