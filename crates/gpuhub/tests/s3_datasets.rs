//! Object-storage datasets on the real Docker engine, against a real S3 server (moto's, spawned on
//! 127.0.0.1): an admin registers a prefix of a bucket (`gpuhub datasets add NAME s3://… --endpoint …
//! --access-key … --secret-key-stdin`); the hub mounts it with rclone (FUSE) on this host; a user's job
//! reads a file of it at `/datasets/<name>` and cannot write there; a read-write one takes a job's file
//! into the bucket; the secret key never shows in answers, in the CLI's output, in the data directory (the
//! database among it) or on any process's command line; the mount comes back when rclone is killed and
//! after a restart, and goes with the dataset; on the LXD engine, a job reads and writes them too. Needs
//! root, Docker, FUSE, rclone and `moto_server` (`pip install 'moto[server]'`), and LXD for the LXD test;
//! `GPUHUB_SKIP_S3_TESTS=1` skips them, saying so, where those cannot be had.

mod common;

use anyhow::{Context as _, Result, bail, ensure};
use common::{Hub, IMAGE, WAIT};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCESS_KEY: &str = "AKIDGPUHUBTEST";
const SECRET: &str = "s3cr3t-Vq7ZpK2wXn4tYb9";

/// moto's S3 server on a free port of 127.0.0.1; killed when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the tests needing an S3 server are skipped (`GPUHUB_SKIP_S3_TESTS=1`).
fn skipped(what: &str) -> bool {
    if std::env::var("GPUHUB_SKIP_S3_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: {what} (GPUHUB_SKIP_S3_TESTS=1)");
        return true;
    }
    false
}

