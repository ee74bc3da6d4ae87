//! `squeue`: the text form gpuhub polls with ([`TEXT_FORMAT`]: every job, a line each, about 40 bytes
//! and 25 µs of slurmctld's time per job), `--json` (every job slurmctld holds, with each node's GPU
//! indices, but about 3 KB per job and 20 times slower: 22.05 ignores `-j`/`-u`/`-t` with `--json`), and
//! the one-line forms where a filter matters (`squeue -h -t PD -o %i|%Q|%P`, `squeue -s -h -j J -o
//! %i|%j|%N`).

use super::{Exit, Job, ParseError, hostlist, local_time, number, reported_errors, string, strings};

/// The columns of `squeue -h -t all -o`: id, state, reason, partition, priority, submit time, start time
/// (or Slurm's estimate), user, UID, GID, what it asks per node, nodes, and the comment last, so a `|`
/// in it cannot shift the others.
pub const TEXT_FORMAT: &str = "%i|%T|%r|%P|%Q|%V|%S|%u|%U|%G|%b|%N|%k";

/// Every job of `squeue -h -t all -o` [`TEXT_FORMAT`] (no exit codes and no GPU indices in this form).
pub fn text_jobs(text: &str) -> Result<Vec<Job>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || ParseError::Line { command: "squeue -o", line: line.to_owned() };
        let f: Vec<&str> = line.splitn(13, '|').collect();
        if f.len() < 13 {
            return Err(bad());
        }
        // array and heterogeneous jobs (`12_3`, `12+1`) are not gpuhub's
        let Ok(id) = f[0].parse() else { continue };
        let comment = if f[12] == "(null)" { "" } else { f[12] };
        out.push(Job {
            id,
            state: f[1].to_owned(),
            reason: f[2].to_owned(),
            partition: f[3].to_owned(),
            priority: f[4].parse().unwrap_or(0),
            submit_time: local_time(f[5]).unwrap_or(0),
            start_time: local_time(f[6]).unwrap_or(0),
            user: f[7].to_owned(),
            uid: f[8].parse().ok(),
            gid: f[9].parse().ok(),
            tres_per_node: f[10].to_owned(),
            nodes: hostlist::expand(f[11]),
            comment: comment.to_owned(),
            ..Job::default()
        });
    }
    Ok(out)
}
use serde_json::Value;

const CMD: &str = "squeue --json";

/// Every job of a `squeue --json` answer. An answer carrying `errors` is an error even though squeue
/// exits 0 with it (what 22.05 does when slurmctld is unreachable: no jobs, one error).
pub fn jobs(json: &[u8]) -> Result<Vec<Job>, ParseError> {
    let doc: Value =
        serde_json::from_slice(json).map_err(|e| ParseError::Json { command: CMD, detail: e.to_string() })?;
    if let Some(detail) = reported_errors(&doc) {
        return Err(ParseError::Reported { command: CMD, detail });
    }
    let list = doc
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| ParseError::Json { command: CMD, detail: "no \"jobs\" list".into() })?;
    Ok(list.iter().filter_map(job).collect())
}

fn job(v: &Value) -> Option<Job> {
    let id = u64::try_from(number(v.get("job_id"))?).ok()?;
    let state = string(v.get("job_state"));
    let allocated: Vec<String> = v
        .get("job_resources")
        .and_then(|r| r.get("allocated_nodes"))
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|n| string(n.get("nodename"))).filter(|n| !n.is_empty()).collect())
        .unwrap_or_default();
    let nodes = if allocated.is_empty() { hostlist::expand(&string(v.get("nodes"))) } else { allocated };
    let gres = strings(v.get("gres_detail"));
    let final_state = super::phase(&state) == super::Phase::Ended;
    Some(Job {
        id,
        name: string(v.get("name")),
        comment: string(v.get("comment")),
        user: string(v.get("user_name")),
        uid: number(v.get("user_id")).and_then(|n| u32::try_from(n).ok()),
        gid: number(v.get("group_id")).and_then(|n| u32::try_from(n).ok()),
        state,
        reason: string(v.get("state_reason")),
        partition: string(v.get("partition")),
        priority: number(v.get("priority")).and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
        submit_time: number(v.get("submit_time")).unwrap_or(0),
        start_time: number(v.get("start_time")).unwrap_or(0),
        nodes,
        gres,
        exit: if final_state { number(v.get("exit_code")).map(Exit::from_wait_status) } else { None },
        tres_per_node: string(v.get("tres_per_node")),
    })
}

/// A pending job's place in its partition's queue, from `squeue -h -t PD -o %i|%Q|%P`: `(id, priority,
/// partition)` per line.
pub fn pending_lines(text: &str) -> Result<Vec<(u64, u64, String)>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = || ParseError::Line { command: "squeue -t PD", line: line.to_owned() };
        let mut parts = line.splitn(3, '|');
        let id = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let priority = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let partition = parts.next().ok_or_else(bad)?.to_owned();
        out.push((id, priority, partition));
    }
    Ok(out)
}

/// A running step, from `squeue -s -h -j J -o %i|%j|%N`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLine {
    /// The job id.
    pub job: u64,
    /// `0`, `1`, `batch`, `extern`.
    pub step: String,
    /// The step's name (gpuhub names member i's step `m<i>`).
    pub name: String,
    pub nodes: Vec<String>,
}

