//! A recording, in-memory [`Engine`]: every call is recorded; runs and their members live in a map;
//! tests make a member exit with [`FakeEngine::exit`] / [`FakeEngine::exit_member`] and feed it output with
//! [`FakeEngine::push_log`], or any amount of output made only as it is read with
//! [`FakeEngine::push_filler`]. What members use ([`Engine::usage`]) is whatever the test scripted
//! with [`FakeEngine::set_usage`].
//!
//! It places like Docker by default ([`Placement::Hub`]: a submitted run starts at once, on the nodes
//! gpuhub chose) or, made with [`FakeEngine::engine_placed`], like Slurm: a submitted run waits with a
//! pending reason until the test starts it ([`FakeEngine::start_pending`]).

mod output;

use crate::*;
use futures::StreamExt;
use output::{FILLER_LINES_PER_CHUNK, Output, output_stream, tail_start};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::broadcast;

pub use output::FILLER_LINE;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Submit(Box<RunSpec>),
    Cancel(String),
    Remove(String),
    Exec(MemberRef, Box<ExecSpec>),
    /// [`Engine::usage`] of this run.
    Usage(String),
    /// [`Engine::pull`] of this image, with the registry user given.
    Pull(String, Option<String>),
    /// [`Engine::commit`] of this member as this image.
    Commit(MemberRef, String),
    /// [`Engine::remove_image`] of this image.
    RemoveImage(String),
    /// [`Engine::remove_user_network`] of this network, with these labels.
    RemoveUserNetwork(String, BTreeMap<String, String>),
}

#[derive(Debug)]
struct FakeMember {
    engine_id: String,
    node: Option<String>,
    state: MemberState,
    gpus: Vec<String>,
    logs: Vec<Output>,
}

#[derive(Debug)]
struct FakeRun {
    spec: RunSpec,
    members: Vec<FakeMember>,
    pending: Option<PendingInfo>,
    /// What [`Engine::usage`] answers, as scripted by [`FakeEngine::set_usage`].
    usage: Vec<MemberUsage>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    runs: BTreeMap<String, FakeRun>,
    images: BTreeSet<String>,
    calls: Vec<Call>,
    /// The engine is "down": requests fail with [`EngineError::Unavailable`] and reach nothing.
    down: bool,
    nodes: Vec<NodeCapacity>,
    endpoint: Option<std::net::IpAddr>,
    /// What a pull of each image does: `Ok` brings it in, `Err` is the registry's refusal.
    registry: BTreeMap<String, Result<(), String>>,
    /// The engine says it cannot pull (as the Slurm engine does).
    no_pull: bool,
    /// What [`Engine::disk_cap`] answers; `None`: that it cannot.
    disk_cap: Option<Result<(), String>>,
    /// [`Engine::roll`] takes a service's new terms under the same run (as a Kubernetes Deployment).
    rolls: bool,
}

/// The fake engine.
#[derive(Debug)]
pub struct FakeEngine {
    state: Mutex<State>,
    events: broadcast::Sender<EngineEvent>,
    placement: Placement,
    /// Pulls wait here, after reporting half their bytes, while a test holds them.
    pull_gate: tokio::sync::watch::Sender<bool>,
}

impl Default for FakeEngine {
    fn default() -> Self {
        Self::new()
    }
}

/// The fake's ID of the image `reference` (`sha256:` and 64 hex digits, one per reference), which
/// [`Engine::image_exists`] and [`Engine::image_tags`] take as Docker takes an image's ID.
pub fn image_id(reference: &str) -> String {
    let mut id = String::from("sha256:");
    for seed in 0..4u64 {
        // FNV-1a, seeded per quarter
        let h = reference
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        id.push_str(&format!("{h:016x}"));
    }
    id
}

/// The pending reason an engine-placed fake run shows until it is started.
pub const FAKE_PENDING: &str = "waiting in the fake engine";

impl FakeEngine {
    /// An empty fake that places like Docker and has the image `busybox:latest`, with no nodes.
    pub fn new() -> Self {
        Self::with_placement(Placement::Hub)
    }

    /// An empty fake that queues and places itself, like Slurm.
    pub fn engine_placed() -> Self {
        Self::with_placement(Placement::Engine)
    }