fn on_path(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

impl Moto {
    fn start() -> Result<Option<Moto>> {
        for (program, install) in [
            ("moto_server", "pip install 'moto[server]'"),
            ("rclone", "apt-get install rclone fuse3"),
            ("fusermount3", "apt-get install fuse3"),
        ] {
            if !on_path(program) {
                if skipped(&format!("{program} is not installed")) {
                    return Ok(None);
                }
                bail!(
                    "{program} is not installed: {install} (scripts/setup-debian.sh does), or set \
                     GPUHUB_SKIP_S3_TESTS=1 to skip the S3 dataset tests"
                );
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("moto_server")?;
        let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(Instant::now() < deadline, "moto_server did not listen on {port} within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(Some(moto))
    }

    /// `rclone ARGS` against this server, with a remote `t` of its own (its own S3 client, SigV4).
    fn rclone(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut cmd = Command::new("rclone");
        cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        for (k, v) in [
            ("TYPE", "s3"),
            ("PROVIDER", "Other"),
            ("ENDPOINT", self.endpoint.as_str()),
            ("ACCESS_KEY_ID", ACCESS_KEY),
            ("SECRET_ACCESS_KEY", SECRET),
            ("ENV_AUTH", "false"),
        ] {
            cmd.env(format!("RCLONE_CONFIG_T_{k}"), v);
        }
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().context("rclone")?;
        if let Some(s) = stdin {
            use std::io::Write;
            child.stdin.take().context("stdin")?.write_all(s.as_bytes())?;
        }
        drop(child.stdin.take());
        let out = child.wait_with_output()?;
        ensure!(out.status.success(), "rclone {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8(out.stdout)?)
    }
}

/// Every file under `dir` holding `needle` (not descending into `skip`).
fn files_holding(dir: &std::path::Path, needle: &[u8], skip: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for e in entries.flatten() {
        let p = e.path();
        if p == skip {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => found.extend(files_holding(&p, needle, skip)),
            Ok(t) if t.is_file() && std::fs::read(&p).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) => {
                found.push(p.display().to_string());
            }
            _ => {}
        }
    }
    found
}

/// The command lines of this host's processes that hold `needle`.
fn command_lines_holding(needle: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

/// The pid of the `rclone mount` serving `mount_point`.
fn rclone_serving(mount_point: &str) -> Option<u32> {
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        let raw = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
        let serving = args.iter().any(|a| a.ends_with(b"rclone"))
            && args.contains(&b"mount".as_slice())
            && args.contains(&mount_point.as_bytes());
        serving.then_some(pid)
    })
}

/// The `status` of dataset `name` in `gpuhub datasets`.
fn status_of(hub: &Hub, name: &str) -> Result<String> {
    let v = hub.admin.json(&["datasets"])?;
    let d = v.as_array().into_iter().flatten().find(|d| d["name"] == name).context("not listed")?;
    Ok(d["status"].as_str().unwrap_or("").to_owned())
}

fn mounted(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(path))
}

#[test]
fn a_job_reads_an_s3_dataset_and_cannot_write_a_read_only_one() -> Result<()> {
    let _serial = common::serial();
    let Some(moto) = Moto::start()? else { return Ok(()) };
    moto.rclone(&["mkdir", "t:corpora"], None)?;
    moto.rclone(&["rcat", "t:corpora/text/hello.txt"], Some("words from the bucket\n"))?;
    moto.rclone(&["mkdir", "t:outputs"], None)?;

    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let name = format!("corpus-{}", common::suffix());
    let add = |hub: &Hub, args: &[&str]| hub.admin.output_with_stdin(args, &format!("{SECRET}\n"));

    // bad input: refused naming the problem, nothing registered
    let err = hub.admin.fails(&["datasets", "add", &name, "s3://corpora/text"])?;
    ensure!(err.contains("s3.endpoint") && err.contains("missing"), "no endpoint: {err}");
    let out = add(
        &hub,
        &[
            "datasets",
            "add",
            &name,
            "s3://no-such-bucket",
            "--endpoint",
            &moto.endpoint,
            "--access-key",
            ACCESS_KEY,
            "--secret-key-stdin",
        ],
    )?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("cannot be listed"), "a missing bucket: {err}");
    ensure!(!err.contains(SECRET), "the secret in an error: {err}");

    // registered by an admin, the secret from standard input
    let out = add(
        &hub,
        &[
            "datasets",
            "add",
            &name,
            "s3://corpora/text",
            "--endpoint",
            &moto.endpoint,
            "--access-key",
            ACCESS_KEY,
            "--secret-key-stdin",
            "--description",
            "a bucket",
        ],
    )?;
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ensure!(out.status.success(), "datasets add: {printed}");
    ensure!(printed.contains(&format!("/datasets/{name}")) && printed.contains("(mounted)"), "{printed}");
    let listed = alice.ok(&["datasets"])?;
    let listed_json = hub.admin.json(&["datasets"])?;
    let mine = listed_json.as_array().into_iter().flatten().find(|d| d["name"] == name.as_str()).context("listed")?;
    ensure!(mine["s3"]["secret_key"] == "<set>" && mine["status"] == "mounted", "{mine:#}");
    ensure!(mine["read_only"] == true, "{mine:#}");
    for shown in [&printed, &listed, &listed_json.to_string()] {
        ensure!(!shown.contains(SECRET), "the secret key was shown: {shown}");
    }

    // a job reads it and cannot write it
    let script = format!(
        "cat /datasets/{name}/hello.txt; if touch /datasets/{name}/x 2>/dev/null; then echo WROTE; else echo read-only; fi"
    );
    let out = alice.ok(&[
        "run",
        "--name",
        "reader",
        "--image",
        IMAGE,
        "--dataset",
        &name,
        "--follow",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    ensure!(out.contains("words from the bucket"), "the job read: {out:?}");
    ensure!(out.contains("read-only") && !out.contains("WROTE"), "the job could write the dataset: {out:?}");
    let w = alice.inspect("reader")?;
    ensure!(w["state"] == "succeeded", "reader: {w:#}");
    ensure!(moto.rclone(&["lsf", "t:corpora/text"], None)?.lines().eq(["hello.txt"]), "the bucket changed");

    // a read-write one: what a job writes reaches the bucket
    let rw = format!("out-{}", common::suffix());
    let out = add(
        &hub,
        &[
            "datasets",
            "add",
            &rw,
            "s3://outputs",
            "--endpoint",
            &moto.endpoint,
            "--access-key",
            ACCESS_KEY,
            "--secret-key-stdin",
            "--read-write",
        ],
    )?;
    ensure!(out.status.success(), "datasets add --read-write: {}", String::from_utf8_lossy(&out.stderr));
    let script = format!("echo written by a job > /datasets/{rw}/result.txt && echo WROTE");
    let out = alice.ok(&[
        "run",
        "--name",
        "writer",
        "--image",
        IMAGE,
        "--dataset",
        &rw,
        "--follow",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    ensure!(out.contains("WROTE"), "the job could not write a read-write dataset: {out:?}");
    let deadline = Instant::now() + WAIT;
    loop {
        // rclone uploads a closed file after its write-back delay (5s)
        match moto.rclone(&["cat", "t:outputs/result.txt"], None) {
            Ok(text) if text.contains("written by a job") => break,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            other => bail!("the job's file never reached the bucket: {other:?}"),
        }
    }

    // the secret is nowhere in plain text: not in the data directory (the database), not in `ps`
    let data_dir = hub.server.data_dir.clone();
    let mounts = data_dir.join("datasets");
    let holding = files_holding(&data_dir, SECRET.as_bytes(), &mounts);
    ensure!(holding.is_empty(), "the secret key in plain text in {holding:?}");
    let lines = command_lines_holding(SECRET);
    ensure!(lines.is_empty(), "the secret key on command lines: {lines:?}");

    // rclone killed: the server mounts the dataset again, and new work reads it
    let mount_point = mounts.join(&name).display().to_string();
    let first = rclone_serving(&mount_point).context("no rclone serves the dataset")?;
    ensure!(Command::new("kill").args(["-KILL", &first.to_string()]).status()?.success(), "kill {first}");
    let deadline = Instant::now() + WAIT;
    loop {
        let again = rclone_serving(&mount_point);
        let status = status_of(&hub, &name)?;
        if again.is_some_and(|p| p != first) && status == "mounted" {
            break;
        }
        ensure!(Instant::now() < deadline, "not mounted again after rclone died: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = alice.ok(&[
        "run",
        "--name",
        "revived",
        "--image",
        IMAGE,
        "--dataset",
        &name,
        "--follow",
        "--",
        "cat",
        &format!("/datasets/{name}/hello.txt"),
    ])?;
    ensure!(out.contains("words from the bucket"), "after rclone died the job read: {out:?}");
    ensure!(hub.server.log().contains("dataset mount down"), "the server did not log the mount's death");

    // mounted again after a restart (the server died: rclone went with it)
    hub.server.restart()?;
    let deadline = Instant::now() + WAIT;
    loop {
        let status = status_of(&hub, &name)?;
        if status == "mounted" && mounted(&mount_point) {
            break;
        }
        ensure!(Instant::now() < deadline, "not mounted again after a restart: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = alice.ok(&[
        "run",
        "--name",
        "again",
        "--image",
        IMAGE,
        "--dataset",
        &name,
        "--follow",
        "--",
        "cat",
        &format!("/datasets/{name}/hello.txt"),
    ])?;
    ensure!(out.contains("words from the bucket"), "after a restart the job read: {out:?}");

    // removed: unmounted
    hub.admin.ok(&["datasets", "rm", &name])?;
    hub.admin.ok(&["datasets", "rm", &rw])?;
    ensure!(!mounted(&mount_point), "{mount_point} is still mounted after the dataset's removal");
    Ok(())
}

/// Removes the LXD containers whose names hold one of these (users' names), whatever happened.
struct LxdCleanup(Vec<String>);

impl Drop for LxdCleanup {
    fn drop(&mut self) {
        let Ok(out) = Command::new("lxc").args(["list", "--format", "csv", "-c", "n"]).output() else { return };
        for name in String::from_utf8_lossy(&out.stdout).lines() {
            if self.0.iter().any(|u| name.contains(u.as_str())) {
                let _ = Command::new("lxc").args(["delete", "-f", name]).output();
            }
        }
    }
}

/// The same datasets on the LXD engine (`engine = "lxd"`): its containers run on the hub's host too, so
/// the hub's rclone mount is a disk device of the job's container, read as the job's user through the
/// 1:1 map; a read-only one cannot be written, a read-write one takes the job's file into the bucket.
/// Needs LXD as well (`GPUHUB_LXD_TESTS=skip` skips it, saying so).
#[test]
fn a_job_on_lxd_reads_an_s3_dataset_and_writes_only_a_read_write_one() -> Result<()> {
    let _serial = common::serial();
    if !Command::new("lxc").arg("info").output().is_ok_and(|o| o.status.success()) {
        if std::env::var("GPUHUB_LXD_TESTS").is_ok_and(|v| v == "skip") {
            eprintln!("skipped: LXD does not answer (GPUHUB_LXD_TESTS=skip)");
            return Ok(());
        }
        bail!("LXD does not answer (`lxc info`): scripts/setup-debian.sh starts it, or set GPUHUB_LXD_TESTS=skip");
    }
    let Some(moto) = Moto::start()? else { return Ok(()) };
    moto.rclone(&["rcat", "t:lxd-corpora/text/hello.txt"], Some("words from the bucket\n"))?;
    moto.rclone(&["mkdir", "t:lxd-outputs"], None)?;
    let state = tempfile::Builder::new().prefix("gpuhub-s3-lxd-").tempdir()?;
    let lxd = format!("[lxd]\nstate_dir = \"{}\"\npoll_ms = 300\n", state.path().display());
    let mut hub = Hub::start_configured("engine = \"lxd\"", &lxd)?;
    let alice = hub.user("alice")?;
    let _cleanup = LxdCleanup(vec![alice.name.clone()]);
    let add = |name: &str, url: &str, extra: &[&str]| -> Result<()> {
        let mut args = vec!["datasets", "add", name, url, "--endpoint", &moto.endpoint, "--access-key", ACCESS_KEY];
        args.extend(["--secret-key-stdin"].iter().chain(extra));
        let out = hub.admin.output_with_stdin(&args, &format!("{SECRET}\n"))?;
        ensure!(out.status.success(), "datasets add {name}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    };
    let (ro, rw) = (format!("corpus-{}", common::suffix()), format!("out-{}", common::suffix()));
    add(&ro, "s3://lxd-corpora/text", &[])?;
    add(&rw, "s3://lxd-outputs", &["--read-write"])?;
    let script = format!(
        "cat /datasets/{ro}/hello.txt; if touch /datasets/{ro}/x 2>/dev/null; then echo WROTE-RO; else echo read-only; \
         fi; echo written on lxd > /datasets/{rw}/result.txt && echo WROTE-RW"
    );
    let args = ["run", "--name", "reader", "--image", IMAGE, "--dataset", &ro, "--dataset", &rw, "--follow"];
    let out = alice.ok(&[&args[..], &["--", "sh", "-c", &script]].concat())?;
    ensure!(out.contains("words from the bucket"), "the job read: {out:?}");
    ensure!(out.contains("read-only") && !out.contains("WROTE-RO"), "the job could write a read-only dataset: {out:?}");
    ensure!(out.contains("WROTE-RW"), "the job could not write a read-write dataset: {out:?}");
    let listed = Command::new("lxc").args(["list", "--format", "csv", "-c", "n"]).output()?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    ensure!(listed.lines().any(|l| l.contains(&alice.name)), "the job ran in no LXD container: {listed}");
    let deadline = Instant::now() + WAIT;
    loop {
        // rclone uploads a closed file after its write-back delay (5s)
        match moto.rclone(&["cat", "t:lxd-outputs/result.txt"], None) {
            Ok(text) if text.contains("written on lxd") => break,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            other => bail!("the job's file never reached the bucket: {other:?}"),
        }
    }
    for name in [&ro, &rw] {
        hub.admin.ok(&["datasets", "rm", name])?;
    }
    Ok(())
}
