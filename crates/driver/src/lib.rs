//! The engine interface: what gpuhub needs from whatever runs its workloads — one Docker host, a Slurm
//! cluster, (next) Kubernetes — and [`fake::FakeEngine`], a recording fake for tests of everything above.
//!
//! The interface speaks in gpuhub's terms at the level of **runs** and their **members**, never of one
//! engine's objects: a workload's run is one or more members started together (a gang), each with its
//! resources, GPUs, hostname and rank. An engine says what it can do ([`Capabilities`]): whether gpuhub's
//! scheduler places members on nodes ([`Placement::Hub`], Docker) or the engine does ([`Placement::Engine`],
//! Slurm), whether it can exec into a member, reach a member's port, mount volumes. Each engine crate
//! translates: Docker makes one container per member, Slurm one job with a step per member, Kubernetes
//! would make one pod per member.
//!
//! Contract every engine keeps:
//! - [`Engine::submit`] starts all members or none (a failed submit leaves nothing behind);
//! - every member gets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` (the PyTorch DDP /
//!   torchrun conventions) and `GPUHUB_MEMBER`, filled in by the engine, which knows the topology;
//! - runs are found again by their labels ([`LABEL_WORKLOAD`], [`LABEL_INSTANCE`]) after gpuhub restarts
//!   ([`Engine::list_runs`]), and a run that ended meanwhile still reports its members' exit codes;
//! - members run as the spec's [`Identity`], never root, with exactly the resources and GPUs granted.

pub mod cgroup;
pub mod clock;
mod exec;
pub mod fake;
pub mod inventory;
pub mod settings;

pub use exec::{ExecControl, ExecHandle, ExecInput, ExecProcess, OutputEnd, watch_end};

use async_trait::async_trait;
use futures::stream::BoxStream;
use gpuhub_core::node::NodeCapacity;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Label naming the owner's username on everything gpuhub makes in an engine.
pub const LABEL_OWNER: &str = "gpuhub.owner";
/// Label naming the workload id.
pub const LABEL_WORKLOAD: &str = "gpuhub.workload";
/// Label naming the gpuhub installation: a server adopts, stops or removes only runs carrying its own
/// instance id, so several servers can share one engine.
pub const LABEL_INSTANCE: &str = "gpuhub.instance";
/// Label naming the run a member belongs to.
pub const LABEL_RUN: &str = "gpuhub.run";
/// Label naming a member's index in its run.
pub const LABEL_MEMBER: &str = "gpuhub.member";
/// Label naming how many members the run has.
pub const LABEL_MEMBERS: &str = "gpuhub.members";
/// Label an engine adds to the status of a run it ended itself, not the run's own code (never given at
/// submit): its value says how ([`ENDED_BY_NODE_FAIL`]).
pub const LABEL_ENDED_BY: &str = "gpuhub.ended-by";
/// [`LABEL_ENDED_BY`]'s value for a run whose node failed under it (Slurm's `NODE_FAIL`).
pub const ENDED_BY_NODE_FAIL: &str = "node-fail";

/// What can go wrong talking to an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The run, member or exec does not exist (any more).
    #[error("{0} not found")]
    NotFound(String),
    /// The image is not present in (or reachable by) the engine.
    #[error("image {0} not found in the container engine")]
    ImageNotFound(String),
    /// The engine refused the request as invalid.
    #[error("container engine refused the request: {0}")]
    Rejected(String),
    /// The engine failed a request it received.
    #[error("container engine: {0}")]
    Engine(String),
    /// The engine could not be reached (not running, restarting, its socket gone, its controller down):
    /// the request may succeed later, and nothing was done.
    #[error("container engine unavailable: {0}")]
    Unavailable(String),
    /// The engine cannot do this at all (see [`Capabilities`]).
    #[error("not supported by the {engine} engine: {what}")]
    Unsupported {
        /// The engine's name.
        engine: &'static str,
        /// What was asked.
        what: String,
    },
}

