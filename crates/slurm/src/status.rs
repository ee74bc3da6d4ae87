//! From Slurm's view of a job to gpuhub's [`RunStatus`]: members, their nodes and GPUs, exit codes, and
//! why a pending run waits ([`PendingInfo`], in gpuhub's words with Slurm's reason named).

use crate::parse::{Exit, Job, Phase, gres_gpu_indices, sacct::AcctJob};
use chrono::{DateTime, Utc};
use gpuhub_driver::{
    ENDED_BY_NODE_FAIL, LABEL_ENDED_BY, LABEL_MEMBERS, LABEL_WORKLOAD, MemberState, MemberStatus, PendingInfo,
    RunStatus,
};
use std::collections::{BTreeMap, HashMap};

/// The comment key naming a run's bundle directory (`<job name>.<nonce>` under `bundle_dir/runs`);
/// kept out of the labels gpuhub gets back.
pub const DIR_KEY: &str = "gpuhub.slurm.dir";

/// The comment key naming the cluster account a run was submitted for (whose directory under `log_dir`
/// holds its members' output); kept out of the labels gpuhub gets back. Slurm's own name for the job's
/// user comes from its UID, which names another account where two share a UID.
pub const ACCOUNT_KEY: &str = "gpuhub.slurm.account";

/// What the job's comment says about a gpuhub run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunMeta {
    /// gpuhub's labels, as given at submit (with `gpuhub.members`).
    pub labels: BTreeMap<String, String>,
    /// How many members it was submitted with.
    pub size: u32,
    /// Its bundle directory's name.
    pub dir: Option<String>,
    /// The cluster account it was submitted for (runs submitted before this was recorded: `None`).
    pub account: Option<String>,
}

impl RunMeta {
    /// The account whose log directory holds `job`'s output: the one recorded at submit, else Slurm's name
    /// for the job's user.
    pub fn log_user<'a>(&'a self, job: &'a Job) -> &'a str {
        self.account.as_deref().unwrap_or(&job.user)
    }
}

/// The run a job's comment describes, or `None` when the job is not gpuhub's (no comment of JSON
/// labels carrying [`LABEL_WORKLOAD`]).
pub fn meta(job: &Job) -> Option<RunMeta> {
    let mut labels: BTreeMap<String, String> = serde_json::from_str(job.comment.trim()).ok()?;
    if !labels.contains_key(LABEL_WORKLOAD) {
        return None;
    }
    let dir = labels.remove(DIR_KEY);
    let account = labels.remove(ACCOUNT_KEY);
    let size = labels.get(LABEL_MEMBERS).and_then(|n| n.parse().ok()).unwrap_or(job.nodes.len().max(1) as u32);
    Some(RunMeta { labels, size, dir, account })
}

/// The comment of a run: its labels (with the member count, bundle directory and account) as compact
/// JSON.
pub fn comment(labels: &BTreeMap<String, String>, size: u32, dir: &str, account: &str) -> String {
    let mut all = labels.clone();
    all.insert(LABEL_MEMBERS.to_owned(), size.to_string());
    all.insert(DIR_KEY.to_owned(), dir.to_owned());
    all.insert(ACCOUNT_KEY.to_owned(), account.to_owned());
    serde_json::to_string(&all).unwrap_or_else(|_| "{}".to_owned())
}

/// How a job's members ended, as far as anyone knows: the exit files the batch script wrote (`srun`'s
/// exit status, exact), then accounting's steps (`m<i>`; 22.05 records a container step that exited
/// with 128 + N as `N:0`, so `143` reads `15:0`), then the job's own exit code.
#[derive(Debug, Clone, Default)]
pub struct Exits<'a> {
    pub acct: Option<&'a AcctJob>,
    /// Member index → exit code, from `job-<id>.m<i>.exit`.
    pub files: BTreeMap<u32, i64>,
}

/// `node1/gpu0`: how gpuhub names a GPU Slurm knows only by node and index.
pub fn gpu_name(node: &str, index: u32) -> String {
    format!("{node}/gpu{index}")
}

/// Whether Slurm ended `job` because a node it ran on failed (`NODE_FAIL`), not by its own exit: gpuhub
/// queues it again (it is submitted `--no-requeue`, so Slurm does not).
pub fn node_failed(job: &Job) -> bool {
    job.phase() == Phase::Ended && job.state.split_whitespace().next() == Some("NODE_FAIL")
}

