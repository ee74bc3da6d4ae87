//! gpu-check's decisions on fakes: scripted workers that show their memory in a fake NVML, a clock
//! that moves only when waited on, and a recording MPS daemon.

use chrono::{DateTime, Utc};
use gpuhub_core::Bytes;
use gpuhub_core::node::GpuDevice;
use gpuhub_gpu::FakeGpuSampler;
use gpuhub_gpucheck::checks::{Options, run_checks};
use gpuhub_gpucheck::fake::{FakeClock, FakeLauncher, FakeMps, Step};
use gpuhub_gpucheck::report::{GpuInfo, Row};
use gpuhub_gpucheck::seams::Seams;
use gpuhub_gpucheck::worker::WorkerEvent;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const UUID: &str = "GPU-8e1f0c2a";
/// What NVML shows of a worker beyond its allocation: its CUDA context.
const CONTEXT: u64 = 500 * MIB;

fn gpu(index: u32, uuid: &str, mig: Option<bool>) -> GpuInfo {
    GpuInfo { index, uuid: uuid.into(), model: "NVIDIA H200".into(), memory: 143_771 * MIB, mig }
}

fn device(g: &GpuInfo) -> GpuDevice {
    GpuDevice {
        uuid: g.uuid.clone(),
        index: g.index,
        model: g.model.clone(),
        memory: Bytes(g.memory),
        device: None,
        sharing: None,
    }
}

fn ready(sms: u32) -> Step {
    Step::Event(WorkerEvent::Ready { device: "NVIDIA H200".into(), sms, total_memory: 150_000 * MIB })
}

fn allocated(mib: u64) -> Step {
    Step::Event(WorkerEvent::Allocated { bytes: mib * MIB })
}

fn done() -> Step {
    Step::Event(WorkerEvent::Done { seconds: 5.0, rounds: 900, kernels: 900, kernel_error: None })
}

fn show(uuid: &str, mib: u64) -> Step {
    Step::Show { uuid: uuid.into(), bytes: mib * MIB + CONTEXT, utilization: 100.0 }
}

/// A load worker on `uuid`: allocates, shows up in NVML, runs ten half-rounds, ends.
fn load_script(uuid: &str, mib: u64) -> Vec<Step> {
    let mut s = vec![ready(132), allocated(mib), show(uuid, mib)];
    s.extend(std::iter::repeat_n(Step::Wait, 10));
    s.push(done());
    s
}

/// A guarded worker: allocates past its grant and holds until killed.
fn guard_script(uuid: &str, mib: u64) -> Vec<Step> {
    vec![ready(132), allocated(mib), show(uuid, mib)]
}

fn mps_scripts() -> Vec<Vec<Step>> {
    vec![
        // under the limit
        vec![ready(33), allocated(1024), done()],
        // over it
        vec![
            ready(33),
            Step::Event(WorkerEvent::Failed { stage: "alloc".into(), error: "CUDA_ERROR_OUT_OF_MEMORY".into() }),
        ],
        // the first user holds
        vec![ready(33), allocated(256)],
        // the second user waits, then follows
        vec![Step::Wait, ready(33), allocated(256), done()],
    ]
}

struct Rig {
    clock: Arc<FakeClock>,
    sampler: Arc<FakeGpuSampler>,
    launcher: FakeLauncher,
    mps: FakeMps,
}

impl Rig {
    fn new(gpus: &[GpuInfo]) -> Self {
        let start: DateTime<Utc> = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let clock = Arc::new(FakeClock::new(start));
        let sampler = Arc::new(FakeGpuSampler::new(gpus.iter().map(device).collect()));
        let launcher = FakeLauncher::new(clock.clone(), sampler.clone());
        Self { clock, sampler, launcher, mps: FakeMps::running() }
    }

    fn run(&mut self, gpus: &[GpuInfo], opts: &Options) -> Vec<Row> {
        let mut seams = Seams {
            sampler: self.sampler.as_ref(),
            launcher: &self.launcher,
            mps: &mut self.mps,
            clock: self.clock.as_ref(),
            say: &|_| {},
        };
        run_checks(gpus, opts, &mut seams)
    }
}

fn root_opts() -> Options {
    Options { uid: Some(65534), second_uid: Some(65533), ..Options::default() }
}