/// Who places members on nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// gpuhub's scheduler decides node and GPUs; the engine runs exactly there (Docker).
    Hub,
    /// The engine queues and places (Slurm): gpuhub submits, follows, and explains with the engine's
    /// own pending reason.
    Engine,
}

/// What an engine can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Who places members.
    pub placement: Placement,
    /// Whether one run's members may span nodes.
    pub multi_node: bool,
    /// The most members one run may have.
    pub max_members: u32,
    /// Whether [`Engine::exec`] works (terminals, SSH, apps started inside a member).
    pub exec: bool,
    /// Whether [`Engine::endpoint`] reaches a member's port (the proxy and SSH port forwarding).
    pub ingress: bool,
    /// Whether [`RunSpec::mounts`] are honoured.
    pub volumes: bool,
    /// Whether the engine mounts NFS exports itself ([`Mount::nfs`]).
    pub nfs: bool,
    /// Whether [`Engine::pull`] brings images in from registries.
    pub pull: bool,
    /// Whether a member may hold a share of a GPU.
    pub gpu_shares: bool,
    /// Whether members share their node's network (Slurm, where a container has no address of its
    /// own): then the ports apps listen on must differ between runs that may meet on a node, and
    /// gpuhub assigns them ([`RunSpec::ports`], `GPUHUB_PORT`); else each member has its own address.
    pub shared_ports: bool,
    /// Whether [`Engine::usage`] measures members' CPU time, memory and processes.
    pub usage: bool,
}

/// A node as an engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineNode {
    /// Its capacity and GPUs (an engine that does not know GPU UUIDs names them `<node>/gpu<i>`).
    pub capacity: NodeCapacity,
    /// Whether it takes work now.
    pub up: bool,
    /// The engine's word on its state (`idle`, `mixed`, `drained: maintenance`).
    pub state: String,
}

/// The user a run's members run as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// The gpuhub username.
    pub username: String,
    /// The account on the engine's nodes (a Slurm cluster account; the username on Docker).
    pub account: String,
    pub uid: u32,
    pub gid: u32,
    /// The home directory inside a member (`/home/alice`).
    pub home: String,
    /// Supplementary groups the members' processes carry (the GIDs of the team folders they mount).
    pub groups: Vec<u32>,
}

impl Identity {
    /// `uid:gid`, as engines take it.
    pub fn user(&self) -> String {
        format!("{}:{}", self.uid, self.gid)
    }
}

/// How far a pull is (the API's view of it: engines report in that shape).
pub use gpuhub_core::pull::PullView as PullProgress;

/// Credentials for a private registry. `Debug` prints no password.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    /// The registry (`registry.example.org:5000`).
    pub server: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAuth")
            .field("server", &self.server)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A bind mount (a volume, in engine-neutral terms: each engine maps it to its own mounts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Path on the node (host); with [`Mount::nfs`], the export's path on that server.
    pub source: String,
    /// Path in the member.
    pub target: String,
    pub read_only: bool,
    /// The NFS server `source` is exported from, which the engine mounts itself (Docker: a volume of
    /// its local driver with `type=nfs`); `None`: a path on the node.
    pub nfs: Option<String>,
}

/// The GPUs one member is granted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuGrant {
    /// None: the member sees no GPU.
    #[default]
    None,
    /// Whole GPUs, exclusive: `uuids` when gpuhub placed them ([`Placement::Hub`]), empty when the
    /// engine picks `count`.
    Whole { count: u32, uuids: Vec<String> },
    /// A share of one GPU in milli-GPU, with the GPU memory it may use: `uuid` when gpuhub placed it.
    Share { milli: u32, memory: Option<u64>, uuid: Option<String> },
}

impl GpuGrant {
    /// The GPU UUIDs placed by gpuhub (empty when the engine places).
    pub fn uuids(&self) -> Vec<String> {
        match self {
            GpuGrant::None => Vec::new(),
            GpuGrant::Whole { uuids, .. } => uuids.clone(),
            GpuGrant::Share { uuid, .. } => uuid.iter().cloned().collect(),
        }
    }
}

