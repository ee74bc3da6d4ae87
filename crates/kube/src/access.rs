//! Reaching members through the API server: logs (follow), exec (the API server's exec stream over a
//! websocket), endpoints (the pod's IP, or a local end of the API server's port-forward), and the event feed (a watch on gpuhub's pods).

use crate::engine::{KubeEngine, api_err};
use crate::status;
use async_trait::async_trait;
use futures::{AsyncBufReadExt, StreamExt};
use gpuhub_driver::{
    EngineError, EngineEvent, EventStream, ExecControl, ExecHandle, ExecSpec, LABEL_WORKLOAD, LogStream, MemberRef,
    MemberState,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, ListParams, LogParams, TerminalSize};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use tokio::sync::watch;

/// An exec through the API server: resizes go on the stream's size channel; its exit code is the
/// stream's closing status.
#[derive(Debug)]
struct KubeExec {
    resize: Mutex<Option<futures::channel::mpsc::Sender<TerminalSize>>>,
    code: watch::Receiver<Option<i64>>,
}

#[async_trait]
impl ExecControl for KubeExec {
    async fn resize(&self, cols: u16, rows: u16) -> Result<(), EngineError> {
        let mut resize = self.resize.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match resize.as_mut() {
            Some(tx) => tx
                .try_send(TerminalSize { width: cols, height: rows })
                .map_err(|_| EngineError::NotFound("the exec's terminal (it has ended)".into())),
            None => Err(EngineError::Rejected("the exec has no terminal".into())),
        }
    }

    async fn wait(&self) -> Result<i64, EngineError> {
        let mut code = self.code.clone();
        let code = code
            .wait_for(Option::is_some)
            .await
            .map_err(|_| EngineError::Engine("the exec stream closed without a status".into()))?;
        Ok(code.unwrap_or(-1))
    }
}

/// The exit code an exec's closing status carries (`NonZeroExitCode` with its `ExitCode` cause).
/// A stream that closed without a status is -1.
pub fn exit_code(status: Option<&Status>) -> i64 {
    let Some(s) = status else { return -1 };
    if s.status.as_deref() == Some("Success") {
        return 0;
    }
    s.details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref()?.parse().ok())
        .unwrap_or(1)
}

/// The command an [`ExecSpec`] runs: its variables through `env`, its directory through `sh -c cd`.
pub fn exec_command(spec: &ExecSpec) -> Vec<String> {
    let mut cmd = Vec::new();
    if let Some(dir) = &spec.working_dir {
        cmd.extend(["sh".into(), "-c".into(), "cd \"$0\" && exec \"$@\"".into(), dir.clone()]);
    }
    if !spec.env.is_empty() {
        cmd.push("env".into());
        cmd.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
    }
    cmd.extend(spec.command.iter().cloned());
    cmd
}

impl KubeEngine {
    /// The pod of member `m`, found by its labels (a job's or a service's pod has a generated name):
    /// during a service's rollout the ready one (the one its Deployment serves from), else the newest.
    pub(crate) async fn member_pod(&self, m: &MemberRef) -> Result<Pod, EngineError> {
        let selector = format!(
            "{}={},{}={}",
            gpuhub_driver::LABEL_RUN,
            crate::spec::label_value(&m.run),
            gpuhub_driver::LABEL_MEMBER,
            m.member
        );
        let pods =
            self.pods().list(&ListParams::default().labels(&selector)).await.map_err(|e| api_err("listing pods", e))?;
        pods.items
            .into_iter()
            .max_by_key(|p| (status::ready(p), p.metadata.creation_timestamp.clone().map(|t| t.0)))
            .ok_or_else(|| EngineError::NotFound(format!("member {} of run {}", m.member, m.run)))
    }

