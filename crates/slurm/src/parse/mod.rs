//! What the Slurm commands print, read into gpuhub's terms: jobs from `squeue --json` and `scontrol show
//! job -d`, nodes from `sinfo --json`, job and step exit codes from `sacct -P`. The shapes are Slurm
//! 22.05's (`docs/slurm-22.05-json.md`); numbers are also taken in 23.02's `{"set", "number"}` form and
//! states as a string or a list, so a newer Slurm degrades instead of failing.

pub mod hostlist;
pub mod sacct;
pub mod scontrol;
pub mod sinfo;
pub mod squeue;

use serde_json::Value;

/// What went wrong reading a command's output.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// The output is not the JSON document expected.
    #[error("{command} printed no valid JSON: {detail}")]
    Json {
        /// The command.
        command: &'static str,
        /// serde's words.
        detail: String,
    },
    /// The command answered with an `errors` entry (22.05's `squeue --json`/`sinfo --json` exit 0 with an
    /// empty list and an error when slurmctld cannot be reached).
    #[error("{command} reported: {detail}")]
    Reported {
        /// The command.
        command: &'static str,
        /// The error entries, joined.
        detail: String,
    },
    /// A text line did not have the expected form.
    #[error("unexpected {command} output: {line:?}")]
    Line {
        /// The command.
        command: &'static str,
        /// The line.
        line: String,
    },
}

/// How a job or step ended: its exit status and the signal that ended it (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exit {
    /// The status the process exited with (0 when a signal ended it).
    pub code: i32,
    /// The signal that ended it, 0 for a normal exit.
    pub signal: i32,
}

impl Exit {
    /// From a raw wait status, as `squeue --json` prints `exit_code` (`exit 3` is 768).
    pub fn from_wait_status(raw: i64) -> Self {
        let raw = raw as i32;
        if raw & 0x7f == 0 { Exit { code: (raw >> 8) & 0xff, signal: 0 } } else { Exit { code: 0, signal: raw & 0x7f } }
    }

    /// From Slurm's `status:signal` text (`3:0`, `0:15`), as `sacct` and `scontrol` print it.
    pub fn from_pair(text: &str) -> Option<Self> {
        let (code, signal) = text.trim().split_once(':')?;
        Some(Exit { code: code.parse().ok()?, signal: signal.parse().ok()? })
    }

    /// The exit code gpuhub reports: the status, or 128 + the signal (as a shell and Docker report one).
    pub fn as_code(self) -> i64 {
        if self.signal != 0 { 128 + i64::from(self.signal) } else { i64::from(self.code) }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting to be placed (or its nodes are being configured).
    Pending,
    /// Placed and running (or completing, suspended).
    Running,
    /// Over: completed, failed, cancelled, timed out, node failure, …
    Ended,
}

/// The phase of a Slurm job state (`RUNNING`, `CANCELLED by 0`, `COMPLETING`).
pub fn phase(state: &str) -> Phase {
    let word = state.split_whitespace().next().unwrap_or("");
    match word.trim_end_matches('+') {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => Phase::Pending,
        "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "RESIZING" | "STAGE_OUT" => Phase::Running,
        "" => Phase::Pending,
        _ => Phase::Ended,
    }
}

/// A Slurm job, as `squeue --json` or `scontrol show job -d` show it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Job {
    pub id: u64,
    pub name: String,
    /// The comment (gpuhub's labels, as JSON).
    pub comment: String,
    /// The user it runs as.
    pub user: String,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// `PENDING`, `RUNNING`, …
    pub state: String,
    /// Why it waits (`Resources`) or how it ended (`NonZeroExitCode`); `None` for nothing.
    pub reason: String,
    pub partition: String,
    pub priority: u64,
    /// Unix seconds; 0 when unknown.
    pub submit_time: i64,
    /// Unix seconds: when it started, or when Slurm expects it to (pending); 0 when unknown.
    pub start_time: i64,
    /// The nodes it holds, in allocation order (the order `srun --relative` counts in).
    pub nodes: Vec<String>,
    /// Its GRES on each of `nodes` (`gpu:fake:1(IDX:0)`, `shard:2(IDX:1)`); empty when unknown.
    pub gres: Vec<String>,
    /// What it asks for per node (`gres:gpu:1`, `gres:shard:2`; empty or `N/A` for none).
    pub tres_per_node: String,
    /// How the job (its batch script) ended, once it has.
    pub exit: Option<Exit>,
}

