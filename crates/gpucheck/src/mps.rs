//! The `mps` mode on a real GPU: gpuhub's own MPS control daemon ([`gpuhub_mps::Supervisor`]) for one
//! GPU, workers as its clients with the limits gpuhub sets for a share — an allocation under the
//! memory limit succeeds, one over it is refused, the client sees about its thread percentage of the
//! SMs — and two users, as measured on H100/H200 with driver 580: the second user's CUDA
//! initialisation waits silently while the first user's client lives and proceeds once it exits.

use crate::launch::{Next, WorkerSpec};
use crate::report::{GpuInfo, Row, mib};
use crate::seams::{MpsClient, MpsDaemon, SeamError, Seams};
use crate::steps::{Options, next_event, ready_and_allocated};
use crate::worker::WorkerEvent;
use std::path::PathBuf;

/// How long the first user's client is asked to live: until gpu-check kills it.
const HOLD_SECONDS: f64 = 600.0;

/// What the two-user workers allocate, MiB.
const SMALL_MIB: u64 = 256;

/// The environment of an MPS client of `client` with gpuhub's share limits.
pub fn client_env(client: &MpsClient, limit_mib: u64, threads_pct: u32) -> Vec<(String, String)> {
    let mut env = vec![("CUDA_MPS_PIPE_DIRECTORY".to_owned(), client.pipe_dir.display().to_string())];
    if let Some(log) = &client.log_dir {
        env.push(("CUDA_MPS_LOG_DIRECTORY".to_owned(), log.display().to_string()));
    }
    env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), format!("0={limit_mib}M")));
    env.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(), threads_pct.to_string()));
    env
}

/// Whether an MPS client's SM count fits its thread percentage of the GPU's (`total`): some, and at
/// most the percentage plus 5 points (the driver rounds to whole SMs, or TPC pairs).
pub fn sms_fit(seen: u32, total: u32, pct: u32) -> bool {
    seen > 0 && seen < total && u64::from(seen) * 100 <= u64::from(total) * u64::from(pct + 5)
}

