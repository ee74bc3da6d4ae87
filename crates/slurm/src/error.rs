//! From what a command printed to gpuhub's [`EngineError`]: an unreachable slurmctld or slurmdbd is
//! `Unavailable` (nothing was done, it may work later), a refused submission `Rejected` with Slurm's
//! words, anything else `Engine`.

use crate::cli::{Cmd, CmdOutput};
use crate::parse::ParseError;
use gpuhub_driver::EngineError;
use std::io;

/// Words in Slurm's errors that mean a daemon could not be reached (not that the request was wrong).
const UNREACHABLE: &[&str] = &[
    "Unable to contact slurm controller",
    "Socket timed out",
    "Zero Bytes were transmitted",
    "Connection refused",
    "Communication connection failure",
    "Transport endpoint is not connected",
    "backup controller in standby mode",
    "Problem talking to the database",
    "slurmdbd: Connection",
    "Unable to connect to database",
    "Munge encode failed",
    "munge_encode",
    "Failed to connect to \"/run/munge",
    "Failed to access \"/run/munge",
];

/// Whether Slurm's error text says a daemon could not be reached.
pub fn unreachable(text: &str) -> bool {
    UNREACHABLE.iter().any(|w| text.contains(w))
}

/// A command that ran and failed.
pub fn from_output(cmd: &Cmd, out: &CmdOutput) -> EngineError {
    let text = out.stderr_text();
    let text = if text.is_empty() { out.stdout_text().trim().to_owned() } else { text };
    let status = out.status.map_or_else(|| "a signal".to_owned(), |s| format!("status {s}"));
    if unreachable(&text) {
        return EngineError::Unavailable(format!("{}: {text}", cmd.name()));
    }
    match cmd.name() {
        // what sbatch refuses is the request: a partition, account, QOS or size the cluster does not have
        "sbatch" if !text.is_empty() => {
            EngineError::Rejected(format!("slurm refused the job: {}", strip_prefix(&text)))
        }
        name => EngineError::Engine(format!("{name} failed ({status}): {text}")),
    }
}

/// `sbatch: error: Batch job submission failed: X` → `X` (and the same for other commands).
fn strip_prefix(text: &str) -> String {
    let parts: Vec<String> = text
        .split("; ")
        .map(|line| {
            let line = line.split_once(": error: ").map_or(line, |(_, rest)| rest);
            line.strip_prefix("Batch job submission failed: ").unwrap_or(line).to_owned()
        })
        .collect();
    let mut parts = parts;
    parts.dedup();
    parts.join("; ")
}

/// A command that could not be run at all.
pub fn from_io(cmd: &Cmd, e: &io::Error) -> EngineError {
    match e.kind() {
        io::ErrorKind::NotFound => EngineError::Engine(format!(
            "cannot run {}: not found (is the Slurm client installed, and slurm.bin_dir right?)",
            cmd.program
        )),
        io::ErrorKind::TimedOut => EngineError::Unavailable(format!("{}: {e}", cmd.name())),
        _ => EngineError::Engine(format!("cannot run {}: {e}", cmd.program)),
    }
}

/// Output that could not be read: an `errors` answer is an unreachable daemon (22.05 says no more
/// than "Failed while looking for jobs" then); anything else is an engine error.
pub fn from_parse(e: ParseError) -> EngineError {
    match e {
        ParseError::Reported { command, detail } => {
            EngineError::Unavailable(format!("slurmctld did not answer {command}: {detail}"))
        }
        _ => EngineError::Engine(e.to_string()),
    }
}

/// Output that could not be read, with what the command said on stderr (22.05's `sinfo --json` exits 0
/// with an `errors` entry that says only "Unspecified error", and tells why on stderr: `Munge encode
/// failed: …`, `Unable to contact slurm controller`).
pub fn from_parse_output(e: ParseError, out: &CmdOutput) -> EngineError {
    let said = out.stderr_text();
    match from_parse(e) {
        EngineError::Unavailable(m) if !said.is_empty() => EngineError::Unavailable(format!("{m} ({said})")),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sbatch() -> Cmd {
        Cmd::new("/usr/bin/sbatch", ["--parsable"])
    }

    #[test]
    fn sorts_real_messages() {
        let out = CmdOutput::fail(
            1,
            "sbatch: error: Batch job submission failed: Requested node configuration is not available\n",
        );
        let e = from_output(&sbatch(), &out);
        assert!(
            matches!(&e, EngineError::Rejected(m) if m == "slurm refused the job: Requested node configuration is not available"),
            "{e:?}"
        );
        let out = CmdOutput::fail(
            1,
            "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n",
        );
        let e = from_output(&sbatch(), &out);
        assert_eq!(
            e.to_string(),
            "container engine refused the request: slurm refused the job: invalid partition specified: nope; Invalid partition name specified"
        );
        let down = CmdOutput::fail(
            1,
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
        );
        assert!(matches!(from_output(&sbatch(), &down), EngineError::Unavailable(_)));
        let scancel = Cmd::new("scancel", ["99"]);
        let down = CmdOutput::fail(
            1,
            "scancel: error: Kill job error on job id 99: Unable to contact slurm controller (connect failure)",
        );
        assert!(matches!(from_output(&scancel, &down), EngineError::Unavailable(_)));
        let other = CmdOutput::fail(1, "scancel: error: Kill job error on job id 99: Invalid job id specified");
        let e = from_output(&scancel, &other);
        assert!(
            matches!(&e, EngineError::Engine(m) if m.contains("status 1") && m.contains("Invalid job id")),
            "{e:?}"
        );
    }

    #[test]
    fn io_and_parse() {
        let e = from_io(&sbatch(), &io::Error::from(io::ErrorKind::NotFound));
        assert!(e.to_string().contains("cannot run /usr/bin/sbatch: not found"), "{e}");
        assert!(matches!(from_io(&sbatch(), &io::Error::from(io::ErrorKind::TimedOut)), EngineError::Unavailable(_)));
        let p = ParseError::Reported { command: "squeue --json", detail: "x".into() };
        assert!(matches!(from_parse(p), EngineError::Unavailable(_)));
        let p = ParseError::Json { command: "squeue --json", detail: "x".into() };
        assert!(matches!(from_parse(p), EngineError::Engine(_)));
        // munged down: sinfo --json exits 0, says why on stderr only
        let out = CmdOutput {
            status: Some(0),
            stdout: Vec::new(),
            stderr: b"sinfo: error: Munge encode failed: Failed to access \"/run/munge/munge.socket.2\": No such file or directory (Did you start munged?)\n".to_vec(),
        };
        let p = ParseError::Reported { command: "sinfo --json", detail: "Unspecified error".into() };
        let e = from_parse_output(p, &out);
        assert!(matches!(&e, EngineError::Unavailable(m) if m.contains("Did you start munged?")), "{e:?}");
    }
}
