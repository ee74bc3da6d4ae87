//! Runs: submit, observe, list, cancel, remove — and the [`Engine`] implementation that routes every
//! call of the interface to them and to `events`, `logs`, `exec`.

use crate::bundle::{self, RunBundle};
use crate::cli::Cmd;
use crate::engine::{Found, MAX_MEMBERS, SlurmEngine};
use crate::error;
use crate::parse::{self, Job, Phase, sacct};
use crate::script::{self, Submission};
use crate::status::{self, Exits, RunMeta};
use async_trait::async_trait;
use gpuhub_core::{Bytes, CpuMilli, node::GpuDevice, node::NodeCapacity};
use gpuhub_driver::{
    Capabilities, Engine, EngineError, EngineNode, EventStream, ExecHandle, ExecSpec, LABEL_INSTANCE, LABEL_WORKLOAD,
    LogStream, MemberRef, Placement, RunSpec, RunStatus,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::time::{Duration, Instant};

/// How long `cancel` waits for a job to leave RUNNING/COMPLETING after the final kill.
const KILL_WAIT: Duration = Duration::from_secs(60);
/// How long `cancel` lets the batch script end by itself once the members' containers are killed.
const SCRIPT_WAIT: Duration = Duration::from_secs(3);
/// How often `cancel` looks.
const CANCEL_POLL: Duration = Duration::from_millis(200);

/// `[A-Za-z0-9_.-]` of `s`, the rest as `_`.
fn safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect()
}

/// Whether `name` can be a cluster account (a Unix user name: it names a directory under `log_dir`).
fn valid_account(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['-', '.'])
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

impl SlurmEngine {
    /// The UID and GID of cluster account `account`, from the hub's user database.
    async fn lookup_account(&self, account: &str) -> Result<(u32, u32), EngineError> {
        let cmd = Cmd::new("getent", ["passwd", account]);
        let out = self.run(&cmd).await?;
        if out.status == Some(2) {
            return Err(EngineError::Rejected(format!(
                "cluster account {account} does not exist on the hub (getent passwd {account})"
            )));
        }
        if !out.success() {
            return Err(error::from_output(&cmd, &out));
        }
        let line = out.stdout_text();
        let f: Vec<&str> = line.trim().split(':').collect();
        match (f.get(2).and_then(|u| u.parse().ok()), f.get(3).and_then(|g| g.parse().ok())) {
            (Some(uid), Some(gid)) => Ok((uid, gid)),
            _ => Err(EngineError::Engine(format!("getent passwd {account}: unexpected answer {line:?}"))),
        }
    }