/// The MPS rows for `gpu` (`sms`: its SM count without MPS, from the load check). The daemon is
/// stopped at the end whatever happened.
pub fn mps_checks(gpu: &GpuInfo, sms: Option<u32>, opts: &Options, seams: &mut Seams<'_>) -> Vec<Row> {
    let name = |what: &str| format!("gpu{} mps {what}", gpu.index);
    let mut rows = Vec::new();
    let client = match seams.mps.start(&gpu.uuid) {
        Ok(c) => {
            rows.push(Row::new(
                name("daemon"),
                "gpuhub's MPS control daemon answers",
                format!(
                    "running with {} /dev/shm, pipe directory {}",
                    if c.shm_dir.is_some() { "a private" } else { "the host's" },
                    c.pipe_dir.display()
                ),
                true,
            ));
            c
        }
        Err(e) => {
            rows.push(Row::new(name("daemon"), "gpuhub's MPS control daemon answers", e.to_string(), false));
            let _ = seams.mps.stop();
            return rows;
        }
    };
    let env = client_env(&client, opts.mps_limit_mib, opts.mps_threads_pct);
    let limit = opts.mps_limit_mib;
    let spec = |uid: Option<u32>, mib: u64, seconds: f64| WorkerSpec {
        uid,
        gpu: None,
        mib,
        seconds,
        env: env.clone(),
        shm: client.shm_dir.clone(),
    };

    // under the limit: allocates; its SM count is the thread percentage's
    let under = limit / 2;
    let expected_under = format!("{} allocate under a {} limit", mib(under << 20), mib(limit << 20));
    let expected_sms = match sms {
        Some(total) => format!("about {} % of the GPU's {total} SMs", opts.mps_threads_pct),
        None => format!("about {} % of the GPU's SMs", opts.mps_threads_pct),
    };
    match seams.launcher.spawn(&spec(opts.uid, under, 1.0)) {
        Err(e) => {
            rows.push(Row::new(name("under limit"), expected_under, e.to_string(), false));
            rows.push(Row::new(name("threads"), expected_sms, e.to_string(), false));
        }
        Ok(mut w) => {
            let got = ready_and_allocated(w.as_mut(), opts.init_timeout);
            let end = if got.is_ok() {
                next_event(w.as_mut(), opts.init_timeout + opts.round * 10)
            } else {
                Err(String::new())
            };
            w.kill();
            match got {
                Ok((seen_sms, _, bytes)) => {
                    let finished = end.as_ref().is_ok_and(|e| matches!(e, WorkerEvent::Done { .. }));
                    let then = match &end {
                        Ok(WorkerEvent::Done { .. }) => String::new(),
                        Ok(other) => format!("; then {other:?}"),
                        Err(e) => format!("; then {e}"),
                    };
                    rows.push(Row::new(
                        name("under limit"),
                        expected_under,
                        format!("allocated {}{then}", mib(bytes)),
                        finished,
                    ));
                    let (seen_text, ok) = match sms {
                        Some(total) => {
                            (format!("{seen_sms} of {total} SMs"), sms_fit(seen_sms, total, opts.mps_threads_pct))
                        }
                        None => (format!("{seen_sms} SMs; the GPU's count is unknown (its load check failed)"), false),
                    };
                    rows.push(Row::new(name("threads"), expected_sms, seen_text, ok));
                }
                Err(e) => {
                    rows.push(Row::new(name("under limit"), expected_under, e.clone(), false));
                    rows.push(Row::new(name("threads"), expected_sms, e, false));
                }
            }
        }
    }

    // over the limit: refused
    let over = limit + limit / 2;
    let expected_over = format!("{} refused under a {} limit", mib(over << 20), mib(limit << 20));
    let over_row = match seams.launcher.spawn(&spec(opts.uid, over, 1.0)) {
        Err(e) => Row::new(name("over limit"), expected_over, e.to_string(), false),
        Ok(mut w) => {
            let row = match next_event(w.as_mut(), opts.init_timeout) {
                Ok(WorkerEvent::Ready { .. }) => match w.next(opts.init_timeout) {
                    Next::Event(WorkerEvent::Failed { stage, error }) if stage == "alloc" => {
                        Row::new(name("over limit"), expected_over, format!("refused: {error}"), true)
                    }
                    Next::Event(WorkerEvent::Allocated { bytes }) => {
                        Row::new(name("over limit"), expected_over, format!("allocated {}", mib(bytes)), false)
                    }
                    other => Row::new(name("over limit"), expected_over, format!("{other:?}"), false),
                },
                Ok(other) => Row::new(name("over limit"), expected_over, format!("{other:?}"), false),
                Err(e) => Row::new(name("over limit"), expected_over, e, false),
            };
            w.kill();
            row
        }
    };
    rows.push(over_row);

    rows.extend(two_users(gpu, opts, seams, &spec));

    let stopped = seams.mps.stop();
    rows.push(Row::new(
        name("daemon stops"),
        "the daemon stops when gpu-check ends",
        stopped.as_ref().map_or_else(ToString::to_string, |()| "stopped".to_owned()),
        stopped.is_ok(),
    ));
    rows
}

