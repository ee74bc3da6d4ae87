//! A recording, in-memory [`Runtime`]: every call is recorded; containers live in a map; tests make a
//! container exit with [`FakeRuntime::exit`] and feed it log lines with [`FakeRuntime::push_log`], or
//! any amount of output made only as it is read with [`FakeRuntime::push_filler`].

use crate::*;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::broadcast;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    EnsureNetwork(String),
    Create(Box<ContainerSpec>),
    Start(String),
    Stop(String),
    Remove(String),
    Exec(String, Box<ExecSpec>),
}

#[derive(Debug)]
struct FakeContainer {
    spec: ContainerSpec,
    status: ContainerStatus,
    logs: Vec<Output>,
}

/// A piece of a fake container's output.
#[derive(Debug, Clone)]
enum Output {
    Text(bytes::Bytes),
    /// This many copies of [`FILLER_LINE`], made only as they are read.
    Filler(u64),
}

/// The line [`FakeRuntime::push_filler`] repeats: 64 bytes with its newline.
pub const FILLER_LINE: &[u8; 64] = b"gpuhub fake output: a line of filler to make a lot of output...\n";
/// Filler lines per chunk of the log stream (64 KiB).
const FILLER_LINES_PER_CHUNK: u64 = 1024;

/// Where the last `n` lines of `logs` begin: (piece, offset in it). A final newline ends the last line
/// rather than starting another.
fn tail_start(logs: &[Output], n: u64) -> (usize, u64) {
    let mut newlines = 0; // newlines seen that begin one of the wanted lines
    let mut last_byte = true;
    for (i, piece) in logs.iter().enumerate().rev() {
        match piece {
            Output::Text(t) => {
                for (at, b) in t.iter().enumerate().rev() {
                    let last = std::mem::take(&mut last_byte);
                    if *b == b'\n' && !last {
                        newlines += 1;
                        if newlines == n {
                            return (i, at as u64 + 1);
                        }
                    }
                }
            }
            Output::Filler(0) => {}
            Output::Filler(lines) => {
                // the newline ending each line begins the next one, but for the very last
                let last = std::mem::take(&mut last_byte);
                let ends = if last { lines - 1 } else { *lines };
                let wanted = n - newlines;
                if wanted <= ends {
                    let first_line = if last { lines - wanted } else { lines - wanted + 1 };
                    return (i, first_line * FILLER_LINE.len() as u64);
                }
                newlines += ends;
            }
        }
    }
    (0, 0)
}

/// The output from (piece, offset) on, as a stream made chunk by chunk.
fn output_stream(logs: Vec<Output>, (first, offset): (usize, u64)) -> LogStream {
    let chunk = bytes::Bytes::from(FILLER_LINE.repeat(FILLER_LINES_PER_CHUNK as usize));
    let pieces = logs.into_iter().enumerate().skip(first).flat_map(move |(i, piece)| {
        let skip = if i == first { offset } else { 0 };
        let chunks: Box<dyn Iterator<Item = bytes::Bytes> + Send> = match piece {
            Output::Text(t) => Box::new(std::iter::once(t.slice(skip as usize..))),
            Output::Filler(lines) => {
                let chunk = chunk.clone();
                let total = lines * FILLER_LINE.len() as u64;
                let step = chunk.len() as u64;
                Box::new(
                    (skip..total).step_by(step as usize).map(move |at| chunk.slice(..(total - at).min(step) as usize)),
                )
            }
        };
        chunks
    });
    futures::stream::iter(pieces.filter(|b| !b.is_empty()).map(Ok)).boxed()
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    containers: BTreeMap<String, FakeContainer>,
    images: BTreeSet<String>,
    networks: BTreeSet<String>,
    calls: Vec<Call>,
    /// The engine is "down": requests fail with [`RuntimeError::Unavailable`] and reach nothing.
    down: bool,
}

/// The fake runtime.
#[derive(Debug)]
pub struct FakeRuntime {
    state: Mutex<State>,
    events: broadcast::Sender<RuntimeEvent>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRuntime {
    /// An empty fake that has the image `busybox:latest`.
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(1024);
        let fake = Self { state: Mutex::new(State::default()), events };
        fake.add_image("busybox:latest");
        fake
    }

