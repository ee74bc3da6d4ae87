//! The programs a daemon involves: `nvidia-cuda-mps-control` in the foreground (behind `unshare` for a
//! private `/dev/shm`), one-line commands to it, and `mount`/`umount` of its shared-memory tmpfs.

use crate::{CONTROL_PIPE, MpsConfig, MpsError, PID_FILE, daemon_env, io_error};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

/// Finds `program`: a path is taken as it is, a bare name is looked up on `PATH`. Either must be an
/// executable file.
pub(crate) fn resolve_program(program: &Path) -> Result<PathBuf, MpsError> {
    let not_found = |where_: String| MpsError::ProgramNotFound { program: program.display().to_string(), where_ };
    if program.components().count() > 1 || program.is_absolute() {
        return if executable(program) { Ok(program.to_owned()) } else { Err(not_found(String::new())) };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| not_found(" on PATH".to_owned()))
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Makes GPU `uuid`'s directories. The daemon starts each MPS server as its client's user, and that
/// server opens the pipe directory's `log` and connects to its `control` socket, so every directory
/// above the pipe directory must be searchable by all (a 0700 one makes each server exit at once, and
/// the control daemon retry in vain) and the pipe directory writable by all: the root and the GPU's
/// directory 0755, the pipe directory 1777 (sticky: nobody removes another's socket), the log
/// directory 0755 (only the root daemon writes there), `shm` 1777 like every `/dev/shm`.
pub(crate) fn make_dirs(config: &MpsConfig, uuid: &str) -> Result<(), MpsError> {
    let d = &config.dirs;
    if let Some(closed) =
        d.root.ancestors().skip(1).find(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
    {
        return Err(MpsError::Unreachable { root: d.root.clone(), closed: closed.to_owned() });
    }
    let made = [
        (d.root.clone(), 0o755),
        (d.gpu_dir(uuid), 0o755),
        (d.pipe_dir(uuid), 0o1777),
        (d.log_dir(uuid), 0o755),
        (d.shm_dir(uuid), 0o1777),
    ];
    for (dir, mode) in made {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&dir)
            .map_err(io_error("cannot make the directory", &dir))?;
        // the umask may have narrowed the mode; a tmpfs already mounted there keeps its own
        if !is_mount_point(&dir) {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                .map_err(io_error("cannot set the mode of", &dir))?;
        }
    }
    Ok(())
}

/// Whether `path` is a mount point of this mount namespace (from `/proc/self/mountinfo`).
pub(crate) fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.to_string_lossy();
    info.lines().filter_map(|l| l.split(' ').nth(4)).any(|p| unescape_mountinfo(p) == want)
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Mounts the GPU's shared-memory tmpfs on its `shm` directory unless one is there.
pub(crate) async fn mount_shm(config: &MpsConfig, uuid: &str) -> Result<(), String> {
    let shm = config.dirs.shm_dir(uuid);
    if is_mount_point(&shm) {
        return Ok(());
    }
    let options = format!("mode=1777,nosuid,nodev,noexec,size={}", config.shm_bytes);
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &options, "gpuhub-mps"])
        .arg(&shm)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cannot mount a tmpfs on {}: {}",
            shm.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Unmounts the GPU's shared-memory tmpfs, if mounted; a failure is logged.
pub(crate) async fn unmount_shm(config: &MpsConfig, uuid: &str) {
    let shm = config.dirs.shm_dir(uuid);
    if !is_mount_point(&shm) {
        return;
    }
    match Command::new("umount").arg(&shm).stdin(Stdio::null()).output().await {
        Ok(o) if o.status.success() => {}
        Ok(o) => tracing::warn!(
            gpu = uuid,
            "cannot unmount {}: {}",
            shm.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => tracing::warn!(gpu = uuid, error = %e, "cannot run umount"),
    }
}

/// Sets GPU `uuid`'s compute mode (`EXCLUSIVE_PROCESS`, `DEFAULT`) with `nvidia-smi -i <uuid> -c`.
pub(crate) async fn set_compute_mode(config: &MpsConfig, smi: &Path, uuid: &str, mode: &str) -> Result<(), String> {
    let run = Command::new(smi).args(["-i", uuid, "-c", mode]).stdin(Stdio::null()).kill_on_drop(true).output();
    let out = match tokio::time::timeout(config.stop_timeout, run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("cannot run {}: {e}", smi.display())),
        Err(_) => {
            return Err(format!(
                "{} -c {mode} did not finish within {} s",
                smi.display(),
                config.stop_timeout.as_secs()
            ));
        }
    };
    if !out.status.success() {
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let said = [stderr.trim(), stdout.trim()].into_iter().find(|s| !s.is_empty()).unwrap_or("nothing");
        return Err(format!("cannot set the compute mode of GPU {uuid} to {mode} ({}): {said}", out.status));
    }
    Ok(())
}

/// Removes what a daemon that is gone left in its pipe directory (its `control` pipe, pid file,
/// sockets), so that the next one's `control` means it listens.
pub(crate) fn clear_pipe_dir(config: &MpsConfig, uuid: &str) -> Result<(), MpsError> {
    let dir = config.dirs.pipe_dir(uuid);
    let entries = std::fs::read_dir(&dir).map_err(io_error("cannot read the directory", &dir))?;
    for e in entries.flatten() {
        let p = e.path();
        let removed = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
            _ => std::fs::remove_file(&p),
        };
        removed.map_err(io_error("cannot remove the stale", &p))?;
    }
    Ok(())
}

