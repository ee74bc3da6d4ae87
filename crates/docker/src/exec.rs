//! Processes started in running containers.

use crate::{DockerRuntime, config, error};
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{EngineError, ExecHandle, ExecSpec};

/// The create request for `spec`: attached to stdin, stdout and stderr, with a TTY when asked.
pub(crate) fn create_options(spec: &ExecSpec) -> Result<CreateExecOptions<String>, EngineError> {
    if spec.command.is_empty() {
        return Err(EngineError::Rejected("exec command is empty".to_owned()));
    }
    config::validate_user(&spec.user, true)?;
    if let Some(k) = spec.env.keys().find(|k| k.is_empty() || k.contains('=')) {
        return Err(EngineError::Rejected(format!("invalid environment variable name {k:?}")));
    }
    Ok(CreateExecOptions {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(spec.tty.is_some()),
        env: (!spec.env.is_empty()).then(|| spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        cmd: Some(spec.command.clone()),
        privileged: Some(false),
        user: (!spec.user.is_empty()).then(|| spec.user.clone()),
        working_dir: spec.working_dir.clone(),
        detach_keys: None,
    })
}

impl DockerRuntime {
    pub(crate) async fn exec_impl(&self, container: &str, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let options = create_options(spec)?;
        let created = self.docker.create_exec(container, options).await.map_err(|e| error::map(e, container))?;
        let id = created.id;
        let start = StartExecOptions { detach: false, tty: spec.tty.is_some(), output_capacity: None };
        let started = self.docker.start_exec(&id, Some(start)).await.map_err(|e| error::map(e, &id))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(EngineError::Engine("exec started detached".to_owned()));
        };
        if let Some((cols, rows)) = spec.tty {
            // API 1.41 has no size at creation: size it now that it runs. A process that is already
            // gone cannot be resized, and that is no failure.
            if let Err(e) = self.exec_resize_impl(&id, cols, rows).await {
                tracing::debug!(exec = %id, error = %e, "could not size the exec's terminal");
            }
        }
        let output = output.map_ok(LogOutput::into_bytes).map_err(|e| error::map(e, "exec output")).boxed();
        Ok(ExecHandle { id, input, output })
    }

    pub(crate) async fn exec_resize_impl(&self, exec_id: &str, cols: u16, rows: u16) -> Result<(), EngineError> {
        let options = ResizeExecOptions { height: rows, width: cols };
        self.docker.resize_exec(exec_id, options).await.map_err(|e| error::map(e, exec_id))
    }

    pub(crate) async fn exec_exit_code_impl(&self, exec_id: &str) -> Result<Option<i64>, EngineError> {
        let inspect = self.docker.inspect_exec(exec_id).await.map_err(|e| error::map(e, exec_id))?;
        if inspect.running == Some(true) {
            return Ok(None);
        }
        // An exec that never ran has no exit code either.
        Ok(inspect.exit_code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn attached_with_tty_and_user() {
        let spec = ExecSpec {
            command: vec!["id".into(), "-u".into()],
            user: "10000:10000".into(),
            env: BTreeMap::from([("TERM".to_owned(), "xterm".to_owned())]),
            working_dir: Some("/tmp".into()),
            tty: Some((120, 40)),
        };
        let o = create_options(&spec).unwrap();
        assert_eq!(
            (o.attach_stdin, o.attach_stdout, o.attach_stderr, o.tty),
            (Some(true), Some(true), Some(true), Some(true))
        );
        assert_eq!(o.cmd, Some(vec!["id".to_owned(), "-u".to_owned()]));
        assert_eq!(o.user.as_deref(), Some("10000:10000"));
        assert_eq!(o.env, Some(vec!["TERM=xterm".to_owned()]));
        assert_eq!(o.working_dir.as_deref(), Some("/tmp"));
        assert_eq!(o.privileged, Some(false));
    }

    #[test]
    fn defaults_and_refusals() {
        let spec = ExecSpec { command: vec!["sh".into()], ..Default::default() };
        let o = create_options(&spec).unwrap();
        assert_eq!((o.tty, o.user, o.env), (Some(false), None, None));
        assert!(matches!(create_options(&ExecSpec::default()), Err(EngineError::Rejected(_))));
        let root = ExecSpec { command: vec!["sh".into()], user: "0:0".into(), ..Default::default() };
        assert!(matches!(create_options(&root), Err(EngineError::Rejected(_))));
    }
}
