//! A scripted `nvidia-cuda-mps-control`, for the MPS supervisor where no GPU (and no MPS) exists: the
//! supervisor's own tests (`mps/tests`) and the hub's with MPS shares (`server/tests/guard.rs`,
//! `gpuhub/tests/lxd.rs`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The stand-in: `-f` is the daemon (it makes the pipe directory's `control`, writes its pid, and runs
/// until `quit` or a signal), anything else a client sending the line on its standard input, failing
/// like the real one when no daemon listens. All is recorded in `__RECORD__`: `daemon pid=… args=…
/// gpu=… pipe=… log=…`, `daemon quit gpu=…`, `client CMD gpu=… pipe=…`. With `FAKE_SHM_MARK` set the
/// daemon makes `/dev/shm/$FAKE_SHM_MARK` (which `/dev/shm` it got).
const SCRIPT: &str = r#"rec=__RECORD__
pipe="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-f" ]; then
  echo "daemon pid=$$ args=$* gpu=$CUDA_VISIBLE_DEVICES pipe=$pipe log=$CUDA_MPS_LOG_DIRECTORY" >> "$rec"
  [ -n "$FAKE_SHM_MARK" ] && : > "/dev/shm/$FAKE_SHM_MARK"
  echo $$ > "$pipe/nvidia-cuda-mps-control.pid"
  : > "$pipe/control"
  trap 'rm -f "$pipe/control" "$pipe/nvidia-cuda-mps-control.pid"; exit 0' TERM
  while [ ! -e "$pipe/quit" ]; do sleep 0.02; done
  rm -f "$pipe/quit" "$pipe/control" "$pipe/nvidia-cuda-mps-control.pid"
  echo "daemon quit gpu=$CUDA_VISIBLE_DEVICES" >> "$rec"
  exit 0
fi
read -r cmd
echo "client $cmd gpu=$CUDA_VISIBLE_DEVICES pipe=$pipe" >> "$rec"
if [ ! -e "$pipe/control" ]; then echo "Cannot find MPS control daemon process" >&2; exit 1; fi
[ "$cmd" = quit ] && : > "$pipe/quit"
exit 0
"#;

/// Writes the stand-in to `dir/nvidia-cuda-mps-control` (recording to [`record`]`(dir)`) and makes `dir`
/// one every user may enter, as MPS needs (it starts each user's server as that user); the program.
pub fn scripted_control(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    crate::program::script(
        dir,
        "nvidia-cuda-mps-control",
        &SCRIPT.replace("__RECORD__", &record(dir).display().to_string()),
    )
}

/// Where the stand-in written into `dir` records its daemons and their ends.
pub fn record(dir: &Path) -> PathBuf {
    dir.join("mps.log")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_answers_no_daemon_before_one_runs() {
        let dir = tempfile::tempdir().unwrap();
        let program = scripted_control(dir.path()).unwrap();
        let pipe = dir.path().join("pipe");
        std::fs::create_dir(&pipe).unwrap();
        let mut child = std::process::Command::new(&program)
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"quit\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stderr), "Cannot find MPS control daemon process\n");
    }
}