    /// Takes the engine down (`true`: every request fails with [`RuntimeError::Unavailable`], as a
    /// stopped dockerd's would) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    /// Makes an image known.
    pub fn add_image(&self, image: &str) {
        self.state.lock().unwrap().images.insert(image.to_owned());
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The spec a container was created with.
    pub fn spec(&self, id: &str) -> Option<ContainerSpec> {
        self.state.lock().unwrap().containers.get(id).map(|c| c.spec.clone())
    }

    /// Ids of containers that are running now.
    pub fn running(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.containers.iter().filter(|(_, c)| c.status == ContainerStatus::Running).map(|(id, _)| id.clone()).collect()
    }

    /// Appends output to a container's log.
    pub fn push_log(&self, id: &str, text: &str) {
        if let Some(c) = self.state.lock().unwrap().containers.get_mut(id) {
            c.logs.push(Output::Text(bytes::Bytes::copy_from_slice(text.as_bytes())));
        }
    }

    /// Appends `lines` copies of [`FILLER_LINE`] to a container's log, without holding them: they are
    /// made chunk by chunk (64 KiB) as the log is read.
    pub fn push_filler(&self, id: &str, lines: u64) {
        if let Some(c) = self.state.lock().unwrap().containers.get_mut(id) {
            c.logs.push(Output::Filler(lines));
        }
    }

    /// Makes a running container exit with `code`, as if its main process ended.
    pub fn exit(&self, id: &str, code: i64) {
        let workload = {
            let mut s = self.state.lock().unwrap();
            let Some(c) = s.containers.get_mut(id) else { return };
            c.status = ContainerStatus::Exited(code);
            c.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default()
        };
        let _ = self.events.send(RuntimeEvent::Died { id: id.to_owned(), workload, exit_code: code });
    }

    /// Removes a container behind the platform's back (no event), as `docker rm -f` by hand would… with one.
    pub fn vanish(&self, id: &str) {
        let removed = self.state.lock().unwrap().containers.remove(id);
        if let Some(c) = removed {
            let workload = c.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
            let _ = self.events.send(RuntimeEvent::Destroyed { id: id.to_owned(), workload });
        }
    }

    fn info(id: &str, c: &FakeContainer) -> ContainerInfo {
        ContainerInfo {
            id: id.to_owned(),
            name: c.spec.name.clone(),
            labels: c.spec.labels.clone(),
            status: c.status,
            ip: (c.status == ContainerStatus::Running).then(|| "172.30.0.2".to_owned()),
        }
    }
}

/// Fails as an unreachable engine does while the fake is down.
fn up(s: &State) -> Result<(), RuntimeError> {
    if s.down { Err(RuntimeError::Unavailable("the fake engine is down".into())) } else { Ok(()) }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn image_exists(&self, image: &str) -> Result<bool, RuntimeError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.images.contains(image))
    }

    async fn ensure_network(&self, name: &str, _labels: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::EnsureNetwork(name.to_owned()));
        s.networks.insert(name.to_owned());
        Ok(())
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut s = self.state.lock().unwrap();
        up(&s)?;
        s.calls.push(Call::Create(Box::new(spec.clone())));
        if !s.images.contains(&spec.image) {
            return Err(RuntimeError::ImageNotFound(spec.image.clone()));
        }
        if s.containers.values().any(|c| c.spec.name == spec.name) {
            return Err(RuntimeError::Rejected(format!("name {} in use", spec.name)));
        }
        s.next += 1;
        let id = format!("fake{:012}", s.next);
        s.containers.insert(
            id.clone(),
            FakeContainer { spec: spec.clone(), status: ContainerStatus::Created, logs: Vec::new() },
        );
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        let workload = {
            let mut s = self.state.lock().unwrap();
            up(&s)?;
            s.calls.push(Call::Start(id.to_owned()));
            let c = s.containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
            c.status = ContainerStatus::Running;
            c.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default()
        };
        let _ = self.events.send(RuntimeEvent::Started { id: id.to_owned(), workload });
        Ok(())
    }

    async fn stop(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        let running = {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Call::Stop(id.to_owned()));
            let c = s.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
            c.status == ContainerStatus::Running
        };
        if running {
            self.exit(id, 137);
        }
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let c = {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Call::Remove(id.to_owned()));
            s.containers.remove(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?
        };
        let workload = c.spec.labels.get(LABEL_WORKLOAD).cloned().unwrap_or_default();
        let _ = self.events.send(RuntimeEvent::Destroyed { id: id.to_owned(), workload });
        Ok(())
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let s = self.state.lock().unwrap();
        let c = s.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        Ok(Self::info(id, c))
    }

    async fn list_managed(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let s = self.state.lock().unwrap();
        up(&s)?;
        Ok(s.containers
            .iter()
            .filter(|(_, c)| c.spec.labels.contains_key(LABEL_WORKLOAD))
            .map(|(id, c)| Self::info(id, c))
            .collect())
    }

    async fn logs(&self, id: &str, _follow: bool, tail: Option<u64>) -> Result<LogStream, RuntimeError> {
        let s = self.state.lock().unwrap();
        let c = s.containers.get(id).ok_or_else(|| RuntimeError::NotFound(id.to_owned()))?;
        let start = tail.map_or((0, 0), |n| if n == 0 { (c.logs.len(), 0) } else { tail_start(&c.logs, n) });
        Ok(output_stream(c.logs.clone(), start))
    }

    /// Runs nothing: echoes the command line as output and ends with exit code 0.
    async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecHandle, RuntimeError> {
        let mut s = self.state.lock().unwrap();
        let c = s.containers.get(container).ok_or_else(|| RuntimeError::NotFound(container.to_owned()))?;
        if c.status != ContainerStatus::Running {
            return Err(RuntimeError::Rejected(format!("container {container} is not running")));
        }
        s.calls.push(Call::Exec(container.to_owned(), Box::new(spec.clone())));
        s.next += 1;
        let out = bytes::Bytes::from(format!("{}\n", spec.command.join(" ")));
        Ok(ExecHandle {
            id: format!("exec{}", s.next),
            input: Box::pin(tokio::io::sink()),
            output: futures::stream::iter([Ok(out)]).boxed(),
        })
    }

    async fn exec_resize(&self, _exec_id: &str, _cols: u16, _rows: u16) -> Result<(), RuntimeError> {
        Ok(())
    }

    async fn exec_exit_code(&self, _exec_id: &str) -> Result<Option<i64>, RuntimeError> {
        Ok(Some(0))
    }

    async fn events(&self) -> Result<EventStream, RuntimeError> {
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
}

