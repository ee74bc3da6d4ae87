//! `gpuhub`: the server (`gpuhub serve`), the simulator (`gpuhub sim`) and the client (everything else)
//! in one binary. This file only parses arguments and wires the parts together.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gpuhub_client::{ClientCommand, GlobalOpts};
use gpuhub_core::node::NodeCapacity;
use gpuhub_core::{Bytes, CpuMilli};
use gpuhub_server::config::{Config, EngineKind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// mimalloc rather than glibc's malloc: under many concurrent requests glibc keeps growing one arena per
/// thread and the server's memory does not come back (40 s of OpenAPI fuzzing grew it from 53 to 116 MB;
/// with mimalloc 120 s of it left it at 70 MB, where it started).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Share GPU servers among users, safely and fairly.
#[derive(Debug, Parser)]
#[command(name = "gpuhub", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalOpts,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the platform: API, controller and container driver.
    Serve {
        /// Config file (default: ./gpuhub.toml when it exists; GPUHUB_* variables override it).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Write a commented config for a local trial (to --config, or ./gpuhub.toml) and stop; an
        /// existing file is never overwritten.
        #[arg(long)]
        init: bool,
    },
    /// Print the OpenAPI document of the HTTP API.
    Openapi,
    /// Simulate the scheduler on cluster traces (FGD protocol, trace replay, throughput).
    #[command(subcommand)]
    Sim(gpuhub_sim::SimCommand),
    /// Check this host's GPUs before trusting them: NVML inventory, a CUDA load started by gpuhub and
    /// attributed to its member, the MPS limits and the memory guard (exit 0 all passed, 1 one failed,
    /// 3 no NVIDIA GPU or driver).
    GpuCheck(gpuhub_gpucheck::GpuCheckArgs),
    /// The CUDA load gpu-check starts as a child (internal).
    #[command(hide = true)]
    GpuCheckWorker(gpuhub_gpucheck::WorkerArgs),
    #[command(flatten)]
    Client(ClientCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // gpu-check runs without the async runtime (its MPS daemon brings one of its own)
    match &cli.command {
        Command::GpuCheck(args) => return exit_code(gpuhub_gpucheck::run(args)),
        Command::GpuCheckWorker(args) => return exit_code(gpuhub_gpucheck::run_worker(args)),
        _ => {}
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: anyhow::Result<i32> = rt.block_on(async {
        match cli.command {
            Command::Serve { config, init: true } => init_config(config),
            Command::Serve { config, init: false } => serve(config).await.map(|()| 0),
            Command::Openapi => {
                println!("{}", serde_json::to_string_pretty(&gpuhub_server::api::openapi())?);
                Ok(0)
            }
            Command::Sim(cmd) => {
                let code = tokio::task::spawn_blocking(move || gpuhub_sim::run(cmd)).await?;
                code.map(|()| 0).map_err(anyhow::Error::from)
            }
            Command::Client(cmd) => Ok(gpuhub_client::run(cli.global, cmd).await?),
            Command::GpuCheck(_) | Command::GpuCheckWorker(_) => Ok(0), // ran above
        }
    });
    match result {
        Ok(code) => exit_code(code),
        // output piped to a program that stopped reading (`gpuhub logs … | head`) is no error
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
}

/// `serve --init`: writes the trial configuration to `file` (default `./gpuhub.toml`), never over one.
fn init_config(file: Option<PathBuf>) -> anyhow::Result<i32> {
    let path = file.unwrap_or_else(|| PathBuf::from("gpuhub.toml"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("cannot write {} (an existing file is kept)", path.display()))?;
    std::io::Write::write_all(&mut f, gpuhub_server::config::TRIAL_CONFIG.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let start = match path.as_os_str() == "gpuhub.toml" {
        true => "gpuhub serve".to_owned(),
        false => format!("gpuhub serve --config {}", path.display()),
    };
    println!("wrote {}: a commented config for a local trial; start with `{start}`", path.display());
    Ok(0)
}

async fn serve(config_file: Option<PathBuf>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUHUB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn,sqlx=warn")),
        )
        .init();
    let config = Config::load(config_file.as_deref(), std::env::vars())?;
    tracing::info!(?config, "configuration");
    let engine: Arc<dyn gpuhub_driver::Engine> = match config.engine {
        EngineKind::Docker => Arc::new(docker_engine(&config).await?),
        EngineKind::Slurm => Arc::new(slurm_engine(&config).await?),
        EngineKind::Lxd => Arc::new(lxd_engine(&config).await?),
        EngineKind::Kubernetes => Arc::new(kube_engine(&config).await?),
    };
    // GPU figures of this host for the monitor: NVML where there is a driver (Docker's and LXD's GPUs
    // are this host's; a Slurm cluster's are on its nodes)
    let gpus: Option<Arc<dyn gpuhub_gpu::GpuSampler>> = match config.engine {
        EngineKind::Docker | EngineKind::Lxd => match gpuhub_gpu::NvmlSampler::try_new() {
            Ok(s) => Some(Arc::new(s)),
            Err(e) => {
                tracing::info!(error = %e, "no GPU figures (utilisation, memory, power): NVML is not available");
                None
            }
        },
        EngineKind::Slurm | EngineKind::Kubernetes => None,
    };
    let seams = gpuhub_server::Seams { gpus, ..Default::default() };
    let server = gpuhub_server::start_with(config, engine, seams).await?;
    println!("gpuhub serving on http://{}", server.addr);
    let stop = server.shutdown_handle();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    server.wait().await;
    Ok(())
}

/// Docker on this host, with this host's CPUs, memory and GPUs.
async fn docker_engine(config: &Config) -> anyhow::Result<gpuhub_docker::DockerEngine> {
    let node = node_capacity(config)?;
    tracing::info!(cpus = %node.cpus, memory = %node.memory, gpus = node.gpus.len(), "node");
    let runtime = gpuhub_docker::DockerRuntime::connect()
        .await
        .context("container engine")?
        .with_host_isolation(config.isolate_host)
        .with_network_pool(
            config
                .network_block()?
                .map(|(pool, prefix)| gpuhub_docker::network::NetworkPool::new(pool, prefix))
                .transpose()?,
        );
    tracing::info!(api = %runtime.api_version(), "docker engine");
    match runtime.live_restore().await {
        Ok(true) => tracing::info!("docker engine: live restore enabled"),
        Ok(false) => {
            tracing::warn!("{}", gpuhub_docker::NO_LIVE_RESTORE);
            eprintln!("gpuhub: warning: {}", gpuhub_docker::NO_LIVE_RESTORE);
        }
        Err(e) => tracing::warn!(error = %e, "cannot ask the docker engine whether live restore is on"),
    }
    let gpu_mode = match config.gpu_mode {
        gpuhub_server::config::GpuMode::Nvidia => gpuhub_docker::GpuMode::Nvidia,
        gpuhub_server::config::GpuMode::Devices => gpuhub_docker::GpuMode::Devices,
        gpuhub_server::config::GpuMode::None => gpuhub_docker::GpuMode::None,
    };
    // a cap is asked of the engine itself (the server refuses to start where it cannot be enforced)
    let disk_cap = match config.container_disk {
        Some(_) => runtime.disk_cap().await.context("asking the docker engine whether it can cap containers' disk")?,
        None => Err("container_disk is unset".into()),
    };
    Ok(gpuhub_docker::DockerEngine::new(runtime, node, gpu_mode).with_disk_cap(disk_cap))
}

/// LXD on this host (`[lxd]`), with this host's CPUs, memory and GPUs. A daemon that does not answer
/// stops the server with a sentence naming its socket and what was tried.
async fn lxd_engine(config: &Config) -> anyhow::Result<gpuhub_lxd::LxdEngine> {
    let node = node_capacity(config)?;
    tracing::info!(cpus = %node.cpus, memory = %node.memory, gpus = node.gpus.len(), "node");
    let engine = gpuhub_lxd::LxdEngine::connect(config.lxd.clone(), node)
        .await
        .map_err(|e| anyhow::anyhow!("lxd engine: {e}"))?;
    tracing::info!(socket = %config.lxd.socket.display(), project = %config.lxd.project, "lxd engine");
    Ok(engine)
}

/// The Kubernetes cluster of `[kubernetes]`. A kubeconfig that does not exist or an API server that
/// does not answer stops the server with a sentence naming the kubeconfig and what was tried.
async fn kube_engine(config: &Config) -> anyhow::Result<gpuhub_kube::KubeEngine> {
    let engine = gpuhub_kube::KubeEngine::connect(config.kubernetes.clone())
        .await
        .map_err(|e| anyhow::anyhow!("kubernetes engine: {e}"))?;
    tracing::info!(namespace = %config.kubernetes.namespace, "kubernetes engine: the api server answers");
    Ok(engine)
}

/// The Slurm cluster of `[slurm]`. Settings that cannot work (no Slurm commands, a bad bundle
/// directory) stop the server; a cluster that does not answer yet does not: the server says so, serves,
/// keeps work queued and reaches the cluster once it answers.
async fn slurm_engine(config: &Config) -> anyhow::Result<gpuhub_slurm::SlurmEngine> {
    match gpuhub_slurm::SlurmEngine::connect(config.slurm.clone()).await {
        Ok(engine) => {
            tracing::info!("slurm engine: the cluster answers");
            Ok(engine)
        }
        Err(gpuhub_driver::EngineError::Unavailable(why)) => {
            eprintln!("gpuhub: the Slurm cluster does not answer yet ({why}); serving anyway, work stays queued");
            let cli = gpuhub_slurm::cli::ProcessCli::new(config.slurm.conf.as_deref(), gpuhub_slurm::COMMAND_TIMEOUT);
            Ok(gpuhub_slurm::SlurmEngine::with_cli(config.slurm.clone(), Arc::new(cli)))
        }
        Err(e) => Err(anyhow::anyhow!("slurm engine: {e}")),
    }
}

/// This host's CPUs, memory (less the configured reserve) and GPUs (NVML, else the configured list).
fn node_capacity(config: &Config) -> anyhow::Result<NodeCapacity> {
    let (inventory, source) = gpuhub_gpu::try_detect(config.gpus.clone()).context("gpu inventory")?;
    let mut gpus = inventory.gpus().context("gpu inventory")?;
    config.resolve_sharing(&mut gpus, source == gpuhub_gpu::InventorySource::Nvml);
    tracing::info!(?source, count = gpus.len(), sharing = ?gpus.iter().map(|g| g.sharing).collect::<Vec<_>>(), "gpus");
    let (cpus, memory) = gpuhub_gpu::host::host_capacity().context("host capacity")?;
    Ok(NodeCapacity {
        name: gpuhub_gpu::host::hostname().unwrap_or_else(|_| "localhost".into()),
        cpus: CpuMilli(cpus.0.saturating_sub(config.reserved_cpu_milli)),
        memory: Bytes(memory.0.saturating_sub(config.reserved_memory.0)),
        gpus,
        labels: Default::default(),
    })
}

/// Whether `e` comes from writing to a pipe whose reader has gone.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// An error and its causes in one line, each cause said once: many errors already end with their
/// cause's words (`cannot listen on 127.0.0.1:8080: Address in use (os error 98)`), which the plain chain
/// repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose words end with its cause's, as `ServeError::Bind` does.
    #[derive(Debug)]
    struct Bind(std::io::Error);

    impl std::fmt::Display for Bind {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot listen on 127.0.0.1:8080: {}", self.0)
        }
    }

    impl std::error::Error for Bind {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address in use (os error 98)");
        let e = anyhow::Error::new(Bind(io)).context("serve");
        assert_eq!(error_text(&e), "serve: cannot listen on 127.0.0.1:8080: Address in use (os error 98)");
        assert_eq!(format!("{e:#}").matches("os error 98").count(), 2, "the plain chain says it twice");
    }

    #[test]
    fn a_closed_pipe_is_no_error() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("writing the logs");
        assert!(broken_pipe(&e));
        assert!(!broken_pipe(&anyhow::anyhow!("other")));
    }
}