/// One member of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    /// 0-based; also its `RANK`.
    pub index: u32,
    /// Its hostname (`train-0`); other members reach it by this name where the engine gives names.
    pub hostname: String,
    /// The node gpuhub placed it on ([`Placement::Hub`]); `None` when the engine places.
    pub node: Option<String>,
    /// CPU quota in milli-CPUs.
    pub cpu_milli: u64,
    /// Memory limit in bytes; swap equal (none).
    pub memory_bytes: u64,
    pub gpus: GpuGrant,
    /// Variables for this member only (a share's limits); the engine adds the rank variables.
    pub env: BTreeMap<String, String>,
    /// Mounts for this member only, after the run's [`RunSpec::mounts`] (the MPS daemon of the GPU it
    /// holds a share of: its pipe directory, and its shared memory as `/dev/shm`, which replaces the
    /// engine's own). Empty where the engine places (gpuhub does not know the GPU beforehand).
    pub mounts: Vec<Mount>,
}

/// Everything needed to start a run. The engine applies all of it or fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// A name for the run, unique in the engine (`gpuhub-alice-train-0123abcd`).
    pub name: String,
    pub image: String,
    /// Command; empty for the image's default.
    pub command: Vec<String>,
    /// Variables every member gets.
    pub env: BTreeMap<String, String>,
    /// gpuhub's labels ([`LABEL_OWNER`], [`LABEL_WORKLOAD`], [`LABEL_INSTANCE`], kind, name).
    pub labels: BTreeMap<String, String>,
    pub identity: Identity,
    pub working_dir: Option<String>,
    pub mounts: Vec<Mount>,
    /// The network a single-host engine attaches a one-member run to (the owner's own); a run of
    /// several members gets a network private to the run instead.
    pub network: Option<String>,
    pub members: Vec<MemberSpec>,
    /// Processes per member.
    pub pids_limit: i64,
    /// About how much output the engine keeps per member, at most; `None`: the engine's default.
    pub log_max_bytes: Option<u64>,
    /// The run-time limit, for engines that enforce one themselves (Slurm's `--time`).
    pub time_limit: Option<Duration>,
    /// The gpuhub queue it is charged to (engines map queues to partitions, accounts, QOS).
    pub queue: String,
    /// Container ports the run's apps listen on.
    pub ports: Vec<u16>,
    /// The most each member may write outside its mounts (its container's writable layer), in bytes;
    /// `None`: no cap. Only an engine whose [`Engine::disk_cap`] is `Ok` is given one.
    pub disk_bytes: Option<u64>,
}

/// A member of a run, as addressed by logs, exec and endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberRef {
    /// The engine's id of the run ([`RunStatus::id`]).
    pub run: String,
    pub member: u32,
}

impl MemberRef {
    /// Member `member` of run `run`.
    pub fn new(run: impl Into<String>, member: u32) -> Self {
        Self { run: run.into(), member }
    }
}

/// Where a member is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Waiting in the engine (not placed, or being created).
    Pending,
    /// Its main process runs.
    Running,
    /// Its main process ended with this code.
    Exited(i64),
}

/// A member as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub index: u32,
    /// The engine's own id (a container id; `<jobid>.<step>` on Slurm).
    pub engine_id: String,
    /// The node it runs on, once placed.
    pub node: Option<String>,
    pub state: MemberState,
    /// The GPUs it actually holds (UUIDs, or `<node>/gpu<i>` where the engine knows no UUIDs).
    pub gpus: Vec<String>,
}