#[cfg(test)]
mod tests {

    use super::*;

    fn spec(name: &str) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            image: "busybox:latest".into(),
            command: vec!["true".into()],
            env: BTreeMap::new(),
            labels: BTreeMap::from([(LABEL_WORKLOAD.to_owned(), "w1".to_owned())]),
            user: "10000:10000".into(),
            hostname: None,
            working_dir: None,
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
            pids_limit: 512,
            mounts: vec![],
            network: None,
            gpus: GpuAttach::None,
            log_max_bytes: None,
        }
    }

    #[tokio::test]
    async fn records_and_emits() {
        let rt = FakeRuntime::new();
        let mut ev = rt.events().await.unwrap();
        let id = rt.create(&spec("a")).await.unwrap();
        assert!(matches!(rt.create(&spec("a")).await, Err(RuntimeError::Rejected(_))));
        rt.start(&id).await.unwrap();
        assert_eq!(ev.next().await.unwrap().unwrap(), RuntimeEvent::Started { id: id.clone(), workload: "w1".into() });
        rt.exit(&id, 3);
        assert_eq!(
            ev.next().await.unwrap().unwrap(),
            RuntimeEvent::Died { id: id.clone(), workload: "w1".into(), exit_code: 3 }
        );
        assert_eq!(rt.inspect(&id).await.unwrap().status, ContainerStatus::Exited(3));
        let mut bad = spec("b");
        bad.image = "nope".into();
        assert!(matches!(rt.create(&bad).await, Err(RuntimeError::ImageNotFound(_))));
        assert_eq!(rt.calls().len(), 4);
    }

    async fn read(rt: &FakeRuntime, id: &str, tail: Option<u64>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut s = rt.logs(id, false, tail).await.unwrap();
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn filler_is_made_as_read_and_tail_counts_lines() {
        let rt = FakeRuntime::new();
        let id = rt.create(&spec("a")).await.unwrap();
        rt.push_log(&id, "one\ntwo\n");
        rt.push_filler(&id, 3000);
        rt.push_log(&id, "last\n");
        let all = read(&rt, &id, None).await;
        assert_eq!(all.len(), 8 + 3000 * 64 + 5);
        let mut s = rt.logs(&id, false, None).await.unwrap();
        assert_eq!(s.next().await.unwrap().unwrap(), "one\ntwo\n");
        assert_eq!(s.next().await.unwrap().unwrap().len(), 1024 * 64, "filler comes in 64 KiB chunks");
        for n in [0, 1, 2, 5, 3000, 3001, 3002, 3003, 9999] {
            let want: Vec<&[u8]> = all.split_inclusive(|b| *b == b'\n').collect();
            let want = want[want.len().saturating_sub(n as usize)..].concat();
            assert_eq!(read(&rt, &id, Some(n)).await, want, "tail {n}");
        }
        rt.push_log(&id, "no newline");
        assert_eq!(read(&rt, &id, Some(2)).await, b"last\nno newline");
    }
}
