//! Fake programs: shell scripts standing in for a program the code under test runs (`ssh`,
//! `nvidia-smi`, `nvidia-cuda-mps-control`), where the real one cannot run here or its effect cannot be
//! seen.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Writes the executable `/bin/sh` script `dir/name` running `body`; the program's path.
pub fn script(dir: &Path, name: &str, body: &str) -> std::io::Result<PathBuf> {
    let program = dir.join(name);
    std::fs::write(&program, format!("#!/bin/sh\n{body}"))?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;
    Ok(program)
}

/// A fake program that writes its arguments, one a line, to [`Recording::args`] (each run replaces
/// the last run's) and exits with a given code.
#[derive(Debug, Clone)]
pub struct Recording {
    pub program: PathBuf,
    args: PathBuf,
}

impl Recording {
    /// Writes `dir/name`, which exits with `code`.
    pub fn new(dir: &Path, name: &str, code: i32) -> std::io::Result<Recording> {
        let args = dir.join(format!("{name}.args"));
        let body = format!("printf '%s\\n' \"$@\" > '{}'\nexit {code}\n", args.display());
        Ok(Recording { program: script(dir, name, &body)?, args })
    }

    /// The arguments of the last run, each followed by a newline; empty before any run.
    pub fn args(&self) -> String {
        std::fs::read_to_string(&self.args).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_program_keeps_its_arguments_and_exits_with_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Recording::new(dir.path(), "fake-ssh", 7).unwrap();
        assert_eq!(fake.args(), "");
        let st = std::process::Command::new(&fake.program).args(["-p", "a b"]).status().unwrap();
        assert_eq!(st.code(), Some(7));
        assert_eq!(fake.args(), "-p\na b\n");
    }
}