    /// `<log_dir>/<account>`, the account's own (mode 0700).
    fn ensure_log_dir(&self, account: &str, uid: u32, gid: u32) -> Result<String, EngineError> {
        let dir = self.user_log_dir(account);
        let fail = |e: std::io::Error| EngineError::Engine(format!("cannot make {}: {e}", dir.display()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(fail)?;
        Ok(dir.to_string_lossy().into_owned())
    }

    async fn submit_run(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        let c = &self.inner.config;
        let size = spec.members.len() as u32;
        if size == 0 || size > MAX_MEMBERS {
            return Err(EngineError::Rejected(format!("a run has 1 to {MAX_MEMBERS} members, not {size}")));
        }
        let workload = spec
            .labels
            .get(LABEL_WORKLOAD)
            .ok_or_else(|| EngineError::Rejected(format!("a run needs the {LABEL_WORKLOAD} label")))?;
        let shape = script::run_shape(spec, c.shards_per_gpu)?;
        if let Some(k) = spec.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return Err(EngineError::Rejected(format!("invalid environment variable name {k:?}")));
        }
        let username = &spec.identity.username;
        let account = c.cluster_account(username).ok_or_else(|| {
            EngineError::Rejected(format!(
                "gpuhub user {username:?} has no cluster account (add it to slurm.accounts, or set slurm.map_usernames)"
            ))
        })?;
        if !valid_account(&account) {
            return Err(EngineError::Rejected(format!("{account:?} is not a valid cluster account name")));
        }
        let (uid, gid) = self.lookup_account(&account).await?;
        if uid == 0 || gid == 0 {
            return Err(EngineError::Rejected(format!("cluster account {account} is root: runs never run as root")));
        }
        if !self.inner.bundles.image_ready(&spec.image) {
            self.inner.bundles.ensure_image(&*self.inner.cli, &spec.image).await?;
        }
        let image_config = self.inner.bundles.image_config(&spec.image)?;
        let mut command =
            if spec.command.is_empty() { bundle::default_command(&image_config) } else { spec.command.clone() };
        if command.is_empty() {
            return Err(EngineError::Rejected(format!("image {} has no default command: give one", spec.image)));
        }
        if c.init.is_some() {
            command.splice(0..0, [bundle::INIT_PATH.to_owned(), "--".to_owned()]);
        }
        let instance: String =
            spec.labels.get(LABEL_INSTANCE).map_or_else(|| "local".to_owned(), |i| safe(i).chars().take(12).collect());
        let job_name = format!("gpuhub-{instance}-{}", safe(workload));
        // unique across restarts of gpuhub (its ids start again at 0) without asking the time
        let nonce = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let dir_name = format!("{job_name}.{nonce}");
        let log_dir = self.ensure_log_dir(&account, uid, gid)?;
        let mut env = spec.env.clone();
        if !spec.identity.home.is_empty() {
            env.entry("HOME".to_owned()).or_insert_with(|| spec.identity.home.clone());
        }
        let run = RunBundle {
            env,
            working_dir: spec.working_dir.clone(),
            mounts: spec.mounts.clone(),
            init: c.init.as_ref().map(|p| p.to_string_lossy().into_owned()),
            uid,
            gid,
            groups: spec.identity.groups.clone(),
        };
        let bundle_dir = self.inner.bundles.write_run(&dir_name, &spec.image, &run)?;
        let sub = Submission {
            job_name,
            comment: status::comment(&spec.labels, size, &dir_name, &account),
            uid,
            gid,
            log_dir,
            bundle: bundle_dir.to_string_lossy().into_owned(),
            placement: c.placement(&spec.queue),
            command,
        };
        let submitted = async {
            let script = script::batch_script(c, &sub, spec, &shape)?;
            let cmd = self.slurm("sbatch", script::sbatch_args(&sub, spec, &shape)).with_stdin(script);
            let out = self.run_ok(cmd).await?;
            let text = out.stdout_text();
            let id = text.trim().split(';').next().unwrap_or("").to_owned();
            id.parse::<u64>().map_err(|_| EngineError::Engine(format!("sbatch printed {text:?}, not a job id")))?;
            Ok::<String, EngineError>(id)
        };
        let id = match submitted.await {
            Ok(id) => id,
            Err(e) => {
                if let Err(e) = self.inner.bundles.remove_run(&dir_name) {
                    tracing::warn!(error = %e, "cannot remove the bundle of a failed submission");
                }
                return Err(e);
            }
        };
        tracing::info!(job = %id, name = %sub.job_name, members = size, "submitted a run to Slurm");
        if let Err(e) = self.inner.bundles.record_job(&dir_name, id.parse().unwrap_or(0)) {
            tracing::warn!(job = %id, error = %e, "cannot note the run's job: a restarted hub finds it only while Slurm holds it");
        }
        match self.observe_run(&id).await {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::debug!(job = %id, error = %e, "cannot observe a run just submitted");
                let job = Job { id: id.parse().unwrap_or(0), state: "PENDING".into(), ..Job::default() };
                let meta =
                    RunMeta { labels: spec.labels.clone(), size, dir: Some(dir_name), account: Some(account.clone()) };
                Ok(status::run_status(&job, &meta, &Exits::default(), None))
            }
        }
    }

