//! [`SlurmEngine`]: the state it keeps (node addresses, the event poller) and the
//! helpers every operation shares: running a command with its error sorted, finding a job and the run
//! it is, and the paths of a run's files.

use crate::bundle::Bundles;
use crate::cli::{Cmd, CmdOutput, ProcessCli, SlurmCli};
use crate::config::{Accounting, SlurmConfig};
use crate::error;
use crate::parse::{self, Job, Phase, sacct, scontrol};
use crate::status::{self, RunMeta};
use gpuhub_driver::{EngineError, EngineEvent};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// The most members one run may have (one per node).
pub const MAX_MEMBERS: u32 = 64;

/// Up to how many running jobs `fill_gres` asks `scontrol` one by one (about 25 ms each) before it reads
/// all of `squeue --json` instead.
pub const GRES_ONE_BY_ONE: usize = 8;

/// How long any one Slurm command may take before the engine gives up on it (slurmctld unreachable
/// makes `squeue` retry for about 10 s first).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// gpuhub's engine on a Slurm cluster, through the Slurm commands. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SlurmEngine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: SlurmConfig,
    pub(crate) cli: Arc<dyn SlurmCli>,
    pub(crate) bundles: Bundles,
    /// Node name → the address its ports are reached at (`sinfo --json` `address`).
    pub(crate) addresses: Mutex<HashMap<String, IpAddr>>,
    pub(crate) events: broadcast::Sender<EngineEvent>,
    pub(crate) poller: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(p) = self.poller.get_mut().ok().and_then(Option::take) {
            p.abort();
        }
    }
}

/// A job and the gpuhub run it is.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) job: Job,
    pub(crate) meta: RunMeta,
    /// Accounting's record with steps, when it was read.
    pub(crate) acct: Option<sacct::AcctJob>,
}

impl SlurmEngine {
    /// Connects to the cluster `config` describes: checks the settings, that the Slurm commands are
    /// there, and that slurmctld answers (`sinfo --json`), with an error that says what is wrong.
    pub async fn connect(config: SlurmConfig) -> Result<Self, EngineError> {
        config.check().map_err(EngineError::Engine)?;
        let cli = Arc::new(ProcessCli::new(config.conf.as_deref(), COMMAND_TIMEOUT));
        let engine = Self::with_cli(config, cli);
        engine.check().await?;
        Ok(engine)
    }