/// Rows `second user waits` and `second user follows`.
fn two_users(
    gpu: &GpuInfo,
    opts: &Options,
    seams: &mut Seams<'_>,
    spec: &dyn Fn(Option<u32>, u64, f64) -> WorkerSpec,
) -> Vec<Row> {
    let name = |what: &str| format!("gpu{} mps {what}", gpu.index);
    let window = opts.blocked_window.as_secs_f64();
    let expected_wait =
        format!("a second user's CUDA init waits while the first user's client lives (none in {window:.0} s)");
    let expected_follow = "the second user's CUDA init proceeds after the first user's client exits".to_owned();
    let (first, second) = match (opts.uid, opts.second_uid) {
        (Some(a), Some(b)) if a != b => (a, b),
        _ => {
            let why = "needs two uids: run gpu-check as root (--uid, --second-uid)".to_owned();
            return vec![
                Row::new(name("second user waits"), expected_wait, why.clone(), false),
                Row::new(name("second user follows"), expected_follow, why, false),
            ];
        }
    };
    let fail_both = |why: String| {
        vec![
            Row::new(name("second user waits"), expected_wait.clone(), why.clone(), false),
            Row::new(name("second user follows"), expected_follow.clone(), why, false),
        ]
    };
    let mut a = match seams.launcher.spawn(&spec(Some(first), SMALL_MIB, HOLD_SECONDS)) {
        Ok(w) => w,
        Err(e) => return fail_both(format!("uid {first}: {e}")),
    };
    if let Err(e) = ready_and_allocated(a.as_mut(), opts.init_timeout) {
        return fail_both(format!("uid {first}'s client: {e}"));
    }
    let mut b = match seams.launcher.spawn(&spec(Some(second), SMALL_MIB, 1.0)) {
        Ok(w) => w,
        Err(e) => return fail_both(format!("uid {second}: {e}")),
    };
    let wait_row = match b.next(opts.blocked_window) {
        Next::Timeout => Row::new(
            name("second user waits"),
            expected_wait,
            format!("uid {second} still initialising after {window:.0} s while uid {first} holds the GPU"),
            true,
        ),
        Next::Event(WorkerEvent::Ready { .. }) => Row::new(
            name("second user waits"),
            expected_wait,
            format!(
                "uid {second} initialised beside uid {first}: MPS now serves two users at once (update the docs and the scheduler's user affinity)"
            ),
            false,
        ),
        other => Row::new(name("second user waits"), expected_wait, format!("uid {second}: {other:?}"), false),
    };
    if !wait_row.ok {
        return vec![wait_row, Row::new(name("second user follows"), expected_follow, "not checked", false)];
    }
    a.kill();
    let released = seams.clock.now();
    let follow_row = match ready_and_allocated(b.as_mut(), opts.init_timeout) {
        Ok(_) => {
            let after = (seams.clock.now() - released).as_seconds_f64();
            Row::new(
                name("second user follows"),
                expected_follow,
                format!("uid {second} initialised and allocated {after:.1} s after uid {first}'s client was killed"),
                true,
            )
        }
        Err(e) => Row::new(name("second user follows"), expected_follow, format!("uid {second}: {e}"), false),
    };
    b.kill();
    vec![wait_row, follow_row]
}

/// [`MpsDaemon`] over gpuhub's [`gpuhub_mps::Supervisor`], on a runtime of its own, with its
/// directories in a fresh directory under the temporary directory (removed when stopped).
#[derive(Debug)]
pub struct SupervisorDaemon {
    runtime: Option<tokio::runtime::Runtime>,
    supervisor: Option<gpuhub_mps::Supervisor>,
    root: PathBuf,
    private_shm: bool,
    program: PathBuf,
}

impl SupervisorDaemon {
    /// A daemon whose directories go under `root` (made, mode 0755, on start). With `private_shm`
    /// (root only) the daemon gets its own tmpfs as `/dev/shm`, as `gpuhub serve` runs it for
    /// containers, and its clients must have that tmpfs as their `/dev/shm` ([`MpsClient::shm_dir`]);
    /// without it the daemon shares the host's.
    pub fn new(root: PathBuf, private_shm: bool) -> Self {
        Self { runtime: None, supervisor: None, root, private_shm, program: gpuhub_mps::DEFAULT_PROGRAM.into() }
    }

    /// Runs `program` as `nvidia-cuda-mps-control` (a path, or a name looked up on `PATH`).
    pub fn with_program(mut self, program: PathBuf) -> Self {
        self.program = program;
        self
    }

    fn dir_error(&self, what: &'static str) -> impl FnOnce(std::io::Error) -> SeamError + use<> {
        let path = self.root.clone();
        move |source| SeamError::Dir { what, path, source }
    }
}