    /// The status of a found job: its pending place, or its members' exits.
    pub(crate) async fn status_of(
        &self,
        f: &Found,
        positions: Option<&std::collections::HashMap<u64, u32>>,
    ) -> Result<RunStatus, EngineError> {
        let now = crate::clock::now();
        match f.job.phase() {
            Phase::Pending => {
                let position = match positions {
                    Some(p) => p.get(&f.job.id).copied(),
                    None => self.position(&f.job).await,
                };
                Ok(status::run_status(
                    &f.job,
                    &f.meta,
                    &Exits::default(),
                    Some(status::pending_info(&f.job, position, now)),
                ))
            }
            Phase::Running => Ok(status::run_status(&f.job, &f.meta, &Exits::default(), None)),
            Phase::Ended => {
                let fetched;
                let acct = match &f.acct {
                    Some(a) => Some(a),
                    None => {
                        fetched = self.acct(&[f.job.id]).await.unwrap_or_else(|e| {
                            tracing::debug!(job = f.job.id, error = %e, "no accounting for an ended job");
                            BTreeMap::new()
                        });
                        fetched.get(&f.job.id)
                    }
                };
                let exits = Exits { acct, files: self.exit_files(f.meta.log_user(&f.job), f.job.id, f.meta.size) };
                Ok(status::run_status(&f.job, &f.meta, &exits, None))
            }
        }
    }

    /// A pending job's place among its partition's pending jobs (`squeue -t PD` text, which filters).
    async fn position(&self, job: &Job) -> Option<u32> {
        let out = self.run_ok(self.slurm("squeue", ["-h", "-t", "PD", "-o", "%i|%Q|%P"])).await.ok()?;
        let lines = parse::squeue::pending_lines(&out.stdout_text()).ok()?;
        let jobs: Vec<Job> = lines
            .into_iter()
            .map(|(id, priority, partition)| Job { id, priority, partition, state: "PENDING".into(), ..Job::default() })
            .collect();
        status::positions(&jobs).get(&job.id).copied()
    }

    pub(crate) async fn observe_run(&self, run: &str) -> Result<RunStatus, EngineError> {
        let f = self.find(run).await?;
        self.status_of(&f, None).await
    }

    /// Every gpuhub run: slurmctld's (pending, running, ended within `MinJobAge`) and, with accounting,
    /// those it has forgotten that were not removed.
    pub(crate) async fn list(&self) -> Result<Vec<RunStatus>, EngineError> {
        let queue = self.queue().await?;
        let positions = status::positions(&queue);
        let mut found: Vec<Found> = Vec::new();
        let in_queue: BTreeSet<u64> = queue.iter().map(|j| j.id).collect();
        for job in queue {
            let Some(meta) = status::meta(&job) else { continue };
            if job.phase() == Phase::Ended && self.removed(&meta) {
                continue;
            }
            found.push(Found { job, meta, acct: None });
        }
        // runs slurmctld has forgotten that were not removed: accounting has them (their jobs are noted
        // beside their bundles, so this asks for exactly those, however large the cluster's history)
        let forgotten: Vec<(String, u64)> =
            self.inner.bundles.recorded_jobs().into_iter().filter(|(_, id)| !in_queue.contains(id)).collect();
        let ended: Vec<u64> = found
            .iter()
            .filter(|f| f.job.phase() == Phase::Ended)
            .map(|f| f.job.id)
            .chain(forgotten.iter().map(|(_, id)| *id))
            .collect();
        let mut records = self.acct(&ended).await?;
        for f in &mut found {
            if let Some(a) = records.remove(&f.job.id) {
                f.acct = Some(a);
            }
        }
        for (dir, id) in forgotten {
            let Some(a) = records.remove(&id) else { continue };
            let job = a.as_job();
            // the note must name a gpuhub job of this very run
            let Some(meta) = status::meta(&job).filter(|m| m.dir.as_deref() == Some(dir.as_str())) else { continue };
            found.push(Found { job, meta, acct: Some(a) });
        }
        let mut gpu_jobs: Vec<&mut Job> = found
            .iter_mut()
            .filter(|f| f.job.phase() == Phase::Running && f.job.wants_gpus())
            .map(|f| &mut f.job)
            .collect();
        self.fill_gres(&mut gpu_jobs).await?;
        let mut out = Vec::with_capacity(found.len());
        for f in &found {
            let mut f = f.clone();
            if f.acct.is_none() && f.job.phase() == Phase::Ended {
                // accounting was asked above (or is off): no second look per job
                f.acct = Some(sacct::AcctJob::default());
            }
            out.push(self.status_of(&f, Some(&positions)).await?);
        }
        out.sort_by_key(|r| r.id.parse::<u64>().unwrap_or(0));
        Ok(out)
    }