fn row<'a>(rows: &'a [Row], check: &str) -> &'a Row {
    rows.iter().find(|r| r.check == check).unwrap_or_else(|| panic!("no row {check:?} in {rows:#?}"))
}

fn failed(rows: &[Row]) -> Vec<&str> {
    rows.iter().filter(|r| !r.ok).map(|r| r.check.as_str()).collect()
}

fn healthy(rig: &Rig, uuid: &str) {
    rig.launcher.script(load_script(uuid, 2048));
    rig.launcher.script(guard_script(uuid, 1536));
    for s in mps_scripts() {
        rig.launcher.script(s);
    }
}

#[test]
fn a_healthy_gpu_passes_every_row() {
    let gpus = [gpu(0, UUID, Some(false))];
    let mut rig = Rig::new(&gpus);
    healthy(&rig, UUID);
    let rows = rig.run(&gpus, &root_opts());
    let names: Vec<&str> = rows.iter().map(|r| r.check.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpu0 inventory",
            "gpu0 cuda load",
            "gpu0 nvml sees it",
            "gpu0 utilisation",
            "gpu0 attribution",
            "gpu0 guard warns",
            "gpu0 guard stops",
            "gpu0 mps daemon",
            "gpu0 mps under limit",
            "gpu0 mps threads",
            "gpu0 mps over limit",
            "gpu0 mps second user waits",
            "gpu0 mps second user follows",
            "gpu0 mps daemon stops",
        ]
    );
    assert!(failed(&rows).is_empty(), "{rows:#?}");
    assert_eq!(rig.launcher.scripts_left(), 0);
    assert_eq!(row(&rows, "gpu0 nvml sees it").seen, "pid 1001 with 2548 MiB");
    assert_eq!(row(&rows, "gpu0 attribution").seen, "2548 MiB");
    assert_eq!(row(&rows, "gpu0 utilisation").seen, "0 % before, up to 100 % under the load");
    assert_eq!(row(&rows, "gpu0 mps threads").seen, "33 of 132 SMs");
    assert_eq!(row(&rows, "gpu0 mps over limit").seen, "refused: CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(rig.mps.calls, [format!("start {UUID}"), "stop".to_owned()]);

    // who ran what: plain workers see their GPU, MPS clients do not and carry the share's limits
    let specs = rig.launcher.specs();
    assert_eq!(specs.len(), 6);
    assert_eq!((specs[0].uid, specs[0].gpu.as_deref(), specs[0].mib), (Some(65534), Some(UUID), 2048));
    assert_eq!((specs[1].mib, specs[1].gpu.as_deref()), (1536, Some(UUID)));
    for s in &specs[2..] {
        assert_eq!(s.gpu, None, "{s:?}");
        assert!(s.env.contains(&("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), "0=2048M".into())), "{s:?}");
        assert!(s.env.contains(&("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "25".into())), "{s:?}");
        assert!(s.env.contains(&("CUDA_MPS_PIPE_DIRECTORY".into(), "/run/fake-mps/pipe".into())), "{s:?}");
    }
    assert_eq!((specs[2].mib, specs[3].mib), (1024, 3072));
    assert_eq!((specs[4].uid, specs[5].uid), (Some(65534), Some(65533)));

    // the second user's CUDA came up only after the first user's client was killed, and every worker
    // was killed in the end
    let log = rig.launcher.log();
    let at = |e: &str| log.iter().position(|l| l == e).unwrap_or_else(|| panic!("{e:?} not in {log:?}"));
    assert!(at("1006 wait") < at("kill 1005") && at("kill 1005") < at("1006 ready"), "{log:?}");
    for pid in 1001..=1006 {
        assert!(log.contains(&format!("kill {pid}")), "{pid} not killed: {log:?}");
    }
}

#[test]
fn the_guard_stops_within_its_grace() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    rig.launcher.script(guard_script(UUID, 1536));
    let opts = Options { skip_mps: true, ..root_opts() };
    let rows = rig.run(&gpus, &opts);
    assert!(failed(&rows).is_empty(), "{rows:#?}");
    // rounds of 1 s: over at the first, warned then, stopped at the round the 5 s grace ended
    assert_eq!(
        row(&rows, "gpu0 guard warns").seen,
        "allocated 1536 MiB, warned at 2036 MiB used, 0.0 s after going over"
    );
    let stops = row(&rows, "gpu0 guard stops");
    assert_eq!(stops.expected, "stopped 5 s to 7 s after going over (grace + 2 rounds), then gone from the GPU");
    assert_eq!(stops.seen, "stopped 5.0 s after going over, gone from the GPU 0.0 s later");
    let log = rig.launcher.log();
    assert_eq!(log.iter().filter(|l| *l == "1002 wait").count(), 6, "one wait per round until the stop: {log:?}");
}

#[test]
fn a_stop_later_than_grace_and_two_rounds_fails() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    // over at the first round, then NVML fails for seven rounds: the guard cannot judge until it answers
    let mut s = guard_script(UUID, 1536);
    s.push(Step::Wait);
    s.push(Step::Nvml(Some("gpu is lost".into())));
    s.extend(std::iter::repeat_n(Step::Wait, 7));
    s.push(Step::Nvml(None));
    rig.launcher.script(s);
    let rows = rig.run(&gpus, &Options { skip_mps: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 guard stops"]);
    assert!(row(&rows, "gpu0 guard stops").seen.starts_with("stopped 8.0 s after going over, gone"), "{rows:#?}");
}

#[test]
fn a_guard_that_never_sees_the_memory_fails() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    // NVML never lists the guarded worker
    rig.launcher.script(vec![ready(132), allocated(1536)]);
    let rows = rig.run(&gpus, &Options { skip_mps: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 guard warns", "gpu0 guard stops"]);
    assert_eq!(row(&rows, "gpu0 guard warns").seen, "allocated 1536 MiB but never seen above 512 MiB by NVML");
    assert_eq!(row(&rows, "gpu0 guard stops").seen, "not stopped within 17 s");
}

#[test]
fn a_process_nvml_does_not_list_fails_its_rows() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    // allocates and runs, but NVML shows nothing and the GPU idle
    let mut s = vec![ready(132), allocated(2048)];
    s.extend(std::iter::repeat_n(Step::Wait, 4));
    s.push(done());
    rig.launcher.script(s);
    let rows = rig.run(&gpus, &Options { skip_mps: true, skip_guard: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 nvml sees it", "gpu0 utilisation", "gpu0 attribution"]);
    assert_eq!(row(&rows, "gpu0 nvml sees it").seen, "pid 1001 never listed");
    assert_eq!(row(&rows, "gpu0 attribution").seen, "nothing attributed");
    assert!(row(&rows, "gpu0 cuda load").ok);
}

#[test]
fn a_gpu_busy_before_the_load_does_not_show_it_rise() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.sampler.set(UUID, 100.0, Bytes(0));
    rig.launcher.script(load_script(UUID, 2048));
    let rows = rig.run(&gpus, &Options { skip_mps: true, skip_guard: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 utilisation"]);
    assert_eq!(row(&rows, "gpu0 utilisation").seen, "100 % before, up to 100 % under the load");
}

#[test]
fn a_cuda_failure_is_the_load_rows_words() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(vec![Step::Event(WorkerEvent::Failed {
        stage: "driver".into(),
        error: "unable to load libcuda.so".into(),
    })]);
    let rows = rig.run(&gpus, &Options { skip_mps: true, skip_guard: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 cuda load"]);
    assert_eq!(row(&rows, "gpu0 cuda load").seen, "driver failed: unable to load libcuda.so");
}

#[test]
fn mps_limits_not_enforced_fail() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    // the whole GPU's SMs, and the over-limit allocation succeeds: MPS is not in force
    rig.launcher.script(vec![ready(132), allocated(1024), done()]);
    rig.launcher.script(vec![ready(132), allocated(3072), done()]);
    // and both users run at once
    rig.launcher.script(vec![ready(132), allocated(256)]);
    rig.launcher.script(vec![ready(132), allocated(256), done()]);
    let rows = rig.run(&gpus, &Options { skip_guard: true, ..root_opts() });
    assert_eq!(
        failed(&rows),
        ["gpu0 mps threads", "gpu0 mps over limit", "gpu0 mps second user waits", "gpu0 mps second user follows"]
    );
    assert_eq!(row(&rows, "gpu0 mps over limit").seen, "allocated 3072 MiB");
    assert!(row(&rows, "gpu0 mps second user waits").seen.starts_with("uid 65533 initialised beside uid 65534"));
    assert_eq!(rig.mps.calls.last().map(String::as_str), Some("stop"));
}

#[test]
fn clients_of_a_daemon_with_private_shared_memory_get_it() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    for s in mps_scripts() {
        rig.launcher.script(s);
    }
    if let Ok(client) = rig.mps.answer.as_mut() {
        client.shm_dir = Some("/run/fake-mps/shm".into());
    }
    let rows = rig.run(&gpus, &Options { skip_guard: true, ..root_opts() });
    assert!(failed(&rows).is_empty(), "{rows:#?}");
    let shm: Vec<Option<String>> =
        rig.launcher.specs().iter().map(|s| s.shm.as_ref().map(|p| p.display().to_string())).collect();
    let daemons = Some("/run/fake-mps/shm".to_owned());
    assert_eq!(shm, [None, daemons.clone(), daemons.clone(), daemons.clone(), daemons]);
}

#[test]
fn no_daemon_fails_one_row_and_starts_no_client() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    rig.mps.answer = Err("nvidia-cuda-mps-control is not on PATH (the NVIDIA driver's utilities ship it)".into());
    let rows = rig.run(&gpus, &Options { skip_guard: true, ..root_opts() });
    assert_eq!(failed(&rows), ["gpu0 mps daemon"]);
    assert_eq!(
        row(&rows, "gpu0 mps daemon").seen,
        "nvidia-cuda-mps-control is not on PATH (the NVIDIA driver's utilities ship it)"
    );
    assert_eq!(rig.launcher.specs().len(), 1, "only the load worker");
    assert_eq!(rig.mps.calls, [format!("start {UUID}"), "stop".to_owned()]);
}

#[test]
fn without_root_the_two_user_check_cannot_pass() {
    let gpus = [gpu(0, UUID, None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script(UUID, 2048));
    for s in mps_scripts().into_iter().take(2) {
        rig.launcher.script(s);
    }
    let rows = rig.run(&gpus, &Options { skip_guard: true, ..Options::default() });
    assert_eq!(failed(&rows), ["gpu0 mps second user waits", "gpu0 mps second user follows"]);
    assert_eq!(
        row(&rows, "gpu0 mps second user waits").seen,
        "needs two uids: run gpu-check as root (--uid, --second-uid)"
    );
    assert!(rig.launcher.specs().iter().all(|s| s.uid.is_none()));
    assert_eq!(row(&rows, "gpu0 cuda load").expected, "a worker as this user allocates 2048 MiB and stays busy 5 s");
}

#[test]
fn every_gpu_is_loaded_and_the_chosen_one_checked() {
    let gpus = [gpu(0, "GPU-a", None), gpu(1, "GPU-b", None)];
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script("GPU-a", 2048));
    rig.launcher.script(load_script("GPU-b", 2048));
    let rows = rig.run(&gpus, &Options { skip_guard: true, skip_mps: true, ..root_opts() });
    assert!(failed(&rows).is_empty(), "{rows:#?}");
    assert_eq!(rows.len(), 10);
    // --gpu 1: only that one
    let mut rig = Rig::new(&gpus);
    rig.launcher.script(load_script("GPU-b", 2048));
    let rows = rig.run(&gpus, &Options { gpu: Some(1), skip_guard: true, skip_mps: true, ..root_opts() });
    assert!(rows.iter().all(|r| r.check.starts_with("gpu1 ")), "{rows:#?}");
    assert_eq!(rig.launcher.specs()[0].gpu.as_deref(), Some("GPU-b"));
    // a GPU that is not there
    let rows = Rig::new(&gpus).run(&gpus, &Options { gpu: Some(7), ..root_opts() });
    assert_eq!(rows, [Row::new("gpu choice", "gpu 7 exists", "NVML lists gpus 0, 1", false)]);
}

#[test]
fn a_mig_gpu_is_not_loaded() {
    let gpus = [gpu(0, UUID, Some(true))];
    let mut rig = Rig::new(&gpus);
    let rows = rig.run(&gpus, &root_opts());
    assert_eq!(failed(&rows), ["gpu0 inventory", "gpu0 cuda load"]);
    assert!(row(&rows, "gpu0 inventory").seen.ends_with("MIG enabled"));
    assert!(rig.launcher.specs().is_empty());
    assert!(rig.mps.calls.is_empty());
}