    pub(crate) async fn logs_of(
        &self,
        m: &MemberRef,
        follow: bool,
        tail: Option<u64>,
    ) -> Result<LogStream, EngineError> {
        let pod = self.member_pod(m).await?;
        let name = pod.metadata.name.unwrap_or_default();
        let lp = LogParams {
            follow,
            tail_lines: tail.map(|t| t as i64),
            container: Some(crate::spec::CONTAINER.into()),
            ..Default::default()
        };
        let reader = self.pods().log_stream(&name, &lp).await.map_err(|e| api_err("reading a member's output", e))?;
        let lines = reader.lines().map(|l| match l {
            Ok(mut l) => {
                l.push('\n');
                Ok(bytes::Bytes::from(l))
            }
            Err(e) => Err(EngineError::Unavailable(format!("the member's output broke off: {e}"))),
        });
        Ok(lines.boxed())
    }

    pub(crate) async fn exec_in(&self, m: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let pod = self.member_pod(m).await?;
        if status::member_state(&pod) != MemberState::Running {
            return Err(EngineError::Rejected(format!("member {} of run {} is not running", m.member, m.run)));
        }
        let name = pod.metadata.name.unwrap_or_default();
        let ap = AttachParams::default()
            .container(crate::spec::CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(spec.tty.is_none())
            .tty(spec.tty.is_some());
        let mut proc = self
            .pods()
            .exec(&name, exec_command(spec), &ap)
            .await
            .map_err(|e| api_err("starting a process in a member", e))?;
        let mut resize = proc.terminal_size();
        if let (Some(tx), Some((cols, rows))) = (resize.as_mut(), spec.tty) {
            let _ = tx.try_send(TerminalSize { width: cols, height: rows });
        }
        let input = proc.stdin().ok_or_else(|| EngineError::Engine("the exec stream has no stdin".into()))?;
        let stdout = proc.stdout().map(chunks);
        let stderr = proc.stderr().map(chunks);
        let output = futures::stream::select(
            stdout.unwrap_or_else(|| futures::stream::empty().boxed()),
            stderr.unwrap_or_else(|| futures::stream::empty().boxed()),
        );
        // the stream's closing status is the process's end: it goes to every waiter (a stream without
        // one drops the sender, and the wait says so)
        let (code_tx, code) = watch::channel(None);
        if let Some(status) = proc.take_status() {
            tokio::spawn(async move {
                let s = status.await;
                let _ = code_tx.send(Some(exit_code(s.as_ref())));
                drop(proc);
            });
        }
        Ok(ExecHandle::new(Box::pin(input), output.boxed(), KubeExec { resize: Mutex::new(resize), code }))
    }

    pub(crate) async fn endpoint_of(&self, m: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        let pod = self.member_pod(m).await?;
        if status::member_state(&pod) != MemberState::Running {
            return Err(EngineError::Rejected(format!("member {} of run {} is not running", m.member, m.run)));
        }
        if self.config.port_forward() {
            let name = pod.metadata.name.clone().unwrap_or_default();
            return self.forward(&m.run, &name, port).await;
        }
        let ip =
            pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()).ok_or_else(|| {
                EngineError::Engine(format!("member {} of run {} has no pod ip yet", m.member, m.run))
            })?;
        let ip = ip.parse().map_err(|_| EngineError::Engine(format!("pod ip {ip:?} is not an address")))?;
        Ok(SocketAddr::new(ip, port))
    }