/// The running steps of `squeue -s -h -o %i|%j|%N`.
pub fn step_lines(text: &str) -> Result<Vec<StepLine>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = || ParseError::Line { command: "squeue -s", line: line.to_owned() };
        let mut parts = line.splitn(3, '|');
        let id = parts.next().ok_or_else(bad)?;
        let (job, step) = id.split_once('.').ok_or_else(bad)?;
        let job = job.parse().map_err(|_| bad())?;
        let name = parts.next().ok_or_else(bad)?.to_owned();
        let nodes = hostlist::expand(parts.next().ok_or_else(bad)?);
        out.push(StepLine { job, step: step.to_owned(), name, nodes });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Phase;

    const FIXTURE: &[u8] = include_bytes!("../../tests/fixtures/squeue.json");

    #[test]
    fn real_squeue_json() {
        let jobs = jobs(FIXTURE).unwrap();
        let gang = jobs.iter().find(|j| j.id == 23).unwrap();
        assert_eq!(gang.name, "gpuhub-0123456789ab-w1");
        assert_eq!(gang.state, "RUNNING");
        assert_eq!(gang.phase(), Phase::Running);
        assert_eq!(gang.nodes, ["node1", "node2"]);
        assert_eq!(gang.gres, ["gpu:fake:1(IDX:0)", "gpu:fake:1(IDX:0)"]);
        assert_eq!((gang.user.as_str(), gang.uid, gang.gid), ("gpuhub-t1", Some(10001), Some(10001)));
        assert!(gang.comment.contains("\"gpuhub.workload\":\"w1\""));
        assert_eq!(gang.exit, None, "no exit code while it runs");
        let shard = jobs.iter().find(|j| j.id == 24).unwrap();
        assert_eq!(shard.gres, ["shard:2(IDX:1)"]);
        let pending = jobs.iter().find(|j| j.id == 26).unwrap();
        assert_eq!((pending.state.as_str(), pending.reason.as_str()), ("PENDING", "Resources"));
        assert!(pending.nodes.is_empty());
        assert_eq!(pending.priority, 4294901734);
        assert!(pending.start_time > pending.submit_time, "backfill's estimate (a year ahead: unknown)");
        let held = jobs.iter().find(|j| j.id == 28).unwrap();
        assert_eq!((held.reason.as_str(), held.priority), ("JobHeldUser", 0));
        // job 22 ran `exit 7` in both members' steps but its script exited 0
        let ended = jobs.iter().find(|j| j.id == 22).unwrap();
        assert_eq!(ended.phase(), Phase::Ended);
        assert_eq!(ended.exit, Some(Exit { code: 0, signal: 0 }));
    }

    #[test]
    fn unreachable_controller_is_an_error_not_an_empty_queue() {
        let down = include_bytes!("../../tests/fixtures/squeue-down.json");
        let err = jobs(down).unwrap_err();
        assert!(matches!(err, ParseError::Reported { .. }), "{err:?}");
        assert!(err.to_string().contains("Failed while looking for jobs"), "{err}");
        assert!(matches!(jobs(b"not json"), Err(ParseError::Json { .. })));
        assert!(matches!(jobs(b"{\"errors\": []}"), Err(ParseError::Json { .. })));
    }

    #[test]
    fn real_text_lines() {
        let jobs = text_jobs(include_str!("../../tests/fixtures/squeue-text.txt")).unwrap();
        assert_eq!(jobs.len(), 4);
        let gang = jobs.iter().find(|j| j.id == 4271).unwrap();
        assert_eq!((gang.state.as_str(), gang.phase()), ("RUNNING", Phase::Running));
        assert_eq!(gang.nodes, ["node1", "node2"]);
        assert_eq!((gang.user.as_str(), gang.uid, gang.gid), ("gpuhub-t1", Some(10001), Some(10001)));
        assert!(gang.wants_gpus() && gang.gres.is_empty(), "asks for GPUs; no indices in the text form");
        assert!(gang.comment.contains("\"gpuhub.slurm.dir\":\"gpuhub-0123456789ab-w1.x\""));
        assert!(gang.submit_time > 1_700_000_000 && gang.start_time >= gang.submit_time);
        let pending = jobs.iter().find(|j| j.id == 4272).unwrap();
        assert_eq!((pending.reason.as_str(), pending.priority), ("Resources", 4294901490));
        assert!(pending.nodes.is_empty());
        let held = jobs.iter().find(|j| j.id == 4274).unwrap();
        assert_eq!((held.reason.as_str(), held.comment.as_str(), held.start_time), ("JobHeldUser", "not|json", 0));
        assert!(!held.wants_gpus());
        let later = text_jobs(include_str!("../../tests/fixtures/squeue-text-later.txt")).unwrap();
        let done = later.iter().find(|j| j.id == 4273).unwrap();
        assert_eq!((done.phase(), done.nodes.as_slice()), (Phase::Ended, ["node1".to_owned()].as_slice()));
        assert_eq!(later.iter().find(|j| j.id == 4271).unwrap().state, "CANCELLED");
        assert!(text_jobs("1|RUNNING").is_err());
        assert!(text_jobs("12_3|RUNNING|None|gpu|1|N/A|N/A|u|1|1|N/A||(null)").unwrap().is_empty());
    }

    #[test]
    fn text_lines() {
        let p = pending_lines("26|4294901734|gpu\n28|0|gpu\n").unwrap();
        assert_eq!(p, [(26, 4294901734, "gpu".to_owned()), (28, 0, "gpu".to_owned())]);
        assert!(pending_lines("x|1|gpu").is_err());
        let s = step_lines("23.0|m1|node2\n23.1|m0|node1\n23.batch|batch|node1\n").unwrap();
        assert_eq!(s[0], StepLine { job: 23, step: "0".into(), name: "m1".into(), nodes: vec!["node2".into()] });
        assert_eq!(s[2].step, "batch");
        assert!(step_lines("23|m0|node1").is_err());
    }
}
