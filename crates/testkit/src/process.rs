//! Helpers of the tests that run a program as a subprocess (`crates/gpuhub/tests` run the `gpuhub`
//! binary): a server's output kept and its address read from it, commands without the caller's
//! `GPUHUB_*`, unique names, polls of states nothing signals, fake GPU device nodes, and the removal of
//! a test user's containers.

use std::ffi::OsString;
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `GPUHUB_*` variables of this process: a command of the test removes them (they would override
/// the test's settings).
pub fn gpuhub_vars() -> Vec<OsString> {
    std::env::vars_os().map(|(k, _)| k).filter(|k| k.to_string_lossy().starts_with("GPUHUB_")).collect()
}

/// A command without any `GPUHUB_*` variable of this process (they would override the test's
/// settings), standard input closed.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for key in gpuhub_vars() {
        cmd.env_remove(key);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// [`clean_command`] for async tests, killed when dropped (a test that fails leaves no process behind).
pub fn clean_async_command(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::from(clean_command(program));
    cmd.kill_on_drop(true);
    cmd
}

/// Calls `probe` every `every` until it yields a value or `within` passes: only for states nothing
/// signals (a container coming up, an app starting to listen, a real cluster's objects); the last
/// error, if any, is in the failure.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, every: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + within;
    loop {
        let last = match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => String::new(),
            Err(e) => format!(": {e:#}"),
        };
        if Instant::now() > deadline {
            anyhow::bail!("{what}: not within {within:?}{last}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A random `[0-9a-f]{8}` that makes names unique across tests and runs.
pub fn suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    format!("{:08x}", h.finish() as u32)
}

/// A TCP port nobody listens on right now.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Exit status and both outputs of a finished command, for messages.
pub fn describe(out: &Output) -> String {
    format!(
        "{}; stdout: {:?}; stderr: {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Adds `line` to a kept output.
pub fn push_line(log: &Mutex<String>, line: &str) {
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    log.push_str(line);
    log.push('\n');
}

/// Keeps a `gpuhub serve`'s `stdout` and `stderr` in `log` (read on threads of their own, until the
/// process closes them) and sends the address of its `gpuhub serving on URL` line.
pub fn keep_server_output(
    log: &Arc<Mutex<String>>,
    stdout: impl Read + Send + 'static,
    stderr: impl Read + Send + 'static,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out_log = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("gpuhub serving on ") {
                let _ = tx.send(url.trim().to_owned());
            }
            push_line(&out_log, &line);
        }
    });
    let err_log = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            push_line(&err_log, &line);
        }
    });
    rx
}

/// Makes `path` a character device of NVIDIA's major and minor `minor`, like `/dev/nvidiaMINOR`, with
/// no GPU behind it (`mknod`: needs root, CAP_MKNOD).
pub fn gpu_device_node(path: &Path, minor: u32) -> anyhow::Result<()> {
    let out = Command::new("mknod").arg(path).args(["c", "195", &minor.to_string()]).output()?;
    anyhow::ensure!(
        out.status.success(),
        "mknod {} c 195 {minor} failed (it needs root with CAP_MKNOD): {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Makes the fake GPU device node `dir/nvidiaINDEX` ([`gpu_device_node`]: what the Docker engine
/// passes to a container, with no GPU behind it); the config lines that declare it, `GPU-fake-INDEX`,
/// an H200 of 141 GiB.
pub fn fake_gpu(dir: &Path, index: u32) -> anyhow::Result<String> {
    let node = dir.join(format!("nvidia{index}"));
    gpu_device_node(&node, index)?;
    Ok(format!(
        "[[gpus]]\nuuid = \"GPU-fake-{index}\"\nmodel = \"H200\"\nmemory = \"141GiB\"\ndevice = \"{}\"\n",
        node.display()
    ))
}

/// Removes every container labelled `gpuhub.owner=USER` and the user's network, as far as `docker`
/// lets it (a test's cleanup: failures are ignored).
pub fn remove_user_containers(user: &str) {
    let label = format!("label=gpuhub.owner={user}");
    if let Ok(out) = Command::new("docker").args(["ps", "-aq", "--filter", &label]).output() {
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).output();
        }
    }
    if let Ok(out) = Command::new("docker").args(["network", "ls", "-q", "--filter", &label]).output() {
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let _ = Command::new("docker").args(["network", "rm", id]).output();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_is_eight_hex_digits() {
        let s = suffix();
        assert_eq!(s.len(), 8, "{s}");
        assert!(s.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
    }

    #[test]
    fn a_fake_gpu_is_a_character_device_of_nvidias_major_and_declared_as_such() {
        use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
        let dir = tempfile::tempdir().unwrap();
        let config = fake_gpu(dir.path(), 3).unwrap();
        let node = dir.path().join("nvidia3");
        let meta = std::fs::metadata(&node).unwrap();
        assert!(meta.file_type().is_char_device());
        assert_eq!((meta.rdev() >> 8, meta.rdev() & 0xff), (195, 3));
        assert!(config.contains("uuid = \"GPU-fake-3\"\n"), "{config}");
        assert!(config.contains(&format!("device = \"{}\"\n", node.display())), "{config}");
    }

    #[test]
    fn the_server_output_is_kept_and_its_address_sent() {
        let out = &b"starting\ngpuhub serving on http://127.0.0.1:4242 \n"[..];
        let log = Arc::default();
        let url = keep_server_output(&log, out, &b"a warning\n"[..]);
        assert_eq!(url.recv_timeout(std::time::Duration::from_secs(10)).unwrap(), "http://127.0.0.1:4242");
        // both readers end at the end of their input; the log then holds every line
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.lock().unwrap().lines().count() < 3 {
            assert!(std::time::Instant::now() < deadline, "{}", log.lock().unwrap());
            std::thread::yield_now();
        }
        let log = log.lock().unwrap();
        assert!(log.contains("starting\n") && log.contains("a warning\n"), "{log}");
    }
}