/// Why an engine-placed run waits, in the engine's words translated to gpuhub's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingInfo {
    /// The kind of obstacle, in gpuhub's vocabulary (`resources`, `priority`, `queue-limit`,
    /// `unschedulable`, `held`, `dependency`) or the engine's own word.
    pub reason: String,
    /// One line for people, naming the engine's reason.
    pub message: String,
    /// 1-based position among the engine's pending work of its partition, when known.
    pub position: Option<u32>,
    /// When the engine expects it to start, when it says.
    pub estimated_start: Option<chrono::DateTime<chrono::Utc>>,
}

/// A run as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStatus {
    /// The engine's id of the run (Docker: the run's name; Slurm: the job id).
    pub id: String,
    /// gpuhub's labels given at submit.
    pub labels: BTreeMap<String, String>,
    /// How many members the run was submitted with.
    pub size: u32,
    /// The members the engine has (fewer than `size` only for a run cut short, e.g. a crash mid-submit).
    pub members: Vec<MemberStatus>,
    /// Why it waits, while the engine has not started it.
    pub pending: Option<PendingInfo>,
}

impl RunStatus {
    /// The workload id it carries.
    pub fn workload(&self) -> Option<&str> {
        self.labels.get(LABEL_WORKLOAD).map(String::as_str)
    }

    /// How the engine itself ended it, when it did ([`LABEL_ENDED_BY`]).
    pub fn ended_by_engine(&self) -> Option<&str> {
        self.labels.get(LABEL_ENDED_BY).map(String::as_str)
    }

    /// Whether every member exists and has ended.
    pub fn ended(&self) -> bool {
        self.members.len() as u32 == self.size && self.members.iter().all(|m| matches!(m.state, MemberState::Exited(_)))
    }
}

/// Something that happened to a member of a gpuhub run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// Its main process started.
    Started { run: String, workload: String, member: u32 },
    /// Its main process ended.
    Exited { run: String, workload: String, member: u32, exit_code: i64 },
    /// It was removed (behind gpuhub's back when gpuhub did not ask).
    Removed { run: String, workload: String, member: u32 },
}

impl EngineEvent {
    /// The run and workload it concerns.
    pub fn run(&self) -> (&str, &str) {
        match self {
            EngineEvent::Started { run, workload, .. }
            | EngineEvent::Exited { run, workload, .. }
            | EngineEvent::Removed { run, workload, .. } => (run, workload),
        }
    }
}

/// What a running member uses now, as [`Engine::usage`] measures it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberUsage {
    /// The member's index in its run ([`MemberSpec::index`]).
    pub index: u32,
    /// CPU time (user and system) used by the member's processes since it started, in seconds;
    /// cumulative, so a rate is the difference of two samples over the time between them.
    pub cpu_seconds: f64,
    /// Memory in use by the member: its working set (usage less the inactive file cache, as
    /// `docker stats` shows it), so reclaimable page cache does not count.
    pub memory_used: gpuhub_core::Bytes,
    /// The member's memory limit; `None` when it has none.
    pub memory_limit: Option<gpuhub_core::Bytes>,
    /// Host PIDs of the member's processes, where the engine knows them (to attribute GPU processes
    /// to members); may be empty.
    pub pids: Vec<u32>,
}

/// A chunk of output.
pub type LogStream = BoxStream<'static, Result<bytes::Bytes, EngineError>>;
/// The engine's event feed.
pub type EventStream = BoxStream<'static, Result<EngineEvent, EngineError>>;

/// What to run with [`Engine::exec`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecSpec {
    pub command: Vec<String>,
    /// `uid:gid`.
    pub user: String,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    /// Allocate a pseudo-terminal of this size (columns, rows).
    pub tty: Option<(u16, u16)>,
}

