//! Exec into a running member: a step of its own in the member's job on the member's node (`srun
//! --jobid=J --overlap -w <node>`) that runs the OCI runtime's `exec` in the member's container, as the
//! job's user. The container's id is the one `oci.conf` gives it, `<node>.<user>.<job>.<step>.<task>`,
//! with the step id of the member's step (named `m<i>`). With a TTY the hub holds a pseudo-terminal that
//! `srun --pty` uses as its own.

use crate::cli::{Cmd, Interactive};
use crate::config::OciRuntime;
use crate::engine::SlurmEngine;
use crate::error;
use crate::parse::squeue;
use crate::runs::running_node;
use crate::script::valid_env_name;
use async_trait::async_trait;
use futures::TryStreamExt;
use gpuhub_driver::{EngineError, ExecControl, ExecHandle, ExecSpec, MemberRef};
use std::sync::Arc;

impl SlurmEngine {
    /// The command that execs `spec` in member `i`'s container of `job`, run as `uid:gid`.
    pub(crate) fn exec_command(
        &self,
        job: u64,
        node: &str,
        container: &str,
        (uid, gid): (u32, u32),
        spec: &ExecSpec,
    ) -> Result<Cmd, EngineError> {
        if spec.command.is_empty() {
            return Err(EngineError::Rejected("exec command is empty".into()));
        }
        if let Some(k) = spec.env.keys().find(|k| !valid_env_name(k)) {
            return Err(EngineError::Rejected(format!("invalid environment variable name {k:?}")));
        }
        let c = &self.inner.config;
        let mut args = self.runtime_step(job, node, spec.tty.is_some());
        args.push("exec".to_owned());
        if spec.tty.is_some() {
            args.push("--tty".to_owned());
        }
        // the member runs as the job's user, itself inside (crun) or root mapped onto it (runc)
        let inside = match c.oci_runtime {
            OciRuntime::Crun => format!("{uid}:{gid}"),
            OciRuntime::Runc => "0:0".to_owned(),
        };
        args.push(format!("--user={inside}"));
        for (k, v) in &spec.env {
            args.push(format!("--env={k}={v}"));
        }
        if let Some(wd) = &spec.working_dir {
            args.push(format!("--cwd={wd}"));
        }
        args.push(container.to_owned());
        args.extend(spec.command.iter().cloned());
        Ok(self.slurm("srun", args).as_user(uid, gid))
    }

    /// The arguments of `srun` that run the OCI runtime (rootless, at the configured root) in an
    /// overlapping one-task step of `job` on `node`, with a PTY when `pty`; the runtime's command follows.
    pub(crate) fn runtime_step(&self, job: impl std::fmt::Display, node: &str, pty: bool) -> Vec<String> {
        let c = &self.inner.config;
        let mut args = vec![
            format!("--jobid={job}"),
            "--overlap".to_owned(),
            format!("--nodelist={node}"),
            "--nodes=1".to_owned(),
            "--ntasks=1".to_owned(),
            "--quiet".to_owned(),
        ];
        if pty {
            args.push("--pty".to_owned());
        }
        args.push(c.oci_runtime.command().to_owned());
        args.push("--rootless=true".to_owned());
        args.push(format!("--root={}", c.oci_root.display()));
        args
    }

    pub(crate) async fn exec_member(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let f = self.find(&member.run).await?;
        let node = running_node(&f, member)?;
        let (Some(uid), Some(gid)) = (f.job.uid, f.job.gid) else {
            return Err(EngineError::Engine(format!("Slurm does not say whose job {} is", f.job.id)));
        };
        if !spec.user.is_empty() && spec.user != format!("{uid}:{gid}") {
            tracing::debug!(asked = %spec.user, job = f.job.id, "exec runs as the job's user, not the one asked");
        }
        let job = f.job.id.to_string();
        let steps = self.slurm("squeue", ["-s", "-h", "-j", job.as_str(), "-o", "%i|%j|%N"]);
        let out = self.run_ok(steps).await?;
        let steps = squeue::step_lines(&out.stdout_text()).map_err(error::from_parse)?;
        let name = format!("m{}", member.member);
        let step = steps.iter().find(|s| s.name == name).ok_or_else(|| {
            EngineError::Rejected(format!("member {} of run {} has no running step", member.member, member.run))
        })?;
        let container = format!("{node}.{}.{job}.{}.0", f.job.user, step.step);
        // like `docker exec`, start where the member's process started unless told otherwise
        let mut spec = spec.clone();
        if spec.working_dir.is_none() {
            spec.working_dir = f.meta.dir.as_deref().and_then(|d| self.inner.bundles.run_cwd(d));
        }
        let cmd = self.exec_command(f.job.id, &node, &container, (uid, gid), &spec)?;
        let spawned = self.inner.cli.spawn(&cmd, spec.tty).await.map_err(|e| error::from_io(&cmd, &e))?;
        let output = spawned.output.map_err(|e| EngineError::Engine(format!("exec output: {e}"))).into_stream();
        let exec = SlurmExec { process: spawned.process, tty: spec.tty.is_some() };
        Ok(ExecHandle::new(spawned.input, Box::pin(output), exec))
    }
}

/// An exec's `srun`: its pseudo-terminal resized on the hub's side, its end the child's own.
#[derive(Debug)]
struct SlurmExec {
    process: Arc<dyn Interactive>,
    tty: bool,
}

#[async_trait]
impl ExecControl for SlurmExec {
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
        if !self.tty {
            return Err(EngineError::Rejected("the exec has no terminal".into()));
        }
        self.process.resize(cols, rows).map_err(|e| EngineError::Engine(format!("cannot resize an exec: {e}")))
    }

    async fn wait(&self) -> Result<i64, EngineError> {
        self.process.wait().await.map_err(|e| EngineError::Engine(format!("cannot wait for an exec: {e}")))
    }
}