    /// Member events from a watch on gpuhub's pods: a pod's state changing to running or exited, and
    /// its deletion. The watch's first listing only sets what is known (events are from now on); a
    /// relisting after the watch broke off reports what changed meanwhile. An error ends the stream
    /// (the controller reconciles and follows again).
    pub(crate) fn watch(&self) -> EventStream {
        let config = watcher::Config::default().labels(LABEL_WORKLOAD);
        let events = watcher(self.pods(), config);
        let mut known: HashMap<String, (String, String, u32, MemberState)> = HashMap::new();
        let mut initial = true;
        let mut relisted: Vec<String> = Vec::new();
        let engine = self.clone();
        // a member's end frees room: a gang that waits for it is tried again
        let room = move |out: &Vec<Result<EngineEvent, EngineError>>| {
            if out.iter().any(|e| matches!(e, Ok(EngineEvent::Exited { .. } | EngineEvent::Removed { .. }))) {
                let engine = engine.clone();
                tokio::spawn(async move { engine.admit_waiting().await });
            }
        };
        let stream = events
            .map(move |ev| -> Vec<Result<EngineEvent, EngineError>> {
                match ev {
                    Err(e) => vec![Err(EngineError::Unavailable(format!("the watch on pods broke off: {e}")))],
                    Ok(watcher::Event::Init) => {
                        relisted.clear();
                        Vec::new()
                    }
                    Ok(watcher::Event::InitApply(p)) => {
                        if let Some(k) = key(&p) {
                            relisted.push(k);
                        }
                        transition(&mut known, &p, initial).into_iter().map(Ok).collect()
                    }
                    Ok(watcher::Event::InitDone) => {
                        let gone: Vec<String> = known.keys().filter(|k| !relisted.contains(k)).cloned().collect();
                        let out = gone
                            .into_iter()
                            .filter_map(|k| known.remove(&k))
                            .filter(|_| !initial)
                            .map(|(run, workload, member, _)| Ok(EngineEvent::Removed { run, workload, member }))
                            .collect();
                        initial = false;
                        out
                    }
                    Ok(watcher::Event::Apply(p)) => {
                        let out = transition(&mut known, &p, false).into_iter().map(Ok).collect();
                        room(&out);
                        out
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        let mut out: Vec<_> = transition(&mut known, &p, false).into_iter().map(Ok).collect();
                        if let Some((run, workload, member, _)) = key(&p).and_then(|k| known.remove(&k))
                            // a service's old pod, gone once its rollout's new pod is ready: the member lives on
                            && !known.values().any(|(r, _, m, _)| *r == run && *m == member)
                        {
                            out.push(Ok(EngineEvent::Removed { run, workload, member }));
                        }
                        room(&out);
                        out
                    }
                }
            })
            .flat_map(futures::stream::iter)
            .scan(false, |failed, item| {
                // the first error ends the stream
                if *failed {
                    return futures::future::ready(None);
                }
                *failed = item.is_err();
                futures::future::ready(Some(item))
            });
        stream.boxed()
    }
}

/// A pod's key in the watch's memory (its uid, else its name).
fn key(p: &Pod) -> Option<String> {
    p.metadata.uid.clone().or_else(|| p.metadata.name.clone())
}

/// The events a pod's new state makes, given what was known of it; `quiet`: only remember.
fn transition(
    known: &mut HashMap<String, (String, String, u32, MemberState)>,
    p: &Pod,
    quiet: bool,
) -> Vec<EngineEvent> {
    let (Some(k), Some((run, member))) = (key(p), status::member_of(p)) else { return Vec::new() };
    let workload = status::gpuhub_labels(p).get(LABEL_WORKLOAD).cloned().unwrap_or_default();
    let state = status::member_state(p);
    let before = known.insert(k, (run.clone(), workload.clone(), member, state)).map(|e| e.3);
    if quiet || before == Some(state) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let was_running = matches!(before, Some(MemberState::Running) | Some(MemberState::Exited(_)));
    match state {
        MemberState::Pending => {}
        MemberState::Running => out.push(EngineEvent::Started { run, workload, member }),
        MemberState::Exited(exit_code) => {
            if !was_running {
                out.push(EngineEvent::Started { run: run.clone(), workload: workload.clone(), member });
            }
            if !matches!(before, Some(MemberState::Exited(_))) {
                out.push(EngineEvent::Exited { run, workload, member, exit_code });
            }
        }
    }
    out
}

/// An exec's output half as a stream of chunks.
fn chunks(r: impl tokio::io::AsyncRead + Send + Unpin + 'static) -> LogStream {
    futures::stream::unfold(r, |mut r| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 8192];
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), r))
            }
            Err(e) => Some((Err(EngineError::Unavailable(format!("the exec stream broke off: {e}"))), r)),
        }
    })
    .boxed()
}