    fn with_placement(placement: Placement) -> Self {
        let (events, _) = broadcast::channel(1024);
        let (pull_gate, _) = tokio::sync::watch::channel(true);
        let fake = Self { state: Mutex::new(State::default()), events, placement, pull_gate };
        fake.add_image("busybox:latest");
        fake
    }

    /// The nodes [`Engine::inventory`] reports.
    pub fn with_nodes(self, nodes: Vec<NodeCapacity>) -> Self {
        self.state.lock().unwrap().nodes = nodes;
        self
    }

    /// The address [`Engine::endpoint`] answers for every member (a test's local listener); by default
    /// `172.30.0.<2 + member>`, which nothing answers.
    pub fn set_endpoint(&self, ip: std::net::IpAddr) {
        self.state.lock().unwrap().endpoint = Some(ip);
    }

    /// Takes the engine down (`true`: every request fails with [`EngineError::Unavailable`], as a
    /// stopped dockerd's would) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// Makes an image known.
    pub fn add_image(&self, image: &str) {
        self.state.lock().unwrap().images.insert(image.to_owned());
    }

    /// Makes `image` pullable from the fake registry (`Ok`), or refused there with `Err(why)`.
    pub fn set_registry(&self, image: &str, answer: Result<(), String>) {
        self.state.lock().unwrap().registry.insert(image.to_owned(), answer);
    }

    /// Makes the engine say it can pull (`true`, the default) or not, as the Slurm engine.
    pub fn set_can_pull(&self, can: bool) {
        self.state.lock().unwrap().no_pull = !can;
    }

    /// Makes the engine say it caps what members write ([`RunSpec::disk_bytes`], `Ok`) or why it cannot;
    /// one that cannot refuses a run with a cap, as Docker refuses such a container.
    pub fn set_disk_cap(&self, answer: Result<(), String>) {
        self.state.lock().unwrap().disk_cap = Some(answer);
    }

