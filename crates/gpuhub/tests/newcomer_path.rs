//! The newcomer's path, timed, as the README tells it (issue 21): `gpuhub serve` with the embedded
//! defaults (no config, no `GPUHUB_*` variable, the API on `127.0.0.1:8080`, data in `./gpuhub-data`), the
//! admin's first sign-in in the browser with the generated password and its forced change, a student and
//! the README's JupyterLab catalog entry made with the CLI, then the student from the login page, through
//! the JupyterLab card, to a notebook's first cell run. It prints a timeline.
//!
//! Not run by `cargo test`: it needs port 8080 free and measures a binary of one's choice. Run it after a
//! fresh clone's `cargo build --release` (what `scripts/newcomer-run.sh` does), with the JupyterLab image
//! built (`bash scripts/build-jupyter-image.sh`):
//!
//! ```sh
//! GPUHUB_NEWCOMER_BIN=/path/to/clone/target/release/gpuhub \
//!   cargo test -p gpuhub --test newcomer_path -- --ignored --nocapture
//! ```

mod access_support;

use access_support::browser::{self, Browser};
use access_support::{WAIT, clean_command, describe, eventually, remove_user_containers, suffix};
use anyhow::{Context as _, Result, bail, ensure};
use fantoccini::{Client, Locator};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The catalog entry exactly as the README's "First steps" write it.
const README_LAB_APP: &str = "lab:8888=jupyter lab --ServerApp.base_url={base_url} --port={port} --ServerApp.ip=0.0.0.0 --ServerApp.token= --no-browser";

/// Moments of the path since the server was started.
struct Timeline {
    t0: Instant,
    marks: Vec<(String, Duration)>,
}

impl Timeline {
    fn mark(&mut self, what: &str) {
        let at = self.t0.elapsed();
        println!("newcomer: {:>6.1} s  {what}", at.as_secs_f64());
        self.marks.push((what.to_owned(), at));
    }
}

/// `gpuhub ARGS` against the hub, as the client home `home` (where `gpuhub login` keeps its token).
async fn cli(bin: &str, home: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut cmd = clean_command(bin);
    cmd.env("XDG_CONFIG_HOME", home).env("NO_COLOR", "1").args(args);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().context("run gpuhub")?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(format!("{text}\n").as_bytes()).await?;
    }
    let out = tokio::time::timeout(WAIT, child.wait_with_output()).await.context("gpuhub ran too long")??;
    ensure!(out.status.success(), "`gpuhub {}` failed: {}", args.join(" "), describe(&out));
    Ok(String::from_utf8(out.stdout)?)
}