/// The run `job` is, with `meta` from its comment, `exits` once it ended, and `pending` while it waits; a
/// job its node's failure ended carries [`LABEL_ENDED_BY`] = [`ENDED_BY_NODE_FAIL`].
pub fn run_status(job: &Job, meta: &RunMeta, exits: &Exits<'_>, pending: Option<PendingInfo>) -> RunStatus {
    let phase = job.phase();
    let members = (0..meta.size)
        .map(|i| {
            let node = job.nodes.get(i as usize).cloned();
            let step = exits.acct.and_then(|a| a.step(&format!("m{i}")));
            let (state, node) = match phase {
                Phase::Pending => (MemberState::Pending, None),
                Phase::Running => (MemberState::Running, node),
                Phase::Ended => {
                    let code = exits
                        .files
                        .get(&i)
                        .copied()
                        .or_else(|| step.and_then(|s| s.exit.map(Exit::as_code)))
                        .or_else(|| job.exit.map(Exit::as_code))
                        .unwrap_or(0);
                    (MemberState::Exited(code), step.and_then(|s| s.nodes.first().cloned()).or(node))
                }
            };
            let gpus = match (&node, phase) {
                (Some(n), Phase::Running) => job
                    .gres
                    .get(i as usize)
                    .map(|g| gres_gpu_indices(g).into_iter().map(|idx| gpu_name(n, idx)).collect())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            MemberStatus { index: i, engine_id: format!("{}.m{i}", job.id), node, state, gpus }
        })
        .collect();
    let mut labels = meta.labels.clone();
    if node_failed(job) {
        labels.insert(LABEL_ENDED_BY.to_owned(), ENDED_BY_NODE_FAIL.to_owned());
    }
    RunStatus {
        id: job.id.to_string(),
        labels,
        size: meta.size,
        members,
        pending: if phase == Phase::Pending { pending } else { None },
    }
}

/// Slurm's pending reason in gpuhub's vocabulary, and a few words on what it means.
pub fn translate_reason(reason: &str) -> (String, &'static str) {
    // `ReqNodeNotAvail,_UnavailableNodes:node1` and `(Resources)` carry more than the word
    let word: String =
        reason.trim_start_matches('(').chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let (kind, words) = match word.as_str() {
        "Resources" => ("resources", "the resources it asks for are in use"),
        "Priority" => ("priority", "jobs of a higher priority are ahead of it"),
        "ReqNodeNotAvail" | "PartitionDown" | "PartitionInactive" | "NodeDown" | "PartitionNodeLimit"
        | "PartitionTimeLimit" | "BadConstraints" | "InvalidAccount" | "InvalidQOS" | "FrontEndDown" => {
            ("unschedulable", "it cannot start as asked on this partition's nodes now")
        }
        "JobHeldUser" | "JobHeldAdmin" => ("held", "it is held"),
        "Dependency" | "DependencyNeverSatisfied" => ("dependency", "it waits for another job"),
        "BeginTime" => ("begin-time", "its start time has not come"),
        "None" | "" => ("pending", "Slurm has not looked at it yet"),
        w if w.starts_with("QOS") || w.starts_with("Assoc") || w.starts_with("MaxJobs") || w.ends_with("Limit") => {
            ("queue-limit", "a limit of its account or QOS holds it")
        }
        w => return (w.to_ascii_lowercase(), "as Slurm says"),
    };
    (kind.to_owned(), words)
}

/// Each pending job's 1-based place in its partition's queue by Slurm's priority (higher first; ties
/// by submit time, then job id).
pub fn positions(jobs: &[Job]) -> HashMap<u64, u32> {
    let mut pending: Vec<&Job> = jobs.iter().filter(|j| j.phase() == Phase::Pending).collect();
    pending.sort_by(|a, b| {
        (a.partition.as_str(), std::cmp::Reverse(a.priority), a.submit_time, a.id).cmp(&(
            b.partition.as_str(),
            std::cmp::Reverse(b.priority),
            b.submit_time,
            b.id,
        ))
    });
    let mut out = HashMap::new();
    let mut last = "";
    let mut n = 0;
    for j in pending {
        if j.partition != last {
            last = &j.partition;
            n = 0;
        }
        n += 1;
        out.insert(j.id, n);
    }
    out
}

/// Slurm's estimate for a pending job, when it has one: backfill sets `start_time`; a time a year or so
/// ahead is Slurm's "unknown" (work without time limits ahead of it), not an estimate.
pub fn estimated_start(job: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let t = job.start_time;
    if t <= 0 || t > now.timestamp() + 300 * 86400 {
        return None;
    }
    DateTime::from_timestamp(t.max(now.timestamp()), 0)
}

/// Why `job` waits.
pub fn pending_info(job: &Job, position: Option<u32>, now: DateTime<Utc>) -> PendingInfo {
    let (reason, words) = translate_reason(&job.reason);
    let slurm_word = if job.reason.is_empty() { "None" } else { job.reason.as_str() };
    let partition = if job.partition.is_empty() { "(default)" } else { job.partition.as_str() };
    PendingInfo {
        reason,
        message: format!("waiting in Slurm partition {partition}: {slurm_word} ({words})"),
        position,
        estimated_start: estimated_start(job, now),
    }
}

#[cfg(test)]
mod tests;
