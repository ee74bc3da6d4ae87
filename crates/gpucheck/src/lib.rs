//! `gpuhub gpu-check`: what an admin runs on a GPU host before trusting it. Using only the NVIDIA
//! driver (no Docker, no registry, no CUDA toolkit), it
//!
//! 1. lists every GPU through NVML (`gpuhub-gpu`): model, UUID, memory, MIG mode, driver and CUDA
//!    versions;
//! 2. starts a real CUDA load itself: this binary again, as `gpuhub gpu-check-worker` under a chosen
//!    UID ([`worker`]), which loads the CUDA driver library at run time, allocates and keeps the GPU
//!    busy with copies and memsets;
//! 3. checks that NVML sees that process with its memory, that the GPU's utilisation rises, and that
//!    gpuhub's monitor attributes the memory to the member whose PID it is;
//! 4. under the `mps` mode ([`mps`]), starts gpuhub's own MPS control daemon and checks that a client
//!    is held to its memory limit and thread percentage, and that a second user waits for the first;
//! 5. under the `guard` mode ([`guard`]), lets a worker pass its grant and checks that gpuhub's guard
//!    rule stops it within its grace.
//!
//! It prints a table (check, expected, seen, ok) or JSON and exits 0 when every check passed, 1 when
//! one failed, and 3 (with one sentence) on a host without an NVIDIA GPU or driver. Everything outside
//! the checks goes through narrow seams ([`seams`], [`launch::Launcher`], [`gpuhub_gpu::GpuSampler`]),
//! faked in [`fake`] for the tests.

pub mod checks;
pub mod error;
pub mod fake;
pub mod guard;
pub mod launch;
pub mod mps;
pub mod report;
pub mod seams;
pub mod steps;
pub mod worker;

use checks::Options;
use gpuhub_gpu::{GpuInventory, NvmlInventory};
use report::{GpuInfo, Report};
use std::time::Duration;

/// The exit code when the host has no NVIDIA GPU or driver.
pub const NO_GPU: i32 = 3;

/// The UID workers run as by default when gpu-check runs as root (`nobody`).
pub const DEFAULT_UID: u32 = 65534;

/// The second user's UID of the MPS two-user check by default when running as root.
pub const DEFAULT_SECOND_UID: u32 = 65533;

/// `gpuhub gpu-check`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuCheckArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Check only this GPU (NVML's index); by default every GPU is loaded and the guard and MPS checks
    /// run on the first.
    #[arg(long, value_name = "INDEX")]
    pub gpu: Option<u32>,
    /// The UID the CUDA workers run as (default: 65534 when run as root, else this user).
    #[arg(long)]
    pub uid: Option<u32>,
    /// The second user of the MPS two-user check (default: 65533 when run as root).
    #[arg(long)]
    pub second_uid: Option<u32>,
    /// What the load allocates on each GPU, MiB.
    #[arg(long, default_value_t = 2048)]
    pub mib: u64,
    /// How long the load runs on each GPU, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Leave out the MPS checks.
    #[arg(long)]
    pub skip_mps: bool,
    /// Leave out the guard check.
    #[arg(long)]
    pub skip_guard: bool,
    /// The MPS client memory limit the MPS checks set, MiB.
    #[arg(long, default_value_t = 2048)]
    pub mps_limit_mib: u64,
    /// Run gpuhub's MPS daemon with the host's /dev/shm instead of a private one (by default, as root,
    /// it runs as `gpuhub serve` runs it for containers: its own tmpfs as /dev/shm, which the MPS
    /// clients get as their /dev/shm in a mount namespace of their own).
    #[arg(long)]
    pub mps_host_shm: bool,
    /// The guard's grace in the guard check, seconds.
    #[arg(long, default_value_t = 5)]
    pub guard_grace: u64,
}