    /// Holds pulls half-way (`true`: they report half their bytes and wait) or lets them finish.
    pub fn hold_pulls(&self, hold: bool) {
        self.pull_gate.send_replace(!hold);
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Forgets the calls recorded so far (a long benchmark's fake would otherwise grow with every call;
    /// [`FakeEngine::submitted`] then starts afresh too).
    pub fn forget_calls(&self) {
        let mut s = self.state.lock().unwrap();
        s.calls.clear();
        s.calls.shrink_to(1024);
    }

    /// The specs of the runs submitted so far, oldest first.
    pub fn submitted(&self) -> Vec<RunSpec> {
        let calls = self.calls();
        calls
            .into_iter()
            .filter_map(|c| match c {
                Call::Submit(s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    /// The spec a run was submitted with.
    pub fn spec(&self, run: &str) -> Option<RunSpec> {
        self.state.lock().unwrap().runs.get(run).map(|r| r.spec.clone())
    }

    /// Ids of runs with a member running now.
    pub fn running(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.runs
            .iter()
            .filter(|(_, r)| r.members.iter().any(|m| m.state == MemberState::Running))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Appends output to member 0's log.
    pub fn push_log(&self, run: &str, text: &str) {
        self.push_member_log(run, 0, text);
    }

    /// Appends output to a member's log.
    pub fn push_member_log(&self, run: &str, member: u32, text: &str) {
        if let Some(m) = self.state.lock().unwrap().runs.get_mut(run).and_then(|r| r.members.get_mut(member as usize)) {
            m.logs.push(Output::Text(bytes::Bytes::copy_from_slice(text.as_bytes())));
        }
    }

    /// Makes member 0's log stream fail after what it has so far, with `why` (the engine's error), as a
    /// container's does when it is removed under a reader.
    pub fn push_log_failure(&self, run: &str, why: &str) {
        if let Some(m) = self.state.lock().unwrap().runs.get_mut(run).and_then(|r| r.members.first_mut()) {
            m.logs.push(Output::Failure(why.to_owned()));
        }
    }

    /// Appends `lines` copies of [`FILLER_LINE`] to member 0's log, without holding them: they are made
    /// chunk by chunk (64 KiB) as the log is read.
    pub fn push_filler(&self, run: &str, lines: u64) {
        if let Some(m) = self.state.lock().unwrap().runs.get_mut(run).and_then(|r| r.members.first_mut()) {
            m.logs.push(Output::Filler(lines));
        }
    }

    /// Makes [`Engine::roll`] take a service's new terms under the same run, as Kubernetes rolls a
    /// Deployment out (off: it answers that it does not roll, as the other engines).
    pub fn set_rolls(&self, rolls: bool) {
        self.state.lock().unwrap().rolls = rolls;
    }

    /// Sets label `key` of run `run` as the engine reports it (an engine's own count of restarts).
    pub fn set_run_label(&self, run: &str, key: &str, value: &str) {
        if let Some(r) = self.state.lock().unwrap().runs.get_mut(run) {
            r.spec.labels.insert(key.to_owned(), value.to_owned());
        }
    }

    /// Makes member 0 of a running run exit with `code`, as if its main process ended.
    pub fn exit(&self, run: &str, code: i64) {
        self.exit_member(run, 0, code);
    }

    /// Makes a running member exit with `code`.
    pub fn exit_member(&self, run: &str, member: u32, code: i64) {
        let workload = {
            let mut s = self.state.lock().unwrap();
            let Some(r) = s.runs.get_mut(run) else { return };
            let workload = r.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
            let Some(m) = r.members.get_mut(member as usize) else { return };
            if matches!(m.state, MemberState::Exited(_)) {
                return;
            }
            m.state = MemberState::Exited(code);
            workload
        };
        let _ = self.events.send(EngineEvent::Exited { run: run.to_owned(), workload, member, exit_code: code });
    }

    /// The node of a run fails under it, as Slurm's `NODE_FAIL` ends a job: its status says so
    /// ([`crate::LABEL_ENDED_BY`]) and each running member exits with `code` (Slurm's accounting often
    /// says 0).
    pub fn fail_node(&self, run: &str, code: i64) {
        let members = {
            let mut s = self.state.lock().unwrap();
            let Some(r) = s.runs.get_mut(run) else { return };
            r.spec.labels.insert(crate::LABEL_ENDED_BY.to_owned(), crate::ENDED_BY_NODE_FAIL.to_owned());
            r.members.len() as u32
        };
        for member in 0..members {
            self.exit_member(run, member, code);
        }
    }

    /// An engine-placed run waiting in the fake starts now on `node`, its members holding `gpus` (one
    /// list per member; missing lists hold none).
    pub fn start_pending(&self, run: &str, node: &str, gpus: &[&[&str]]) {
        let (workload, size) = {
            let mut s = self.state.lock().unwrap();
            let Some(r) = s.runs.get_mut(run) else { return };
            r.pending = None;
            for (i, m) in r.members.iter_mut().enumerate() {
                m.state = MemberState::Running;
                m.node = Some(node.to_owned());
                m.gpus = gpus.get(i).map(|g| g.iter().map(|s| s.to_string()).collect()).unwrap_or_default();
            }
            (r.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default(), r.members.len() as u32)
        };
        for member in 0..size {
            let _ = self.events.send(EngineEvent::Started { run: run.to_owned(), workload: workload.clone(), member });
        }
    }

    /// Changes why an engine-placed run waits.
    pub fn set_pending(&self, run: &str, info: PendingInfo) {
        if let Some(r) = self.state.lock().unwrap().runs.get_mut(run) {
            r.pending = Some(info);
        }
    }

    /// What [`Engine::usage`] answers for `run` from now on (until set again); ignored for a run the
    /// fake does not have. Until set, a run's usage is empty.
    pub fn set_usage(&self, run: &str, usage: Vec<MemberUsage>) {
        if let Some(r) = self.state.lock().unwrap().runs.get_mut(run) {
            r.usage = usage;
        }
    }

    /// Removes a run behind the platform's back, as `docker rm -f` by hand would (one event per member).
    pub fn vanish(&self, run: &str) {
        let removed = self.state.lock().unwrap().runs.remove(run);
        if let Some(r) = removed {
            let workload = r.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
            for member in 0..r.members.len() as u32 {
                let _ =
                    self.events.send(EngineEvent::Removed { run: run.to_owned(), workload: workload.clone(), member });
            }
        }
    }

    fn status(id: &str, r: &FakeRun) -> RunStatus {
        RunStatus {
            id: id.to_owned(),
            labels: r.spec.labels.clone(),
            size: r.spec.members.len() as u32,
            members: r
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| MemberStatus {
                    index: i as u32,
                    engine_id: m.engine_id.clone(),
                    node: m.node.clone(),
                    state: m.state,
                    gpus: m.gpus.clone(),
                })
                .collect(),
            pending: r.pending.clone(),
        }
    }
}

/// Fails as an unreachable engine does while the fake is down.
fn up(s: &State) -> Result<(), EngineError> {
    if s.down { Err(EngineError::Unavailable("the fake engine is down".into())) } else { Ok(()) }
}

fn member<'a>(s: &'a State, m: &MemberRef) -> Result<&'a FakeMember, EngineError> {
    s.runs
        .get(&m.run)
        .and_then(|r| r.members.get(m.member as usize))
        .ok_or_else(|| EngineError::NotFound(format!("member {} of run {}", m.member, m.run)))
}

#[async_trait]
impl Engine for FakeEngine {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            placement: self.placement,
            multi_node: self.placement == Placement::Engine,
            max_members: 64,
            exec: true,
            ingress: true,
            volumes: true,
            nfs: true,
            pull: !self.state.lock().unwrap().no_pull,
            gpu_shares: true,
            shared_ports: false,
            usage: true,
        }
    }

    fn disk_cap(&self) -> Result<(), String> {
        let answer = self.state.lock().unwrap().disk_cap.clone();
        answer.unwrap_or_else(|| Err("the fake engine cannot cap what a container writes".into()))
    }

    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.nodes.iter().map(|n| EngineNode { capacity: n.clone(), up: true, state: "idle".into() }).collect())
    }