    /// The engine over any [`SlurmCli`] (tests give a [`crate::fake::FakeCli`]); checks nothing.
    pub fn with_cli(config: SlurmConfig, cli: Arc<dyn SlurmCli>) -> Self {
        let (events, _) = broadcast::channel(4096);
        let bundles = Bundles::new(config.bundle_dir.clone());
        SlurmEngine {
            inner: Arc::new(Inner {
                config,
                cli,
                bundles,
                addresses: Mutex::default(),
                events,
                poller: Mutex::new(None),
            }),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &SlurmConfig {
        &self.inner.config
    }

    /// What [`SlurmEngine::connect`] checks: the commands answer `--version`, slurmctld answers
    /// `sinfo`, and the bundle and log directories exist (they are made when missing).
    pub async fn check(&self) -> Result<(), EngineError> {
        let c = &self.inner.config;
        let mut names = vec!["sbatch", "squeue", "sinfo", "scontrol", "scancel", "srun"];
        if c.accounting == Accounting::Slurmdbd {
            names.push("sacct");
        }
        for name in names {
            let cmd = Cmd::new(c.command(name), ["--version"]);
            let out = self.inner.cli.run(&cmd).await.map_err(|e| error::from_io(&cmd, &e))?;
            if !out.success() {
                return Err(EngineError::Engine(format!("{cmd} failed: {}", out.stderr_text())));
            }
        }
        if let Err(e) = self.nodes().await {
            let conf = c.conf.as_ref().map_or_else(|| "the default slurm.conf".to_owned(), |p| p.display().to_string());
            return Err(EngineError::Unavailable(format!(
                "cannot reach slurmctld ({conf}): {}; is the cluster up? (scripts/slurm-dev-cluster.sh status)",
                inner_message(&e)
            )));
        }
        for dir in [&c.bundle_dir, &c.log_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| EngineError::Engine(format!("cannot make {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// Runs `cmd`; an error unless it exits 0.
    pub(crate) async fn run_ok(&self, cmd: Cmd) -> Result<CmdOutput, EngineError> {
        let out = self.run(&cmd).await?;
        if out.success() { Ok(out) } else { Err(error::from_output(&cmd, &out)) }
    }

    /// Runs `cmd`, whatever its exit status (an error only when it could not run).
    pub(crate) async fn run(&self, cmd: &Cmd) -> Result<CmdOutput, EngineError> {
        self.inner.cli.run(cmd).await.map_err(|e| error::from_io(cmd, &e))
    }

    /// A Slurm command by name, with its arguments.
    pub(crate) fn slurm<I, S>(&self, name: &str, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd::new(self.inner.config.command(name), args)
    }

    /// Says more about an unreachable slurmctld, in Slurm's words (`scontrol ping`).
    pub(crate) async fn explain_unavailable(&self, e: EngineError) -> EngineError {
        match e {
            EngineError::Unavailable(m) => {
                let ping = self.slurm("scontrol", ["ping"]);
                match self.inner.cli.run(&ping).await {
                    Ok(out) if !out.stdout_text().trim().is_empty() => {
                        let words = out.stdout_text().lines().next().unwrap_or("").trim().to_owned();
                        EngineError::Unavailable(format!("{m} ({words})"))
                    }
                    _ => EngineError::Unavailable(m),
                }
            }
            e => e,
        }
    }

    /// Every node of `sinfo --json`.
    pub(crate) async fn nodes(&self) -> Result<Vec<parse::sinfo::Node>, EngineError> {
        let out = self.run_ok(self.slurm("sinfo", ["--json"])).await?;
        let nodes = parse::sinfo::nodes(&out.stdout).map_err(|e| error::from_parse_output(e, &out))?;
        let mut addresses = self.inner.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for n in &nodes {
            if let Ok(ip) = n.address.parse() {
                addresses.insert(n.name.clone(), ip);
            }
        }
        Ok(nodes)
    }

    /// Every job slurmctld holds, ended ones included (`squeue -h -t all -o …`, the text form: `--json`
    /// costs twenty times as much and the poll needs no GPU indices; see [`SlurmEngine::fill_gres`]).
    pub(crate) async fn queue(&self) -> Result<Vec<Job>, EngineError> {
        let cmd = self.slurm("squeue", ["-h", "-t", "all", "-o", parse::squeue::TEXT_FORMAT]);
        let out = self.run_ok(cmd).await?;
        parse::squeue::text_jobs(&out.stdout_text()).map_err(error::from_parse)
    }

    /// Gives running jobs that hold GPUs their GPU indices per node: `scontrol show job -d` for each of
    /// a few, one `squeue --json` for more than [`GRES_ONE_BY_ONE`].
    pub(crate) async fn fill_gres(&self, jobs: &mut [&mut Job]) -> Result<(), EngineError> {
        if jobs.len() > GRES_ONE_BY_ONE {
            let out = self.run_ok(self.slurm("squeue", ["--json"])).await?;
            let all = parse::squeue::jobs(&out.stdout).map_err(|e| error::from_parse_output(e, &out))?;
            let by_id: HashMap<u64, Job> = all.into_iter().map(|j| (j.id, j)).collect();
            for j in jobs.iter_mut() {
                if let Some(full) = by_id.get(&j.id) {
                    j.gres = full.gres.clone();
                    j.nodes = full.nodes.clone();
                }
            }
            return Ok(());
        }
        let cmds: Vec<Cmd> = jobs
            .iter()
            .map(|j| self.slurm("scontrol", ["show".to_owned(), "job".into(), "-d".into(), j.id.to_string()]))
            .collect();
        let answers = futures::future::join_all(cmds.iter().map(|c| self.run(c))).await;
        for (j, out) in jobs.iter_mut().zip(answers) {
            let out = out?;
            if !out.success() {
                continue; // ended meanwhile
            }
            if let Ok(full) = scontrol::job(&out.stdout_text()) {
                j.gres = full.gres;
                j.nodes = full.nodes;
            }
        }
        Ok(())
    }

    /// Accounting's records of `ids`, with their steps (empty without accounting).
    pub(crate) async fn acct(
        &self,
        ids: &[u64],
    ) -> Result<std::collections::BTreeMap<u64, sacct::AcctJob>, EngineError> {
        if ids.is_empty() || self.inner.config.accounting == Accounting::None {
            return Ok(Default::default());
        }
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let cmd = self.slurm("sacct", ["-a", "-P", "-n", "-j", list.as_str(), "-o", sacct::FORMAT]);
        let out = self.run_ok(cmd).await?;
        sacct::jobs(&out.stdout_text()).map_err(error::from_parse)
    }

    /// Job `run` and the gpuhub run it is: from slurmctld (`scontrol show job -d`), or from accounting
    /// once slurmctld has forgotten it. `NotFound` for a job that is not gpuhub's, unknown, or removed.
    pub(crate) async fn find(&self, run: &str) -> Result<Found, EngineError> {
        let not_found = || EngineError::NotFound(format!("run {run}"));
        let id: u64 = run.parse().map_err(|_| not_found())?;
        let cmd = self.slurm("scontrol", ["show", "job", "-d", run]);
        let out = self.run(&cmd).await?;
        let (job, acct) = if out.success() {
            (scontrol::job(&out.stdout_text()).map_err(error::from_parse)?, None)
        } else if scontrol::unknown_job(&out.stderr_text()) {
            let mut records = self.acct(&[id]).await?;
            let a = records.remove(&id).ok_or_else(not_found)?;
            (a.as_job(), Some(a))
        } else {
            return Err(error::from_output(&cmd, &out));
        };
        let meta = status::meta(&job).ok_or_else(not_found)?;
        if job.phase() == Phase::Ended && self.removed(&meta) {
            return Err(not_found());
        }
        Ok(Found { job, meta, acct })
    }

    /// Whether gpuhub removed the run (its bundle directory is gone).
    pub(crate) fn removed(&self, meta: &RunMeta) -> bool {
        meta.dir.as_ref().is_none_or(|d| !self.inner.bundles.run_dir(d).exists())
    }

    /// `<log_dir>/<user>`: where the user's runs write their output.
    pub(crate) fn user_log_dir(&self, user: &str) -> PathBuf {
        self.inner.config.log_dir.join(user)
    }

    /// The log file of member `i` of job `job`, which runs as `user`.
    pub(crate) fn log_path(&self, user: &str, job: u64, i: u32) -> PathBuf {
        self.user_log_dir(user).join(format!("job-{job}.m{i}.log"))
    }

    /// The exit codes the batch script wrote for job `job`'s members.
    pub(crate) fn exit_files(&self, user: &str, job: u64, size: u32) -> std::collections::BTreeMap<u32, i64> {
        (0..size)
            .filter_map(|i| {
                let p = self.user_log_dir(user).join(format!("job-{job}.m{i}.exit"));
                let text = std::fs::read_to_string(p).ok()?;
                Some((i, text.trim().parse().ok()?))
            })
            .collect()
    }
}

/// The message of an engine error without the variant's prefix.
pub(crate) fn inner_message(e: &EngineError) -> String {
    match e {
        EngineError::NotFound(m)
        | EngineError::ImageNotFound(m)
        | EngineError::Rejected(m)
        | EngineError::Engine(m)
        | EngineError::Unavailable(m) => m.clone(),
        e => e.to_string(),
    }
}