/// Fills the form of the page the browser is at: each `(name, value)` into `input[name=…]`, then its
/// first button.
async fn submit(c: &Client, form: &str, fields: &[(&str, &str)]) -> Result<()> {
    for (name, value) in fields {
        c.wait()
            .at_most(WAIT)
            .for_element(Locator::Css(&format!("{form} input[name={name}]")))
            .await?
            .send_keys(value)
            .await?;
    }
    c.find(Locator::Css(&format!("{form} button"))).await?.click().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: needs port 8080 free; run by scripts/newcomer-run.sh"]
async fn the_readme_path_from_serve_to_a_notebooks_first_cell() -> Result<()> {
    let bin = std::env::var("GPUHUB_NEWCOMER_BIN").unwrap_or_else(|_| access_support::BIN.to_owned());
    let work = tempfile::Builder::new().prefix("gpuhub-newcomer-").tempdir()?;
    let homes = work.path().join("clients");
    let student = format!("student-{}", suffix());

    // the README's run command, in an empty directory: embedded defaults
    let mut line = Timeline { t0: Instant::now(), marks: Vec::new() };
    let mut server = clean_command(&bin);
    server.arg("serve").current_dir(work.path()).env("NO_COLOR", "1");
    server.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut server = server.spawn().context("gpuhub serve")?;
    let mut out = BufReader::new(server.stdout.take().context("stdout")?).lines();
    let mut err = BufReader::new(server.stderr.take().context("stderr")?).lines();
    let url = tokio::time::timeout(WAIT, async {
        loop {
            tokio::select! {
                l = out.next_line() => match l? {
                    Some(l) => if let Some(url) = l.strip_prefix("gpuhub serving on ") { return Ok(url.trim().to_owned()) },
                    None => bail!("gpuhub serve ended"),
                },
                l = err.next_line() => if let Some(l) = l? { eprintln!("serve: {l}") },
            }
        }
    })
    .await
    .context("gpuhub serve printed no address")??;
    tokio::spawn(async move {
        while let Ok(Some(l)) = err.next_line().await {
            eprintln!("serve: {l}");
        }
    });
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    ensure!(url == "http://127.0.0.1:8080", "the embedded default address: {url}");
    line.mark("gpuhub serve answers (embedded defaults)");
    let generated = std::fs::read_to_string(work.path().join("gpuhub-data/initial-admin-password"))
        .context("the generated admin password's file")?;
    let generated = generated.trim();

    // the admin's first sign-in, in the browser: the generated password must be changed first
    let admin_password = "a-lab-admin-1";
    let b = Browser::start().await?;
    let c = &b.client;
    c.goto(&format!("{url}/")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, "admin", generated).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=new_password]")).await?;
    ensure!(c.current_url().await?.path() == "/account", "the first sign-in leads to the account page");
    submit(c, "form[action='/account/password']", &[("current_password", generated), ("new_password", admin_password)])
        .await?;
    eventually("the password changed", WAIT, Duration::from_millis(200), || async {
        Ok((!work.path().join("gpuhub-data/initial-admin-password").exists()).then_some(()))
    })
    .await?;
    line.mark("admin signed in and changed the generated password (portal)");

    // the README's first steps at the CLI: log in, a student, the JupyterLab catalog entry
    let admin_home = homes.join("admin");
    cli(
        &bin,
        &admin_home,
        &["login", "--server", "127.0.0.1:8080", "--user", "admin", "--password-stdin"],
        Some(admin_password),
    )
    .await?;
    cli(&bin, &admin_home, &["user", "add", &student, "--password-stdin"], Some("a-student-1")).await?;
    cli(&bin, &admin_home, &["images", "add", "jupyter", "gpuhub/jupyter:latest", "--app", README_LAB_APP], None)
        .await?;
    line.mark("CLI: admin logged in, a student added, the JupyterLab image in the catalog");

    // the student: login page → the JupyterLab card → the lab → a notebook's first cell
    c.delete_all_cookies().await?;
    let t_student = Instant::now();
    c.goto(&format!("{url}/new")).await?;
    c.wait().at_most(WAIT).for_element(Locator::Css("input[name=username]")).await?;
    browser::log_in(c, &student, "a-student-1").await?;
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css("li.card[data-image=jupyter] button[data-launch]"))
        .await
        .context("the JupyterLab card")?
        .click()
        .await?;
    line.mark("student signed in and clicked the JupyterLab card");
    c.wait().at_most(WAIT).for_element(Locator::LinkText("lab")).await.context("the lab's link")?.click().await?;
    c.wait().at_most(WAIT).for_element(Locator::Css(".jp-LauncherCard")).await.context("JupyterLab's launcher")?;
    line.mark("JupyterLab shown");
    c.find(Locator::Css(".jp-LauncherCard[data-category=Notebook]")).await?.click().await?;
    let cell = browser::run_cell(c, "6*7").await;
    browser::screenshot(c, "newcomer-first-cell").await;
    ensure!(cell?.trim() == "42", "the first cell's output");
    line.mark("the notebook's first cell ran (6*7 = 42)");
    println!("newcomer: student, login page to first cell: {:.1} s", t_student.elapsed().as_secs_f64());
    println!("newcomer: serve to first cell: {:.1} s", line.t0.elapsed().as_secs_f64());

    b.close().await?;
    let _ = server.start_kill();
    let _ = server.wait().await;
    remove_user_containers(&student);
    let total = line.marks.last().map(|(_, at)| *at).unwrap_or_default();
    ensure!(total < Duration::from_secs(180), "serve to the first cell took {total:?}, over 3 minutes");
    Ok(())
}