/// An engine: Docker on one host, a Slurm cluster, … Implementations are shared behind an `Arc`.
#[async_trait]
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Its name (`docker`, `slurm`, `fake`).
    fn name(&self) -> &'static str;
    /// What it can do.
    fn capabilities(&self) -> Capabilities;
    /// Whether it caps what each member writes outside its mounts at [`RunSpec::disk_bytes`] (the
    /// container's writable layer), so that no run can fill the node's disk; `Err`: why it cannot here,
    /// in a sentence naming what it lacks. Engines cannot unless they say so.
    fn disk_cap(&self) -> Result<(), String> {
        Err(format!("the {} engine cannot cap what a container writes", self.name()))
    }
    /// Its nodes, their GPUs and labels.
    async fn inventory(&self) -> Result<Vec<EngineNode>, EngineError>;
    /// Whether members can run this image (present, or preparable, on the engine's nodes).
    async fn image_exists(&self, image: &str) -> Result<bool, EngineError>;
    /// Saves member `member`'s filesystem as the image `reference` (a workspace saved as a personal
    /// image); returns the image's size in bytes. Engines that cannot say so.
    async fn commit(&self, member: &MemberRef, reference: &str) -> Result<u64, EngineError> {
        let _ = member;
        Err(EngineError::Unsupported { engine: self.name(), what: format!("saving a workspace as {reference}") })
    }

    /// Removes the image `reference` from the engine (a personal image deleted); a missing one is
    /// `NotFound`.
    async fn remove_image(&self, reference: &str) -> Result<(), EngineError> {
        Err(EngineError::Unsupported { engine: self.name(), what: format!("removing the image {reference}") })
    }

    /// Every tag the engine knows the image `image` (a reference or an image ID) by, as the engine
    /// spells them (`repo/name:tag`): how a submission naming a personal image by another name is told
    /// apart. Empty when the engine lacks it; engines that cannot say answer empty.
    async fn image_tags(&self, image: &str) -> Result<Vec<String>, EngineError> {
        let _ = image;
        Ok(Vec::new())
    }

    /// Removes a user's network, `network` (what [`RunSpec::network`] named for their runs), once none of
    /// their runs is left (the user is deleted); only a network carrying every label of `labels` (its
    /// owner and installation) is removed, so another installation's never is. A missing one is fine.
    /// Engines without networks of their own per user have nothing to remove.
    async fn remove_user_network(&self, network: &str, labels: &BTreeMap<String, String>) -> Result<(), EngineError> {
        let _ = (network, labels);
        Ok(())
    }

    /// Pulls `image` from its registry into the engine (with `auth` for a private registry), telling
    /// `progress` how far it is as it goes. A registry's refusal is [`EngineError::Rejected`] or
    /// [`EngineError::ImageNotFound`] in the registry's words. Engines that cannot pull say so.
    async fn pull(
        &self,
        image: &str,
        auth: Option<&RegistryAuth>,
        progress: &(dyn Fn(PullProgress) + Send + Sync),
    ) -> Result<(), EngineError> {
        let _ = (auth, progress);
        Err(EngineError::Unsupported { engine: self.name(), what: format!("pulling {image}") })
    }
    /// Starts a run: every member or none. Returns the run as it stands (members may still be
    /// pending where the engine places).
    async fn submit(&self, spec: &RunSpec) -> Result<RunStatus, EngineError>;
    /// Stops every member (SIGTERM, then SIGKILL after `grace`) or takes a waiting run out of the
    /// engine's queue; returns once it has. Cancelling an ended run is fine.
    async fn cancel(&self, run: &str, grace: Duration) -> Result<(), EngineError>;
    /// Removes what the run left in the engine (containers, networks, job records gpuhub owns).
    /// Removing a missing run is `NotFound`.
    async fn remove(&self, run: &str) -> Result<(), EngineError>;
    /// One run, now.
    async fn observe(&self, run: &str) -> Result<RunStatus, EngineError>;
    /// Every run carrying [`LABEL_WORKLOAD`] the engine has, running, waiting or ended (not removed).
    async fn list_runs(&self) -> Result<Vec<RunStatus>, EngineError>;
    /// Member events of gpuhub's runs, from now on.
    async fn events(&self) -> Result<EventStream, EngineError>;
    /// A member's stdout and stderr, chunk by chunk as the engine delivers them (never collected); with
    /// `follow`, until it ends; with `tail`, only the last `tail` lines.
    async fn logs(&self, member: &MemberRef, follow: bool, tail: Option<u64>) -> Result<LogStream, EngineError>;
    /// Starts a process in a running member, attached to its stdin and output; its handle resizes its
    /// terminal and waits for its exit code (the only way to: an exec has no id to address it by).
    async fn exec(&self, member: &MemberRef, spec: &ExecSpec) -> Result<ExecHandle, EngineError>;
    /// The address the hub connects to for `port` of a running member (the proxy, SSH forwarding).
    async fn endpoint(&self, member: &MemberRef, port: u16) -> Result<SocketAddr, EngineError>;
    /// What each running member of a run uses now (CPU time, memory, processes), ordered by member
    /// index. Members that are not running (waiting, ended, or ending while measured) are left out, so
    /// a run that has ended answers an empty list; a run the engine does not have is `NotFound`.
    /// Engines that cannot measure (see [`Capabilities::usage`]) answer `Unsupported`.
    async fn usage(&self, run: &str) -> Result<Vec<MemberUsage>, EngineError> {
        let _ = run;
        Err(EngineError::Unsupported { engine: self.name(), what: "usage".into() })
    }
    /// Lets a run go on until `limit` from its start: engines that hold the run's time limit themselves
    /// ([`RunSpec::time_limit`], Slurm's `--time`) lengthen it; where gpuhub alone enforces it (the
    /// default) there is nothing to change.
    async fn extend_time_limit(&self, run: &str, limit: Duration) -> Result<(), EngineError> {
        let _ = (run, limit);
        Ok(())
    }
    /// Rolls service run `run` over to `spec`'s terms itself, keeping the run (a Kubernetes
    /// Deployment's rollout: the new member starts beside the old one, which serves until the new one
    /// is ready); `false` where the engine does not (the default: the hub rolls, or stops and starts).
    async fn roll(&self, run: &str, spec: &RunSpec) -> Result<bool, EngineError> {
        let _ = (run, spec);
        Ok(false)
    }
}