    /// Where job `id` is (`squeue -h -t all -j J -o %T`: without `-t all` an ended job is not shown), or
    /// `None` once slurmctld has forgotten it.
    pub(crate) async fn job_phase(&self, id: &str) -> Result<Option<Phase>, EngineError> {
        let cmd = self.slurm("squeue", ["-h", "-t", "all", "-j", id, "-o", "%T"]);
        let out = self.run(&cmd).await?;
        if !out.success() {
            if parse::scontrol::unknown_job(&out.stderr_text()) {
                return Ok(None);
            }
            return Err(error::from_output(&cmd, &out));
        }
        Ok(out.stdout_text().lines().map(str::trim).find(|l| !l.is_empty()).map(parse::phase))
    }

    /// Waits until job `id` has ended (or is forgotten), for at most `limit`; whether it has.
    async fn wait_ended(&self, id: &str, limit: Duration) -> Result<bool, EngineError> {
        let deadline = Instant::now() + limit;
        loop {
            match self.job_phase(id).await? {
                None | Some(Phase::Ended) => return Ok(true),
                Some(_) if Instant::now() >= deadline => return Ok(false),
                Some(_) => tokio::time::sleep(CANCEL_POLL).await,
            }
        }
    }

    /// A pending job leaves the queue; a running one gets SIGTERM in every step (the members; the batch
    /// script waits for them), then after `grace` SIGKILL in everything, the script included.
    pub(crate) async fn cancel_run(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        let f = self.find(run).await?;
        let id = f.job.id.to_string();
        match self.job_phase(&id).await? {
            None | Some(Phase::Ended) => return Ok(()),
            Some(Phase::Pending) => {
                self.scancel(&["--state=PENDING", id.as_str()]).await?;
                // it may have started meanwhile: then it is cancelled as a running one below
                if self.wait_ended(&id, Duration::from_secs(2)).await? {
                    return Ok(());
                }
            }
            Some(Phase::Running) => {}
        }
        self.scancel(&["--signal=TERM", id.as_str()]).await?;
        if !grace.is_zero() && self.wait_ended(&id, grace).await? {
            return Ok(());
        }
        // SIGKILL from Slurm reaches the runtime, not the container, which would live on until the
        // node's KillWait is over: kill the members' containers first
        self.kill_containers(&f).await;
        // the batch script records the members' ends (their exit files) and exits: give it a moment
        if self.wait_ended(&id, SCRIPT_WAIT).await? {
            return Ok(());
        }
        self.scancel(&["--full", "--signal=KILL", id.as_str()]).await?;
        self.scancel(&[id.as_str()]).await?;
        if self.wait_ended(&id, KILL_WAIT).await? {
            Ok(())
        } else {
            Err(EngineError::Engine(format!("job {id} did not end within {KILL_WAIT:?} of SIGKILL")))
        }
    }