/// Sends one command line (`quit`, `get_server_list`) to GPU `uuid`'s daemon through the control
/// program, within `timeout`; returns what it printed.
pub(crate) async fn command(
    config: &MpsConfig,
    program: &Path,
    uuid: &str,
    line: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut child = Command::new(program)
        .envs(daemon_env(&config.dirs, uuid))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let talk = async {
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(format!("{line}\n").as_bytes()).await?;
        }
        child.wait_with_output().await
    };
    let out = match tokio::time::timeout(timeout, talk).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("{line:?} to the daemon failed: {e}")),
        Err(_) => return Err(format!("{line:?} got no answer within {} s", timeout.as_secs_f32())),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = [said.trim(), stdout.trim()].into_iter().find(|s| !s.is_empty()).unwrap_or("nothing");
        return Err(format!("{line:?} failed ({}): {said}", out.status));
    }
    Ok(stdout)
}

/// The file in the log directory that takes the daemon's own output (a file, not a pipe to gpuhub, so
/// a daemon left running when gpuhub exits goes on writing).
pub const OUTPUT_FILE: &str = "daemon.out";

/// Starts GPU `uuid`'s control daemon in the foreground: directly, or with a private mount namespace
/// whose `/dev/shm` is the GPU's tmpfs. Its output is appended to [`OUTPUT_FILE`] in its log directory.
pub(crate) fn spawn_daemon(config: &MpsConfig, program: &Path, uuid: &str) -> Result<Child, String> {
    let mut cmd = if config.private_shm {
        let mut c = Command::new(&config.unshare);
        c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$1" /dev/shm && exec "$2" -f"#)
            .arg("gpuhub-mps")
            .arg(config.dirs.shm_dir(uuid))
            .arg(program);
        c
    } else {
        let mut c = Command::new(program);
        c.arg("-f");
        c
    };
    let path = config.dirs.log_dir(uuid).join(OUTPUT_FILE);
    let open = || std::fs::OpenOptions::new().create(true).append(true).open(&path);
    let (out, err) =
        open().and_then(|f| Ok((f.try_clone()?, f))).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    cmd.envs(daemon_env(&config.dirs, uuid))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // killed when dropped before it answered; a detached supervisor forgets it instead
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            let what = if config.private_shm { &config.unshare } else { program };
            format!("cannot run {}: {e}", what.display())
        })
}

/// How long the daemon's [`OUTPUT_FILE`] is now: where what a daemon started next writes begins.
pub(crate) fn output_len(config: &MpsConfig, uuid: &str) -> u64 {
    std::fs::metadata(config.dirs.log_dir(uuid).join(OUTPUT_FILE)).map(|m| m.len()).unwrap_or(0)
}

/// The last line written to the daemon's [`OUTPUT_FILE`] after byte `from` (read from at most its
/// last 4 KiB).
pub(crate) fn last_output(config: &MpsConfig, uuid: &str, from: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(config.dirs.log_dir(uuid).join(OUTPUT_FILE)).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096).max(from))).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(str::to_owned)
}

/// Whether process `pid` exists and has not exited (a zombie waiting for its parent has).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")) else {
        return false;
    };
    // `pid (comm) state …`; the command may hold spaces and parentheses, the state follows the last `)`
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// The PID in a daemon's pid file, if it has one that names a live process.
pub(crate) fn live_pid(config: &MpsConfig, uuid: &str) -> Option<u32> {
    let text = std::fs::read_to_string(config.dirs.pipe_dir(uuid).join(PID_FILE)).ok()?;
    text.trim().parse().ok().filter(|p| *p > 1 && alive(*p))
}

/// Whether the daemon's control pipe exists (it listens, or one that died left it).
pub(crate) fn control_exists(config: &MpsConfig, uuid: &str) -> bool {
    config.dirs.pipe_dir(uuid).join(CONTROL_PIPE).exists()
}

/// Sends `SIGKILL` to a process that is not this one's child.
pub(crate) fn kill(pid: u32) {
    if let Some(p) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// How an exit reads in an error, with the last thing the daemon said.
pub(crate) fn describe_exit(status: std::io::Result<ExitStatus>, said: Option<String>) -> String {
    let status = match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("cannot be waited for: {e}"),
    };
    match said {
        Some(said) => format!("the daemon {status}; it said: {said}"),
        None => format!("the daemon {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/run/a\040b/shm"), "/run/a b/shm");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/odd\x"), r"/odd\x");
    }

    #[test]
    fn a_missing_program_is_named() {
        let e = resolve_program(Path::new("gpuhub-no-such-mps-control")).unwrap_err().to_string();
        assert!(e.contains("gpuhub-no-such-mps-control was not found on PATH"), "{e}");
        let e = resolve_program(Path::new("/nonexistent/nvidia-cuda-mps-control")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/nvidia-cuda-mps-control was not found:"), "{e}");
        assert!(resolve_program(Path::new("sh")).unwrap().is_absolute());
    }
}