/// The rank variables of member `index` of a run of `size`, with `master` the address of member 0
/// (PyTorch DDP / torchrun conventions; `LOCAL_RANK` 0 since each member is its own container or step).
pub fn rank_env(index: u32, size: u32, master: &str, master_port: u16) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("RANK".to_owned(), index.to_string()),
        ("WORLD_SIZE".to_owned(), size.to_string()),
        ("LOCAL_RANK".to_owned(), "0".to_owned()),
        ("MASTER_ADDR".to_owned(), master.to_owned()),
        ("MASTER_PORT".to_owned(), master_port.to_string()),
        ("GPUHUB_MEMBER".to_owned(), index.to_string()),
    ])
}

/// The port members rendezvous on unless the run's environment names another (`MASTER_PORT`).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_grants() {
        let env = rank_env(1, 2, "train-0", 29500);
        assert_eq!((env["RANK"].as_str(), env["WORLD_SIZE"].as_str()), ("1", "2"));
        assert_eq!(env["MASTER_ADDR"], "train-0");
        assert_eq!(GpuGrant::Whole { count: 2, uuids: vec!["a".into(), "b".into()] }.uuids(), ["a", "b"]);
        assert!(GpuGrant::Share { milli: 500, memory: None, uuid: None }.uuids().is_empty());
        let run = RunStatus {
            id: "r".into(),
            labels: BTreeMap::from([(LABEL_WORKLOAD.to_owned(), "w".to_owned())]),
            size: 2,
            members: vec![MemberStatus {
                index: 0,
                engine_id: "c".into(),
                node: None,
                state: MemberState::Exited(0),
                gpus: vec![],
            }],
            pending: None,
        };
        assert_eq!(run.workload(), Some("w"));
        assert!(!run.ended(), "a member is missing");
    }
}