    /// SIGKILL to each running member's container (`<runtime> kill`, in a step of the job on the
    /// member's node, as the job's user); best effort.
    async fn kill_containers(&self, f: &Found) {
        let (Some(uid), Some(gid)) = (f.job.uid, f.job.gid) else { return };
        let job = f.job.id.to_string();
        let Ok(out) = self.run_ok(self.slurm("squeue", ["-s", "-h", "-j", job.as_str(), "-o", "%i|%j|%N"])).await
        else {
            return;
        };
        let steps = parse::squeue::step_lines(&out.stdout_text()).unwrap_or_default();
        let kills = steps.iter().filter(|s| s.name.starts_with('m')).filter_map(|s| {
            let node = s.nodes.first()?;
            let container = format!("{node}.{}.{job}.{}.0", f.job.user, s.step);
            let mut args = self.runtime_step(&job, node, false);
            // the container's PID 1: its PID namespace, and so every process in it, goes with it
            // (`kill --all` needs the container's cgroup, which rootless containers here lack)
            args.extend(["kill".to_owned(), container, "KILL".to_owned()]);
            Some(self.slurm("srun", args).as_user(uid, gid))
        });
        let kills: Vec<Cmd> = kills.collect();
        for (cmd, r) in kills.iter().zip(futures::future::join_all(kills.iter().map(|k| self.run(k))).await) {
            match r {
                Ok(out) if out.success() => {}
                Ok(out) => tracing::debug!(%cmd, error = %out.stderr_text(), "cannot kill a member's container"),
                Err(e) => tracing::debug!(%cmd, error = %e, "cannot kill a member's container"),
            }
        }
    }

    /// `scancel args…`; a job that already ended is no error.
    /// `scontrol update JobId=<id> TimeLimit=<limit>`: the job of `run` may run `limit` from its start.
    pub(crate) async fn set_time_limit(&self, run: &str, limit: Duration) -> Result<(), EngineError> {
        let f = self.find(run).await?;
        let args =
            ["update".to_owned(), format!("JobId={}", f.job.id), format!("TimeLimit={}", script::time_limit(limit))];
        let cmd = self.slurm("scontrol", args);
        let out = self.run(&cmd).await?;
        if out.success() { Ok(()) } else { Err(error::from_output(&cmd, &out)) }
    }

    async fn scancel(&self, args: &[&str]) -> Result<(), EngineError> {
        let cmd = self.slurm("scancel", args.iter().copied());
        let out = self.run(&cmd).await?;
        let text = out.stderr_text();
        if out.success() || text.contains("already completing or completed") || text.contains("Invalid job id") {
            Ok(())
        } else {
            Err(error::from_output(&cmd, &out))
        }
    }

    /// Kills what still runs, then deletes the run's bundle and its log files.
    pub(crate) async fn remove_run(&self, run: &str) -> Result<(), EngineError> {
        let f = self.find(run).await?;
        if f.job.phase() != Phase::Ended {
            self.cancel_run(run, Duration::ZERO).await?;
        }
        if let Some(dir) = &f.meta.dir {
            self.inner.bundles.remove_run(dir)?;
        }
        if !f.meta.log_user(&f.job).is_empty() {
            let dir = self.user_log_dir(f.meta.log_user(&f.job));
            let prefix = format!("job-{}.", f.job.id);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&prefix) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
        Ok(())
    }

    /// The nodes of gpuhub's partitions (all nodes when it names none), GPUs named `<node>/gpu<i>`.
    pub(crate) async fn inventory_nodes(&self) -> Result<Vec<EngineNode>, EngineError> {
        let nodes = match self.nodes().await {
            Ok(n) => n,
            Err(e) => return Err(self.explain_unavailable(e).await),
        };
        let partitions = self.inner.config.partitions();
        Ok(nodes
            .into_iter()
            .filter(|n| partitions.is_empty() || n.partitions.iter().any(|p| partitions.contains(p)))
            .map(|n| {
                let mut gpus = Vec::new();
                for (model, count) in n.gpu_types() {
                    for _ in 0..count {
                        let index = gpus.len() as u32;
                        gpus.push(GpuDevice {
                            uuid: status::gpu_name(&n.name, index),
                            index,
                            model: model.clone(),
                            memory: Bytes(0),
                            device: None,
                            sharing: None,
                        });
                    }
                }
                let mut labels = BTreeMap::new();
                labels.insert("slurm.partitions".to_owned(), n.partitions.join(","));
                if !n.features.is_empty() {
                    labels.insert("slurm.features".to_owned(), n.features.join(","));
                }
                EngineNode {
                    up: n.up(),
                    state: n.describe(),
                    capacity: NodeCapacity {
                        name: n.name.clone(),
                        cpus: CpuMilli(u64::from(n.cpus) * 1000),
                        memory: Bytes(n.memory_mib * 1024 * 1024),
                        gpus,
                        labels,
                    },
                }
            })
            .collect())
    }

