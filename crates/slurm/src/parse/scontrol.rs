//! `scontrol show job -d J` (text: 22.05's scontrol has no `--json`): one job with its GPU indices per
//! node (`Nodes=node[1-2] CPU_IDs=0 Mem=250 GRES=gpu:fake:1(IDX:0)`).

use super::{Exit, Job, ParseError, hostlist, local_time, phase};
use std::collections::HashMap;

/// The job `scontrol show job -d` describes.
pub fn job(text: &str) -> Result<Job, ParseError> {
    let mut fields: HashMap<&str, &str> = HashMap::new();
    let mut per_node: Vec<(Vec<String>, String)> = Vec::new();
    let mut comment = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(c) = trimmed.strip_prefix("Comment=") {
            // the comment is the rest of its line, spaces and `=` included
            comment = c.trim_end().to_owned();
            continue;
        }
        if trimmed.starts_with("Nodes=") && trimmed.contains(" GRES=") {
            let mut nodes = Vec::new();
            let mut gres = String::new();
            for token in trimmed.split_whitespace() {
                if let Some(n) = token.strip_prefix("Nodes=") {
                    nodes = hostlist::expand(n);
                } else if let Some(g) = token.strip_prefix("GRES=") {
                    gres = g.to_owned();
                }
            }
            per_node.push((nodes, gres));
            continue;
        }
        for token in trimmed.split_whitespace() {
            if let Some((k, v)) = token.split_once('=') {
                fields.entry(k).or_insert(v);
            }
        }
    }
    let id = fields.get("JobId").and_then(|v| v.parse().ok()).ok_or_else(|| ParseError::Line {
        command: "scontrol show job",
        line: text.lines().next().unwrap_or("").to_owned(),
    })?;
    let (user, uid) = name_and_id(fields.get("UserId").copied().unwrap_or(""));
    let (_, gid) = name_and_id(fields.get("GroupId").copied().unwrap_or(""));
    let state = fields.get("JobState").copied().unwrap_or("").to_owned();
    let nodes = hostlist::expand(fields.get("NodeList").copied().unwrap_or(""));
    let gres = nodes
        .iter()
        .map(|n| per_node.iter().find(|(ns, _)| ns.contains(n)).map(|(_, g)| g.clone()).unwrap_or_default())
        .collect::<Vec<_>>();
    let gres = if gres.iter().all(String::is_empty) { Vec::new() } else { gres };
    let ended = phase(&state) == super::Phase::Ended;
    Ok(Job {
        id,
        name: fields.get("JobName").copied().unwrap_or("").to_owned(),
        comment,
        user,
        uid,
        gid,
        reason: fields.get("Reason").copied().unwrap_or("").to_owned(),
        partition: fields.get("Partition").copied().unwrap_or("").to_owned(),
        priority: fields.get("Priority").and_then(|p| p.parse().ok()).unwrap_or(0),
        submit_time: fields.get("SubmitTime").and_then(|t| local_time(t)).unwrap_or(0),
        start_time: fields.get("StartTime").and_then(|t| local_time(t)).unwrap_or(0),
        nodes,
        gres,
        exit: if ended { fields.get("ExitCode").and_then(|e| Exit::from_pair(e)) } else { None },
        tres_per_node: fields.get("TresPerNode").copied().unwrap_or("").to_owned(),
        state,
    })
}

/// `gpuhub-t1(10001)` → (`gpuhub-t1`, 10001).
fn name_and_id(v: &str) -> (String, Option<u32>) {
    match v.split_once('(') {
        Some((name, rest)) => (name.to_owned(), rest.trim_end_matches(')').parse().ok()),
        None => (v.to_owned(), None),
    }
}

/// Whether scontrol's error says the job is unknown to slurmctld (ended longer than `MinJobAge` ago, or
/// never existed).
pub fn unknown_job(stderr: &str) -> bool {
    stderr.contains("Invalid job id specified")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Phase;

    #[test]
    fn running_gang_with_gpu_indices() {
        let j = job(include_str!("../../tests/fixtures/scontrol-running-gang.txt")).unwrap();
        assert_eq!(j.id, 23);
        assert_eq!(j.name, "gpuhub-0123456789ab-w1");
        assert_eq!((j.user.as_str(), j.uid, j.gid), ("gpuhub-t1", Some(10001), Some(10001)));
        assert_eq!(j.phase(), Phase::Running);
        assert_eq!(j.nodes, ["node1", "node2"]);
        assert_eq!(j.gres, ["gpu:fake:1(IDX:0)", "gpu:fake:1(IDX:0)"], "one detail line covers both nodes");
        assert_eq!(j.comment, r#"{"gpuhub.instance":"0123456789abcdef","gpuhub.workload":"w1","gpuhub.members":"2"}"#);
        assert_eq!(j.partition, "gpu");
        assert!(j.submit_time > 1_700_000_000);
        assert_eq!(j.exit, None);
    }

    #[test]
    fn shard_pending_and_ended() {
        let s = job(include_str!("../../tests/fixtures/scontrol-running-shard.txt")).unwrap();
        assert_eq!(s.gres, ["shard:2(IDX:1)"]);
        let p = job(include_str!("../../tests/fixtures/scontrol-pending.txt")).unwrap();
        assert_eq!((p.state.as_str(), p.reason.as_str()), ("PENDING", "Resources"));
        assert!(p.nodes.is_empty() && p.gres.is_empty());
        assert_eq!(p.priority, 4294901734);
        let e = job(include_str!("../../tests/fixtures/scontrol-ended.txt")).unwrap();
        assert_eq!(e.phase(), Phase::Ended);
        assert_eq!(e.exit, Some(Exit { code: 0, signal: 0 }));
        assert!(e.gres.is_empty(), "an ended job's detail has no indices");
        assert_eq!(e.comment, "", "no comment line");
        assert!(job("garbage").is_err());
        assert!(unknown_job("slurm_load_jobs error: Invalid job id specified"));
    }
}
