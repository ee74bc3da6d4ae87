//! `sacct -P` text, for exit codes: 22.05's `sacct --json` reports every normal exit as 0, so gpuhub
//! reads `ExitCode` (`status:signal`) from the text form.

use super::{Exit, Job, ParseError, hostlist};
use std::collections::BTreeMap;

/// The columns gpuhub asks for, in order (`sacct -o`); the comment last, so a `|` in it cannot shift
/// the others.
pub const FORMAT: &str = "JobIDRaw,JobName,State,ExitCode,User,NodeList,Partition,Comment";

/// One line: a job (`step` is `None`) or one of its steps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Row {
    pub job: u64,
    /// `batch`, `extern`, `0`, `1`, …
    pub step: Option<String>,
    /// The job's name, or the step's (gpuhub names member i's step `m<i>`).
    pub name: String,
    /// `COMPLETED`, `FAILED`, `CANCELLED by 0`, …
    pub state: String,
    pub exit: Option<Exit>,
    /// Set on job lines only.
    pub user: String,
    pub nodes: Vec<String>,
    pub partition: String,
    /// Set on job lines only (stored because of `AccountingStoreFlags=job_comment`).
    pub comment: String,
}

/// A job with its steps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcctJob {
    pub job: Row,
    pub steps: Vec<Row>,
}

impl AcctJob {
    /// The job in the terms `squeue`/`scontrol` use (what gpuhub knows of a job slurmctld has forgotten).
    pub fn as_job(&self) -> Job {
        Job {
            id: self.job.job,
            name: self.job.name.clone(),
            comment: self.job.comment.clone(),
            user: self.job.user.clone(),
            state: self.job.state.split_whitespace().next().unwrap_or("").to_owned(),
            partition: self.job.partition.clone(),
            nodes: self.job.nodes.clone(),
            exit: self.job.exit,
            ..Job::default()
        }
    }

    /// The step named `name` (the last one, should a name repeat).
    pub fn step(&self, name: &str) -> Option<&Row> {
        self.steps.iter().rev().find(|s| s.name == name)
    }
}

/// The lines of `sacct -P -n -o` [`FORMAT`].
pub fn rows(text: &str) -> Result<Vec<Row>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || ParseError::Line { command: "sacct", line: line.to_owned() };
        let f: Vec<&str> = line.splitn(8, '|').collect();
        if f.len() < 8 {
            return Err(bad());
        }
        let (job, step) = match f[0].split_once('.') {
            Some((j, s)) => (j, Some(s.to_owned())),
            None => (f[0], None),
        };
        // array and heterogeneous jobs (`12_3`, `12+1`) are not gpuhub's: skip them
        let Ok(job) = job.parse::<u64>() else { continue };
        out.push(Row {
            job,
            step,
            name: f[1].to_owned(),
            state: f[2].to_owned(),
            exit: Exit::from_pair(f[3]),
            user: f[4].to_owned(),
            nodes: hostlist::expand(f[5]),
            partition: f[6].to_owned(),
            comment: f[7].to_owned(),
        });
    }
    Ok(out)
}

/// Rows grouped by job (steps whose job line is missing are dropped).
pub fn jobs(text: &str) -> Result<BTreeMap<u64, AcctJob>, ParseError> {
    let mut out: BTreeMap<u64, AcctJob> = BTreeMap::new();
    let mut steps = Vec::new();
    for row in rows(text)? {
        if row.step.is_some() {
            steps.push(row);
        } else {
            out.insert(row.job, AcctJob { job: row, steps: Vec::new() });
        }
    }
    for s in steps {
        if let Some(j) = out.get_mut(&s.job) {
            j.steps.push(s);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_sacct_lines() {
        let text = include_str!("../../tests/fixtures/sacct-steps.txt");
        let jobs = jobs(text).unwrap();
        let j22 = &jobs[&22];
        assert_eq!(j22.steps.len(), 3);
        assert_eq!(j22.step("m0").unwrap().exit, Some(Exit { code: 7, signal: 0 }));
        assert_eq!(j22.step("m1").unwrap().nodes, ["node2"]);
        let j23 = &jobs[&23];
        assert_eq!(
            j23.job.comment,
            r#"{"gpuhub.instance":"0123456789abcdef","gpuhub.workload":"w1","gpuhub.members":"2"}"#
        );
        assert_eq!(j23.step("m0").unwrap().exit.map(Exit::as_code), Some(137));
        assert_eq!(j23.as_job().state, "CANCELLED");
        assert_eq!(j23.as_job().nodes, ["node1", "node2"]);
        let j21 = &jobs[&21];
        assert_eq!(j21.step("m1").unwrap().state, "CANCELLED by 10001");
        let j26 = &jobs[&26];
        assert!(j26.steps.is_empty() && j26.job.nodes.is_empty(), "cancelled while pending");
        assert!(rows("1|x").is_err());
        assert!(rows("12_3|a|COMPLETED|0:0|u|n1|gpu|").unwrap().is_empty());
    }

    #[test]
    fn a_pipe_in_the_comment_stays_in_the_comment() {
        let r = rows("5|gpuhub-x|FAILED|3:0|alice|node1|gpu|{\"a\":\"b|c\"}\n").unwrap();
        assert_eq!(r[0].comment, "{\"a\":\"b|c\"}");
        assert_eq!(r[0].exit.map(Exit::as_code), Some(3));
    }
}