/// The hidden `gpuhub gpu-check-worker`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// Memory to allocate, MiB.
    #[arg(long)]
    pub mib: u64,
    /// How long to keep the GPU busy, seconds.
    #[arg(long)]
    pub seconds: f64,
}

/// Runs a worker (the hidden subcommand); its exit code.
pub fn run_worker(args: &WorkerArgs) -> i32 {
    worker::main(worker::WorkerJob { mib: args.mib, seconds: args.seconds })
}

/// The sentence said on a host without an NVIDIA GPU or driver.
pub fn no_gpu_sentence(why: &str) -> String {
    format!("gpu-check: no NVIDIA GPU or driver on this host: {why}")
}

/// The checks' options from the command line: workers as `nobody` (and a second user 65533) when
/// running as root unless told otherwise, as this user when not.
pub fn options(args: &GpuCheckArgs, root: bool) -> Options {
    Options {
        gpu: args.gpu,
        uid: args.uid.or(root.then_some(DEFAULT_UID)),
        second_uid: args.second_uid.or(root.then_some(DEFAULT_SECOND_UID)),
        load_mib: args.mib,
        seconds: args.seconds,
        skip_mps: args.skip_mps,
        skip_guard: args.skip_guard,
        mps_limit_mib: args.mps_limit_mib,
        guard_grace: Duration::from_secs(args.guard_grace),
        ..Options::default()
    }
}

/// Runs gpu-check on this host, printing the report; the exit code.
pub fn run(args: &GpuCheckArgs) -> i32 {
    let inventory = match NvmlInventory::try_new() {
        Ok(i) => i,
        Err(e) => return say_no_gpu(args, &e.to_string()),
    };
    let devices = match inventory.gpus() {
        Ok(g) if !g.is_empty() => g,
        Ok(_) => return say_no_gpu(args, "nvml lists no gpu"),
        Err(e) => return say_no_gpu(args, &e.to_string()),
    };
    let (driver, cuda) = match inventory.system() {
        Ok(s) => (s.driver_version, s.cuda_driver_version.map(gpuhub_gpu::nvml::cuda_version_string)),
        Err(e) => (format!("unknown ({e})"), None),
    };
    let mig = inventory.mig_modes().unwrap_or_default();
    let gpus: Vec<GpuInfo> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| GpuInfo {
            index: d.index,
            uuid: d.uuid.clone(),
            model: d.model.clone(),
            memory: d.memory.0,
            mig: mig.get(i).copied().flatten(),
        })
        .collect();
    let root = rustix::process::geteuid().is_root();
    let opts = options(args, root);
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gpu-check: cannot find this program to start workers: {e}");
            return 1;
        }
    };
    let sampler = inventory.sampler();
    let launcher = launch::ProcessLauncher::new(exe, opts.uid.is_some());
    let clock = seams::SystemClock;
    let mut mps = mps::SupervisorDaemon::new(
        std::env::temp_dir().join(format!("gpuhub-gpu-check-mps-{}", std::process::id())),
        root && !args.mps_host_shm,
    );
    let say = |what: &str| eprintln!("gpu-check: {what}");
    let mut s = seams::Seams { sampler: &sampler, launcher: &launcher, mps: &mut mps, clock: &clock, say: &say };
    let date = seams::Clock::now(&clock).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let rows = checks::run_checks(&gpus, &opts, &mut s);
    let ok = rows.iter().all(|r| r.ok);
    let report = Report {
        date,
        host: gpuhub_gpu::hostname().unwrap_or_else(|_| "localhost".into()),
        driver,
        cuda,
        gpus,
        rows,
        ok,
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.table());
    }
    report.exit_code()
}

fn say_no_gpu(args: &GpuCheckArgs, why: &str) -> i32 {
    let sentence = no_gpu_sentence(why);
    if args.json {
        println!("{}", serde_json::json!({ "ok": false, "no_gpu": sentence }));
    } else {
        println!("{sentence}");
    }
    NO_GPU
}