    async fn image_exists(&self, image: &str) -> Result<bool, EngineError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.images.contains(image) || s.images.iter().any(|r| image_id(r) == image))
    }

    async fn image_tags(&self, image: &str) -> Result<Vec<String>, EngineError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.images.iter().filter(|r| *r == image || image_id(r) == image).cloned().collect())
    }

    async fn remove_user_network(&self, network: &str, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::RemoveUserNetwork(network.to_owned(), labels.clone()));
        Ok(())
    }

    async fn commit(&self, member: &MemberRef, reference: &str) -> Result<u64, EngineError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::Commit(member.clone(), reference.to_owned()));
        if !s.runs.contains_key(&member.run) {
            return Err(EngineError::NotFound(format!("run {}", member.run)));
        }
        s.images.insert(reference.to_owned());
        Ok(1 << 20)
    }

    async fn remove_image(&self, reference: &str) -> Result<(), EngineError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::RemoveImage(reference.to_owned()));
        if s.images.remove(reference) { Ok(()) } else { Err(EngineError::NotFound(format!("image {reference}"))) }
    }

    async fn pull(
        &self,
        image: &str,
        auth: Option<&crate::RegistryAuth>,
        progress: &(dyn Fn(crate::PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        let answer = {
            let mut s = self.state.lock().unwrap();
            up(&s)?;
            s.calls.push(Call::Pull(image.to_owned(), auth.map(|a| a.username.clone())));
            s.registry.get(image).cloned()
        };
        match answer {
            None => return Err(EngineError::Rejected(format!("pull of {image}: manifest unknown"))),
            Some(Err(why)) => return Err(EngineError::Rejected(format!("pull of {image}: {why}"))),
            Some(Ok(())) => {}
        }
        let step = |current, done| crate::PullProgress {
            status: if done == 1 { "Pull complete".into() } else { "Downloading".into() },
            current_bytes: current,
            total_bytes: 1000,
            layers: 1,
            layers_done: done,
        };
        progress(step(500, 0));
        let mut gate = self.pull_gate.subscribe();
        let _ = gate.wait_for(|open| *open).await;
        progress(step(1000, 1));
        self.state.lock().unwrap().images.insert(image.to_owned());
        Ok(())
    }

    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError> {
        let (id, status) = {
            let mut s = self.state.lock().unwrap();
            up(&s)?;
            s.calls.push(Call::Submit(Box::new(spec.clone())));
            if !s.images.contains(&spec.image) {
                return Err(EngineError::ImageNotFound(spec.image.clone()));
            }
            if spec.members.is_empty() {
                return Err(EngineError::Rejected("a run needs at least one member".into()));
            }
            if spec.disk_bytes.is_some() && !matches!(s.disk_cap, Some(Ok(()))) {
                return Err(EngineError::Rejected("the fake engine cannot cap what a container writes".into()));
            }
            s.next += 1;
            let id = match self.placement {
                Placement::Hub => spec.name.clone(),
                Placement::Engine => format!("{}", 1000 + s.next),
            };
            if s.runs.contains_key(&id) {
                return Err(EngineError::Rejected(format!("name {id} in use")));
            }
            let hub = self.placement == Placement::Hub;
            let members = (spec.members.iter())
                .map(|m| FakeMember {
                    engine_id: format!("fake{:08}-{}", s.next, m.index),
                    node: if hub { m.node.clone() } else { None },
                    state: if hub { MemberState::Running } else { MemberState::Pending },
                    gpus: if hub { m.gpus.uuids() } else { Vec::new() },
                    logs: Vec::new(),
                })
                .collect();
            let pending = (!hub).then(|| PendingInfo {
                reason: "resources".into(),
                message: FAKE_PENDING.into(),
                position: Some(1),
                estimated_start: None,
            });
            let run = FakeRun { spec: spec.clone(), members, pending, usage: Vec::new() };
            let status = Self::status(&id, &run);
            s.runs.insert(id.clone(), run);
            (id, status)
        };
        if self.placement == Placement::Hub {
            let workload = spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
            for m in &spec.members {
                let ev = EngineEvent::Started { run: id.clone(), workload: workload.clone(), member: m.index };
                let _ = self.events.send(ev);
            }
        }
        Ok(status)
    }

    async fn cancel(&self, run: &str, _grace: Duration) -> Result<(), EngineError> {
        let running: Vec<u32> = {
            let mut s = self.state.lock().unwrap();
            up(&s)?;
            s.calls.push(Call::Cancel(run.to_owned()));
            let r = s.runs.get_mut(run).ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
            r.pending = None;
            let mut running = Vec::new();
            for (i, m) in r.members.iter_mut().enumerate() {
                match m.state {
                    MemberState::Running => running.push(i as u32),
                    MemberState::Pending => m.state = MemberState::Exited(0),
                    MemberState::Exited(_) => {}
                }
            }
            running
        };
        for member in running {
            self.exit_member(run, member, 137);
        }
        Ok(())
    }

    async fn remove(&self, run: &str) -> Result<(), EngineError> {
        let r = {
            let mut s = self.state.lock().unwrap();
            up(&s)?;
            s.calls.push(Call::Remove(run.to_owned()));
            s.runs.remove(run).ok_or_else(|| EngineError::NotFound(format!("run {run}")))?
        };
        let workload = r.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
        for member in 0..r.members.len() as u32 {
            let _ = self.events.send(EngineEvent::Removed { run: run.to_owned(), workload: workload.clone(), member });
        }
        Ok(())
    }

    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        let r = s.runs.get(run).ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
        Ok(Self::status(run, r))
    }

    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.runs
            .iter()
            .filter(|(_, r)| r.spec.labels.contains_key(LABEL_WORKLOAD))
            .map(|(id, r)| Self::status(id, r))
            .collect())
    }

    async fn events(&self) -> Result<EventStream, EngineError> {
        let rx = self.events.subscribe();
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) => return Some((Ok(ev), rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed())
    }

    async fn logs(&self, m: &MemberRef, _follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError> {
        let s = self.state.lock().unwrap();
        let m = member(&s, m)?;
        let start = tail.map_or((0, 0), |n| if n == 0 { (m.logs.len(), 0) } else { tail_start(&m.logs, n) });
        Ok(output_stream(m.logs.clone(), start))
    }

    /// Runs nothing: echoes the command line as output and ends with exit code 0; its terminal (one
    /// with [`ExecSpec::tty`] only) takes any size.
    async fn exec(&self, target: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError> {
        let mut s = self.state.lock().unwrap();
        if member(&s, target)?.state != MemberState::Running {
            return Err(EngineError::Rejected(format!(
                "member {} of run {} is not running",
                target.member, target.run
            )));
        }
        s.calls.push(Call::Exec(target.clone(), Box::new(spec.clone())));
        // an exec takes a number, as it did when it had an id, so later runs are numbered as before
        s.next += 1;
        let out = bytes::Bytes::from(format!("{}\n", spec.command.join(" ")));
        let output = futures::stream::iter([Ok(out)]).boxed();
        Ok(ExecHandle::new(Box::pin(tokio::io::sink()), output, FakeExec { tty: spec.tty.is_some() }))
    }

    /// Where [`FakeEngine::set_rolls`] says so: the run's spec takes `spec`'s terms (its name stays).
    async fn roll(&self, run: &str, spec: &RunSpec) -> Result<bool, EngineError> {
        let mut s = self.state.lock().unwrap();
        if !s.rolls {
            return Ok(false);
        }
        let r = s.runs.get_mut(run).ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
        r.spec = RunSpec { name: r.spec.name.clone(), ..spec.clone() };
        Ok(true)
    }

    async fn endpoint(&self, target: &MemberRef, port: u16) -> Result<SocketAddr, EngineError> {
        let s = self.state.lock().unwrap();
        if member(&s, target)?.state != MemberState::Running {
            return Err(EngineError::Rejected(format!(
                "member {} of run {} is not running",
                target.member, target.run
            )));
        }
        let ip =
            s.endpoint.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::new(172, 30, 0, 2 + target.member as u8)));
        Ok(SocketAddr::new(ip, port))
    }

    /// What [`FakeEngine::set_usage`] scripted for the run (nothing: an empty list).
    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::Usage(run.to_owned()));
        let r = s.runs.get(run).ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
        Ok(r.usage.clone())
    }
}