    /// A bundle exists for it, or the local Docker daemon has it (the bundle is made on first submit).
    pub(crate) async fn has_image(&self, image: &str) -> Result<bool, EngineError> {
        if self.inner.bundles.image_ready(image) {
            return Ok(true);
        }
        let cmd = Cmd::new("docker", ["image", "inspect", "--format", "{{.Id}}", image]);
        match self.inner.cli.run(&cmd).await {
            Ok(out) => Ok(out.success()),
            Err(e) => {
                tracing::debug!(image, error = %e, "no docker to look for an image in");
                Ok(false)
            }
        }
    }

    /// The running member's node address and `port`.
    pub(crate) async fn member_endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        let f = self.find(&member.run).await?;
        let node = running_node(&f, member)?;
        let known = self.inner.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&node).copied();
        let ip = match known {
            Some(ip) => ip,
            None => {
                self.nodes().await?;
                let again =
                    self.inner.addresses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&node).copied();
                match again {
                    Some(ip) => ip,
                    None => tokio::net::lookup_host((node.as_str(), port))
                        .await
                        .ok()
                        .and_then(|mut a| a.next())
                        .map(|a| a.ip())
                        .ok_or_else(|| EngineError::Engine(format!("node {node} has no address Slurm or DNS knows")))?,
                }
            }
        };
        Ok(SocketAddr::new(ip, port))
    }
}

/// The node a running member runs on, or why there is none.
pub(crate) fn running_node(f: &Found, member: &MemberRef) -> Result<String, EngineError> {
    if member.member >= f.meta.size {
        return Err(EngineError::NotFound(format!("member {} of run {}", member.member, member.run)));
    }
    if f.job.phase() != Phase::Running {
        return Err(EngineError::Rejected(format!("member {} of run {} is not running", member.member, member.run)));
    }
    f.job.nodes.get(member.member as usize).cloned().ok_or_else(|| {
        EngineError::Engine(format!(
            "run {} runs on {} node(s), not on a node for member {}",
            member.run,
            f.job.nodes.len(),
            member.member
        ))
    })
}

#[async_trait]
impl Engine for SlurmEngine {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            placement: Placement::Engine,
            multi_node: true,
            max_members: MAX_MEMBERS,
            exec: true,
            ingress: true,
            volumes: true,
            nfs: false,
            pull: false,
            gpu_shares: true,
            shared_ports: true,
            usage: false,
        }
    }

    /// A member's root file system is an unpacked OCI bundle on a node's disk (`bundle_dir`), shared by
    /// every run of its image, and crun has no per-container size limit: nothing here caps it.
    fn disk_cap(&self) -> Result<(), String> {
        Err("its members run in crun from OCI bundles on the nodes' disks, which have no per-container size limit"
            .into())
    }

    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        self.inventory_nodes().await
    }

    async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        self.has_image(image).await
    }

    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        self.submit_run(spec).await
    }

    async fn extend_time_limit(&self, run: &str, limit: Duration) -> Result<(), EngineError> {
        self.set_time_limit(run, limit).await
    }

    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError> {
        self.cancel_run(run, grace).await
    }

    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        self.remove_run(run).await
    }

    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        self.observe_run(run).await
    }

    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        self.list().await
    }

    async fn events(&self) -> Result<EventStream, EngineError> {
        Ok(self.subscribe())
    }

    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        self.member_logs(member, follow, tail).await
    }

    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        self.exec_member(member, spec).await
    }

    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        self.member_endpoint(member, port).await
    }
}