impl Job {
    /// Its phase.
    pub fn phase(&self) -> Phase {
        phase(&self.state)
    }

    /// Whether it asks for GPUs or shards of them.
    pub fn wants_gpus(&self) -> bool {
        self.tres_per_node.contains("gpu") || self.tres_per_node.contains("shard")
    }
}

/// Slurm's text times are the local time of the machine the command runs on, without a zone
/// (`2026-11-23T18:32:57`); `N/A`, `Unknown` and the like are `None`.
pub(crate) fn local_time(text: &str) -> Option<i64> {
    use chrono::TimeZone;
    let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
    chrono::Local.from_local_datetime(&naive).earliest().map(|t| t.timestamp())
}

/// The GPU indices a GRES allocation names (`gpu:fake:2(IDX:0-1)` gives 0 and 1, `shard:2(IDX:1)` the
/// GPU the shards are on, 1).
pub fn gres_gpu_indices(gres: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = gres;
    while let Some(at) = rest.find("IDX:") {
        let after = &rest[at + 4..];
        let end = after.find(')').unwrap_or(after.len());
        for part in after[..end].split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                        out.extend(a..=b.min(a.saturating_add(1024)));
                    }
                }
                None => out.extend(part.parse::<u32>().ok()),
            }
        }
        rest = &after[end..];
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A number in 22.05's plain form or 23.02's `{"set": true, "number": n}` form.
pub(crate) fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64)),
        Value::Object(o) => {
            if o.get("set").and_then(Value::as_bool) == Some(false) {
                return None;
            }
            number(o.get("number"))
        }
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// A string field; a list of strings (23.02's states, flags) gives its first element.
pub(crate) fn string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or("").to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// A list of strings (a single string counts as a list of one).
pub(crate) fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// The `errors` entries of a `--json` answer, joined, or `None`.
pub(crate) fn reported_errors(doc: &Value) -> Option<String> {
    let errors = doc.get("errors")?.as_array()?;
    if errors.is_empty() {
        return None;
    }
    let texts: Vec<String> = errors
        .iter()
        .map(|e| {
            let words: Vec<String> = ["source", "description", "error"]
                .iter()
                .map(|k| string(e.get(*k)))
                .filter(|s| !s.is_empty())
                .collect();
            if words.is_empty() { e.to_string() } else { words.join(": ") }
        })
        .collect();
    Some(texts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_and_phases() {
        assert_eq!(Exit::from_wait_status(768), Exit { code: 3, signal: 0 });
        assert_eq!(Exit::from_wait_status(9).as_code(), 137);
        assert_eq!(Exit::from_pair("7:0").map(Exit::as_code), Some(7));
        assert_eq!(Exit::from_pair("0:15").map(Exit::as_code), Some(143));
        assert_eq!(Exit::from_pair("x"), None);
        assert_eq!(phase("CANCELLED by 0"), Phase::Ended);
        assert_eq!(phase("COMPLETING"), Phase::Running);
        assert_eq!(phase("PENDING"), Phase::Pending);
        assert_eq!(phase("NODE_FAIL"), Phase::Ended);
    }

    #[test]
    fn gres_indices() {
        assert_eq!(gres_gpu_indices("gpu:fake:1(IDX:0)"), [0]);
        assert_eq!(gres_gpu_indices("gpu:fake:2(IDX:0-1)"), [0, 1]);
        assert_eq!(gres_gpu_indices("shard:2(IDX:1)"), [1]);
        assert_eq!(gres_gpu_indices("gpu:a100:1(IDX:3),shard:a100:0(IDX:N/A)"), [3]);
        assert!(gres_gpu_indices("").is_empty());
    }

    #[test]
    fn numbers_old_and_new() {
        let v: Value = serde_json::json!({"a": 5, "b": {"set": true, "number": 7}, "c": {"set": false, "number": 0}});
        assert_eq!(number(v.get("a")), Some(5));
        assert_eq!(number(v.get("b")), Some(7));
        assert_eq!(number(v.get("c")), None);
        assert_eq!(number(v.get("d")), None);
    }
}