/// A fake exec: it has already ended, with exit code 0.
#[derive(Debug)]
struct FakeExec {
    tty: bool,
}

#[async_trait]
impl ExecControl for FakeExec {
    async fn resize(&self, _cols: u16, _rows: u16) -> Result<(), EngineError> {
        if self.tty { Ok(()) } else { Err(EngineError::Rejected("the exec has no terminal".into())) }
    }

    async fn wait(&self) -> Result<i64, EngineError> {
        Ok(0)
    }
}

/// Filler lines per chunk of the log stream, re-exported for tests that count chunks.
pub const FILLER_CHUNK_LINES: u64 = FILLER_LINES_PER_CHUNK;

/// A run `name` of alice's (uid and gid 10000, home `/h`) with `members` members `name-0` … on node
/// `n1`, each with one core, 1 GiB and no GPU: `busybox:latest` with no command, labels, mounts or
/// ports, at most 512 processes. Tests set what they are about and take the rest from here
/// (`RunSpec { command, ..run_spec("r", 1) }`), so a new field of a run is added once.
pub fn run_spec(name: &str, members: u32) -> RunSpec {
    RunSpec {
        name: name.into(),
        image: "busybox:latest".into(),
        command: vec![],
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        identity: Identity {
            username: "alice".into(),
            account: "alice".into(),
            uid: 10000,
            gid: 10000,
            home: "/h".into(),
            groups: Vec::new(),
        },
        working_dir: None,
        mounts: vec![],
        network: None,
        members: (0..members)
            .map(|index| MemberSpec {
                index,
                hostname: format!("{name}-{index}"),
                node: Some("n1".into()),
                cpu_milli: 1000,
                memory_bytes: 1 << 30,
                gpus: GpuGrant::None,
                env: BTreeMap::new(),
                mounts: Vec::new(),
            })
            .collect(),
        pids_limit: 512,
        log_max_bytes: None,
        time_limit: None,
        queue: String::new(),
        ports: vec![],
        disk_bytes: None,
    }
}

#[cfg(test)]
mod tests;