impl MpsDaemon for SupervisorDaemon {
    fn start(&mut self, uuid: &str) -> Result<MpsClient, SeamError> {
        use std::os::unix::fs::PermissionsExt;
        let bare = self.program.components().count() == 1 && !self.program.is_absolute();
        if bare && crate::seams::on_path(&self.program.to_string_lossy()).is_none() {
            return Err(SeamError::NoMpsControl(self.program.display().to_string()));
        }
        std::fs::create_dir_all(&self.root).map_err(self.dir_error("make"))?;
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o755))
            .map_err(self.dir_error("open to all"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(SeamError::Runtime)?;
        let mut config = gpuhub_mps::MpsConfig::new(self.root.clone());
        config.private_shm = self.private_shm;
        config.program = self.program.clone();
        let supervisor = gpuhub_mps::Supervisor::new(config);
        let ensured = runtime.block_on(supervisor.ensure(uuid));
        self.supervisor = Some(supervisor);
        self.runtime = Some(runtime);
        let endpoint = ensured?;
        let shm_dir = self.private_shm.then_some(endpoint.shm_dir);
        Ok(MpsClient { pipe_dir: endpoint.pipe_dir, log_dir: Some(endpoint.log_dir), shm_dir })
    }

    fn stop(&mut self) -> Result<(), SeamError> {
        if let (Some(rt), Some(s)) = (self.runtime.take(), self.supervisor.take()) {
            rt.block_on(s.shutdown());
        }
        if self.root.exists() {
            std::fs::remove_dir_all(&self.root).map_err(self.dir_error("remove"))?;
        }
        Ok(())
    }
}

impl Drop for SupervisorDaemon {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn clients_get_the_pipe_and_the_share_limits() {
        let c = MpsClient { pipe_dir: "/run/x/pipe".into(), log_dir: Some("/run/x/log".into()), shm_dir: None };
        let env = client_env(&c, 2048, 25);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CUDA_MPS_PIPE_DIRECTORY"), Some("/run/x/pipe"));
        assert_eq!(get("CUDA_MPS_LOG_DIRECTORY"), Some("/run/x/log"));
        assert_eq!(get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), Some("0=2048M"));
        assert_eq!(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), Some("25"));
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), None);
    }

    #[test]
    fn thread_percentage_fits() {
        // measured on an H200: 32 of 132 SMs at 25 %
        assert!(sms_fit(32, 132, 25));
        assert!(sms_fit(38, 132, 25));
        assert!(!sms_fit(40, 132, 25));
        assert!(!sms_fit(132, 132, 25), "the whole GPU: the percentage was not applied");
        assert!(!sms_fit(0, 132, 25));
    }

    #[test]
    fn a_missing_control_program_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = SupervisorDaemon::new(dir.path().join("mps"), false);
        // PATH is this process's: on a host without the driver the program is not there
        if crate::seams::on_path(gpuhub_mps::DEFAULT_PROGRAM).is_none() {
            let e = d.start("GPU-1").unwrap_err().to_string();
            assert_eq!(e, "nvidia-cuda-mps-control is not on PATH (the NVIDIA driver's utilities ship it)");
        }
        d.stop().unwrap();
    }

    /// A stand-in for `nvidia-cuda-mps-control`: in the foreground it makes its control pipe and pid
    /// file and waits for `quit`; as a client it records the command.
    const FAKE_CONTROL: &str = r#"#!/bin/sh
pipe="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-f" ]; then
  echo "daemon gpu=$CUDA_VISIBLE_DEVICES" >> "$pipe/../record"
  echo $$ > "$pipe/nvidia-cuda-mps-control.pid"
  : > "$pipe/control"
  trap 'rm -f "$pipe/control" "$pipe/nvidia-cuda-mps-control.pid"; exit 0' TERM
  while [ ! -e "$pipe/quit" ]; do sleep 0.02; done
  rm -f "$pipe/quit" "$pipe/control" "$pipe/nvidia-cuda-mps-control.pid"
  exit 0
fi
read -r cmd
echo "client $cmd" >> "$pipe/../record"
[ -e "$pipe/control" ] || exit 1
[ "$cmd" = quit ] && : > "$pipe/quit"
exit 0
"#;

    #[test]
    fn gpuhubs_supervisor_runs_the_daemon_and_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let program = dir.path().join("nvidia-cuda-mps-control");
        std::fs::write(&program, FAKE_CONTROL).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().join("mps");
        let mut d = SupervisorDaemon::new(root.clone(), false).with_program(program);
        let client = d.start("GPU-7").unwrap();
        assert_eq!((client.pipe_dir.clone(), client.shm_dir.clone()), (root.join("GPU-7").join("pipe"), None));
        assert!(client.pipe_dir.join("control").exists());
        let record = std::fs::read_to_string(root.join("GPU-7").join("record")).unwrap();
        assert!(record.starts_with("daemon gpu=GPU-7\n"), "{record}");
        d.stop().unwrap();
        assert!(!root.exists(), "its directories are removed");
    }
}
