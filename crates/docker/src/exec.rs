//! Processes started in running containers.

use crate::{DockerRuntime, config, error};
use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures::{StreamExt, TryStreamExt};
use gpuhub_driver::{EngineError, ExecControl, ExecHandle, ExecSpec, OutputEnd, watch_end};

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
        let exec = DockerExec { docker: self.docker.clone(), id: created.id, tty: spec.tty.is_some(), end: None };
        let start = StartExecOptions { detach: false, tty: exec.tty, output_capacity: None };
        let started = self.docker.start_exec(&exec.id, Some(start)).await.map_err(|e| error::map(e, &exec.id))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(EngineError::Engine("exec started detached".to_owned()));
        };
        if let Some((cols, rows)) = spec.tty {
            // API 1.41 has no size at creation: size it now that it runs. A process that is already
            // gone cannot be resized, and that is no failure.
            if let Err(e) = exec.resize(cols, rows).await {
                tracing::debug!(exec = %exec.id, error = %e, "could not size the exec's terminal");
            }
        }
        let output = output.map_ok(LogOutput::into_bytes).map_err(|e| error::map(e, "exec output")).boxed();
        let (output, end) = watch_end(output);
        Ok(ExecHandle::new(input, output, DockerExec { end: Some(end), ..exec }))
    }
}

/// A Docker exec: the daemon records its exit code before it closes the attached output (it sets the
/// code, then closes the exec's streams, holding the exec's lock, which inspect takes too), so once the
/// output has ended one inspect tells.
#[derive(Debug)]
struct DockerExec {
    docker: bollard::Docker,
    id: String,
    tty: bool,
    end: Option<OutputEnd>,
}

#[async_trait]
impl ExecControl for DockerExec {
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
        if !self.tty {
            return Err(EngineError::Rejected(format!("exec {} has no terminal", self.id)));
        }
        let options = ResizeExecOptions { height: rows, width: cols };
        self.docker.resize_exec(&self.id, options).await.map_err(|e| error::map(e, &self.id))
    }

    async fn wait(&self) -> Result<i64, EngineError> {
        if let Some(end) = &self.end {
            end.ended().await;
        }
        let inspect = self.docker.inspect_exec(&self.id).await.map_err(|e| error::map(e, &self.id))?;
        match (inspect.running, inspect.exit_code) {
            (Some(true), _) => Err(EngineError::Engine(format!("exec {} still runs after its output ended", self.id))),
            (_, Some(code)) => Ok(code),
            (_, None) => Err(EngineError::Engine(format!("exec {} has no exit code", self.id))),
        }
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
