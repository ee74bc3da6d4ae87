//! The command line: global options and the client's subcommands, as `clap` parses them.

pub mod edit;
pub mod queue;
pub mod service;
pub mod stats;

use clap::{Args, Parser, Subcommand};
use gpuhub_core::Bytes;
use std::path::PathBuf;

/// Options every client command accepts, before or after the subcommand.
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalOpts {
    /// Server URL (`https://gpu.example.org`, or `host:port`: http on this machine, https elsewhere); overrides
    /// the one saved by `gpuhub login`.
    #[arg(long, env = "GPUHUB_SERVER", value_name = "URL", global = true)]
    pub server: Option<String>,
    /// Print the API's JSON instead of a table, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The client half of the `gpuhub` command line on its own: global options and a client subcommand.
///
/// The `gpuhub` binary embeds [`GlobalOpts`] and [`ClientCommand`] in its own parser; this type is for
/// tests and tools that only want the client.
#[derive(Debug, Parser)]
#[command(name = "gpuhub")]
pub struct ClientCli {
    /// Options shared by all commands.
    #[command(flatten)]
    pub global: GlobalOpts,
    /// What to do.
    #[command(subcommand)]
    pub command: ClientCommand,
}

/// The commands the client runs against a gpuhub server.
#[derive(Debug, Clone, Subcommand)]
pub enum ClientCommand {
    /// Log in and save a token to `~/.config/gpuhub/credentials.json`.
    Login(LoginArgs),
    /// Show who the saved token belongs to.
    Whoami,
    /// Save a running workspace of yours as a personal image (`gpuhub images --mine` lists them; run one
    /// with `--image NAME`).
    Save {
        /// The workspace.
        workspace: String,
        /// The personal image's name.
        #[arg(long = "as", value_name = "NAME")]
        name: String,
    },
    /// List your API tokens and browser sessions, or revoke one (`tokens rm ID`).
    Tokens {
        /// Revoke instead of listing.
        #[command(subcommand)]
        command: Option<TokensCommand>,
    },
    /// Change your password: every other token and session of yours is revoked.
    Passwd {
        /// Read the current password, then the new one, from the first two lines of standard input.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Submit a job (or a workspace) and print its name.
    Run(Box<RunArgs>),
    /// Start a service: kept running, restarted with a backoff, served at a stable URL (`service run`).
    Service {
        /// What to do.
        #[command(subcommand)]
        command: crate::cli::service::ServiceCommand,
    },
    /// List workloads.
    Ps(PsArgs),
    /// Print a workload's output.
    Logs(LogsArgs),
    /// Stop a workload.
    Stop(NameArgs),
    /// Start a stopped workspace (or an ended job) again.
    Start(NameArgs),
    /// Remove a workload.
    Rm(NameArgs),
    /// Lengthen a workload's time limit (`--extend 2h`), or change a queued one's priority or queue (admin).
    Edit(crate::cli::edit::EditArgs),
    /// Show every field of a workload (its explanation while it waits, its history, apps and URLs); `--json`
    /// for the API's JSON.
    Inspect(NameArgs),
    /// Show nodes, their free resources and who holds each GPU.
    Nodes,
    /// Show the team queues: guarantees, limits, what each holds and how much waits.
    Queues,
    /// List, create, change or remove team queues (`queue set vision --user-limit gpus=2`; admin but `ls`).
    Queue {
        /// What to do with queues.
        #[command(subcommand)]
        command: crate::cli::queue::QueueCommand,
    },
    /// List GPU reservations, or book GPUs for a team queue (admin).
    Reservations(ReservationsArgs),
    /// GPU-, CPU- and memory-hours held, by user, queue, GPU model and/or day (yours; admins see all).
    Usage(UsageArgs),
    /// Keep a running workspace from being stopped for idle GPUs for some hours (`--hours 0` withdraws).
    Keep(KeepArgs),
    /// Every workload whose GPUs sit idle: since when, and when it will be stopped (admin).
    Idle,
    /// A workload's CPU, memory and GPU use over time (means per step), from the monitor's history.
    Stats(crate::cli::stats::StatsArgs),
    /// What runs now: every GPU's use and every running member's (yours; admins see all).
    Top(crate::cli::stats::TopArgs),
    /// List the image catalog, or add to it.
    Images(ImagesArgs),
    /// List the datasets, or register and remove them (admin).
    Datasets(DatasetsArgs),
    /// Manage accounts (admin).
    User {
        /// What to do with accounts.
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage the SSH public keys that let you into your workspaces.
    SshKey {
        /// What to do with keys.
        #[command(subcommand)]
        command: SshKeyCommand,
    },
    /// Open a shell in a workspace, or run a command there, with the system `ssh` through the hub's
    /// SSH gateway; exits with ssh's exit code.
    Ssh(SshArgs),
    /// Print `~/.ssh/config` entries for your workspaces (`Host gpuhub-<name>`), for `ssh`, `scp` and
    /// editors such as VS Code Remote-SSH.
    SshConfig(SshConfigArgs),
}

/// `gpuhub keep`.
#[derive(Debug, Clone, Args)]
pub struct KeepArgs {
    /// The workload.
    pub name: String,
    /// Hours from now (at most the server's `idle.keep_max_hours`); 0 withdraws the keep.
    #[arg(long, value_name = "N")]
    pub hours: u32,
    /// Another user's workload (admin).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
}

/// `gpuhub usage`.
#[derive(Debug, Clone, Args)]
pub struct UsageArgs {
    /// Group by these, comma-separated: user, queue, model, day.
    #[arg(long, default_value = "user", value_name = "KEYS")]
    pub by: String,
    /// Start of the window: a date (`2026-11-01`, UTC) or an RFC 3339 time; default the start of this month.
    #[arg(long, value_name = "WHEN")]
    pub from: Option<String>,
    /// End of the window (exclusive); default now.
    #[arg(long, value_name = "WHEN")]
    pub to: Option<String>,
    /// Only this user's usage (admins).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Print CSV (one line per row, full precision) instead of a table.
    #[arg(long)]
    pub csv: bool,
}

/// `gpuhub login`.
#[derive(Debug, Clone, Args)]
pub struct LoginArgs {
    /// Account name.
    #[arg(long, value_name = "NAME")]
    pub user: String,
    /// Read the password from the first line of standard input instead of prompting.
    #[arg(long)]
    pub password_stdin: bool,
}

/// `gpuhub run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Workload name, unique among yours; generated when absent.
    #[arg(long, value_name = "N")]
    pub name: Option<String>,
    /// Start a long-lived workspace rather than a job.
    #[arg(long)]
    pub workspace: bool,
    /// A catalog name (see `gpuhub images`) or an image reference.
    #[arg(long, value_name = "IMG")]
    pub image: String,
    /// Whole GPUs (`2`), or a share of one GPU (`0.25`) (default 0).
    #[arg(long, value_name = "N", value_parser = parse_gpus)]
    pub gpus: Option<GpuAsk>,
    /// GPU memory a GPU share needs, such as `10GiB` (only with a share: `--gpus 0.5`).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub gpu_memory: Option<Bytes>,
    /// The team queue to charge (default: your only queue, else the default queue).
    #[arg(long, value_name = "Q")]
    pub queue: Option<String>,
    /// A resource expression the node and GPUs must satisfy, e.g. `gpu.model == "H200" && gpu.memory >= 80GiB`.
    #[arg(long, value_name = "EXPR")]
    pub constraint: Option<String>,
    /// The longest the workload may run, such as `2h` or `1h30m`; it is stopped then. A limit lets a
    /// small job start ahead of larger waiting ones (backfill).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub time_limit: Option<gpuhub_core::Seconds>,
    /// The most each member may write outside its mounts (`/tmp`, `/`), such as `50GiB` (default: the
    /// server's `container_disk`, within the queue's maximum).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub disk: Option<Bytes>,
    /// CPU cores, fractions allowed (default 1).
    #[arg(long, value_name = "C")]
    pub cpus: Option<f64>,
    /// Memory limit such as `4GiB` or `512MiB` (default 1GiB). Binary units (`GiB`, `Gi`) are powers of
    /// 1024, decimal ones (`GB`, and a bare `G` as Kubernetes reads it) powers of 1000: `4G` is 4×10⁹
    /// bytes, about 3.7GiB, not Docker's `4g`.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<Bytes>,
    /// An environment variable for the container; repeat for more.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Higher starts first (default 0; users may go down to -100, higher needs a priority class).
    #[arg(long, value_name = "P", allow_negative_numbers = true, conflicts_with = "priority_class")]
    pub priority: Option<i32>,
    /// A priority class the admin allows for the queue (`high`).
    #[arg(long, value_name = "CLASS")]
    pub priority_class: Option<String>,
    /// A web app the workload's command serves, reachable at `/w/<you>/<name>/<app>/`; repeat for more.
    #[arg(long = "app", value_name = "NAME:PORT", value_parser = parse_app)]
    pub apps: Vec<gpuhub_core::workload::AppSpec>,
    /// Mount a dataset at /datasets/NAME, read-only unless registered read-write (`gpuhub datasets`
    /// lists them); repeat for more.
    #[arg(long = "dataset", value_name = "NAME")]
    pub datasets: Vec<String>,
    /// Mount a team queue's folder read-write at /team/QUEUE (you must be a member); repeat for more.
    #[arg(long = "team", value_name = "QUEUE")]
    pub teams: Vec<String>,
    /// A gang of this many members, started together or not at all, each with the resources above and
    /// `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` (PyTorch DDP, torchrun) (default 1).
    #[arg(long, value_name = "N")]
    pub members: Option<u32>,
    /// Stream the output until the workload ends, then exit with its exit code.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Command and arguments, after `--`; the image's default when absent.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `gpuhub ps`.
#[derive(Debug, Clone, Args)]
pub struct PsArgs {
    /// Everyone's workloads (admin).
    #[arg(long, short = 'a')]
    pub all: bool,
}

/// `gpuhub logs`.
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// Keep streaming until the workload ends.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// The workload.
    pub name: String,
    /// Another user's workload (admin).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// The output of this app of the workspace (`--app lab`) instead of the workload's own.
    #[arg(long, value_name = "APP", conflicts_with = "member")]
    pub app: Option<String>,
    /// The output of this member of a gang (0-based; default 0).
    #[arg(long, value_name = "N")]
    pub member: Option<u32>,
}

/// A command that addresses one workload by name.
#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// The workload.
    pub name: String,
    /// Another user's workload (admin).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
}

/// `gpuhub images [add …]`.
#[derive(Debug, Clone, Args)]
pub struct ImagesArgs {
    /// Without a subcommand, list the catalog.
    #[command(subcommand)]
    pub command: Option<ImagesCommand>,
    /// Your personal images (saved workspaces) instead of the catalog; with `rm`, remove one of yours.
    #[arg(long, global = true)]
    pub mine: bool,
}

/// `gpuhub datasets [add … | rm NAME]`.
#[derive(Debug, Clone, Args)]
pub struct DatasetsArgs {
    /// Without a subcommand, list the datasets.
    #[command(subcommand)]
    pub command: Option<DatasetsCommand>,
}

/// Subcommands of `gpuhub datasets`.
#[derive(Debug, Clone, Subcommand)]
pub enum DatasetsCommand {
    /// Register a dataset (admin): a directory every node has, an NFS export or an S3 bucket, mounted
    /// at /datasets/NAME (read-only unless an S3 dataset is --read-write).
    Add {
        /// Its name (`imagenet`).
        name: String,
        /// The directory on the nodes (absolute), an NFS export `server:/export/path` that the engine
        /// mounts itself, or an S3 bucket or prefix `s3://bucket/prefix` that the hub mounts (with
        /// --endpoint).
        path: String,
        /// A line for people choosing it.
        #[arg(long, value_name = "D", default_value = "")]
        description: String,
        /// The S3 server of an s3:// dataset (`https://s3.example.org`, `http://10.0.0.5:9000`).
        #[arg(long, value_name = "URL")]
        endpoint: Option<String>,
        /// The S3 region, where the server wants one.
        #[arg(long, value_name = "R")]
        region: Option<String>,
        /// The S3 access key id; its secret key is read from standard input (--secret-key-stdin), else
        /// from AWS_SECRET_ACCESS_KEY, else typed at a prompt. Never on the command line.
        #[arg(long, value_name = "K")]
        access_key: Option<String>,
        /// Read the S3 secret key from the first line of standard input.
        #[arg(long, requires = "access_key")]
        secret_key_stdin: bool,
        /// Workloads may only read it (the default).
        #[arg(long, conflicts_with = "read_write")]
        read_only: bool,
        /// Workloads may write it too (S3 datasets only).
        #[arg(long)]
        read_write: bool,
    },
    /// Remove a dataset (admin); workloads already submitted keep mounting it.
    Rm {
        /// Its name.
        name: String,
    },
}

/// Subcommands of `gpuhub images`.
#[derive(Debug, Clone, Subcommand)]
pub enum ImagesCommand {
    /// Add an entry to the catalog (admin).
    Add {
        /// Catalog name (`pytorch`).
        name: String,
        /// Image reference (`pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime`).
        image: String,
        /// A line for people choosing an image.
        #[arg(long, value_name = "D", default_value = "")]
        description: String,
        /// A web app every workspace of the image starts: `NAME:PORT=COMMAND…`, where the command may use
        /// `{base_url}`, `{port}` and `{home}` (e.g. `lab:8888=jupyter lab --ServerApp.base_url={base_url}
        /// --port={port} --ServerApp.ip=0.0.0.0 --ServerApp.token= --no-browser`); repeat for more.
        #[arg(long = "app", value_name = "NAME:PORT=CMD", value_parser = parse_catalog_app)]
        apps: Vec<gpuhub_core::workload::AppSpec>,
    },
    /// Remove an entry from the catalog (admin); workloads made from it keep running.
    Rm {
        /// Catalog name.
        name: String,
    },
}

/// `gpuhub reservations [add … | rm ID]`.
#[derive(Debug, Clone, Args)]
pub struct ReservationsArgs {
    /// Without a subcommand, list the reservations that have not ended.
    #[command(subcommand)]
    pub command: Option<ReservationsCommand>,
}

/// Subcommands of `gpuhub reservations` (admin).
#[derive(Debug, Clone, Subcommand)]
pub enum ReservationsCommand {
    /// Book whole GPUs for a team queue during a window; prints the reservation's id.
    #[command(group(clap::ArgGroup::new("until").required(true).args(["end", "duration"])))]
    Add {
        /// The queue that may use the GPUs.
        #[arg(long, value_name = "Q")]
        queue: String,
        /// How many whole GPUs.
        #[arg(long, value_name = "N")]
        gpus: u32,
        /// Only GPUs of this model (`H200`).
        #[arg(long, value_name = "M")]
        model: Option<String>,
        /// A name for it (generated when absent).
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// Window start, RFC 3339 (`2026-12-01T00:00:00Z`); default now.
        #[arg(long, value_name = "TIME")]
        start: Option<chrono::DateTime<chrono::Utc>>,
        /// Window end, RFC 3339.
        #[arg(long, value_name = "TIME")]
        end: Option<chrono::DateTime<chrono::Utc>>,
        /// Window length from its start (`24h`), instead of --end.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        duration: Option<gpuhub_core::Seconds>,
    },
    /// Cancel a reservation made through the API.
    Rm {
        /// Reservation id.
        id: String,
    },
}

/// Subcommands of `gpuhub user` (admin, except where noted).
#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// Create an account.
    Add {
        /// Login name.
        name: String,
        /// Make it an admin.
        #[arg(long)]
        admin: bool,
        /// Read the password from the first line of standard input instead of prompting.
        #[arg(long)]
        password_stdin: bool,
    },
    /// List accounts.
    #[command(visible_alias = "ls")]
    List,
    /// Disable an account: its tokens are revoked, its SSH and terminal sessions closed, its running
    /// work stopped and its queued work held.
    Disable {
        /// Login name.
        name: String,
        /// Keep its running work running.
        #[arg(long)]
        keep_workloads: bool,
    },
    /// Set an account's home quota: a size (`20GiB`), `none`, or `default` (the server's own). A quota
    /// below what the home holds is refused.
    Quota {
        /// Login name.
        name: String,
        /// `20GiB`, `none` or `default`.
        quota: String,
    },
    /// Enable a disabled account.
    Enable {
        /// Login name.
        name: String,
    },
    /// Make an account an admin, or an admin a user again (the last enabled admin cannot be demoted).
    Role {
        /// Login name.
        name: String,
        /// `admin` or `user`.
        #[arg(value_parser = ["admin", "user"])]
        role: String,
    },
    /// Set an account's password (a forgotten one): its tokens and sessions are revoked.
    Password {
        /// Login name.
        name: String,
        /// Read the password from the first line of standard input instead of prompting.
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete an account with its workloads and logs; its home is archived in the data directory.
    Rm {
        /// Login name.
        name: String,
        /// Delete the home instead of archiving it.
        #[arg(long)]
        delete_home: bool,
    },
}

/// `gpuhub tokens …`.
#[derive(Debug, Clone, Subcommand)]
pub enum TokensCommand {
    /// Make an API token (for a script or CI) and print it once.
    Create {
        /// Days it is valid (1 to the server's token_days; that by default).
        #[arg(long)]
        days: Option<i64>,
    },
    /// Revoke a token or session by the id `gpuhub tokens` shows.
    Rm {
        /// The token's id.
        id: String,
    },
}

/// Subcommands of `gpuhub ssh-key`.
#[derive(Debug, Clone, Subcommand)]
pub enum SshKeyCommand {
    /// Register a public key (an OpenSSH `.pub` file such as `~/.ssh/id_ed25519.pub`); prints its
    /// fingerprint. The hub asks for proof that you hold the private key: `ssh-keygen -Y sign` signs its
    /// challenge with the private key beside the `.pub` file (or the agent's), which never leaves here.
    Add {
        /// The public key file.
        file: PathBuf,
        /// The private key to sign with (default: the public key file without `.pub`).
        #[arg(long, value_name = "FILE")]
        identity: Option<PathBuf>,
    },
    /// List your keys.
    #[command(visible_alias = "ls")]
    List,
    /// Remove a key.
    Rm {
        /// Its fingerprint, as `list` shows it (`SHA256:…`).
        fingerprint: String,
    },
}

/// `gpuhub ssh`.
#[derive(Debug, Clone, Args)]
pub struct SshArgs {
    /// The workspace.
    pub name: String,
    /// Another user's workspace (admin).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// The private key to log in with (`ssh -i`).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// An option for ssh (`-o StrictHostKeyChecking=accept-new`); repeat for more.
    #[arg(long = "option", short = 'o', value_name = "OPT")]
    pub options: Vec<String>,
    /// A command to run instead of a shell, after `--` (joined with spaces, as ssh does).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `gpuhub ssh-config`.
#[derive(Debug, Clone, Args)]
pub struct SshConfigArgs {
    /// Add `IdentityFile FILE` to every entry.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
}

/// Parses `--memory` with the platform's quantity rules.
fn parse_memory(s: &str) -> Result<Bytes, String> {
    Bytes::parse(s).map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<gpuhub_core::Seconds, String> {
    gpuhub_core::Seconds::parse(s).map_err(|e| e.to_string())
}

pub use gpuhub_core::parse::GpuAsk;

/// Parses `--gpus`: a whole number of GPUs, or a share of one GPU below 1 (`0.25`, to a thousandth).
pub(crate) fn parse_gpus(s: &str) -> Result<GpuAsk, String> {
    gpuhub_core::parse::gpus(s)
}

/// Parses one `--app NAME:PORT`.
pub(crate) fn parse_app(s: &str) -> Result<gpuhub_core::workload::AppSpec, String> {
    gpuhub_core::parse::app(s)
}

/// Parses one catalog `--app NAME:PORT=COMMAND`.
pub(crate) fn parse_catalog_app(s: &str) -> Result<gpuhub_core::workload::AppSpec, String> {
    gpuhub_core::parse::catalog_app(s)
}

/// Parses one `--env K=V`.
pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    gpuhub_core::parse::env(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<ClientCli, clap::Error> {
        ClientCli::try_parse_from(std::iter::once("gpuhub").chain(args.iter().copied()))
    }

    #[test]
    fn the_help_says_what_4g_is() {
        let help = parse(&["run", "--help"]).unwrap_err().to_string();
        assert!(help.contains("`4G` is 4×10⁹ bytes, about 3.7GiB, not Docker's `4g`"), "{help}");
        let r = |m: &str| parse(&["run", "--memory", m, "--image", "img"]).map(|c| format!("{c:?}"));
        assert!(r("4GiB").unwrap().contains(&format!("{}", 4u64 << 30)));
        assert!(r("4GB").unwrap().contains("4000000000"));
        assert!(r("4G").unwrap().contains("4000000000"));
    }

    #[test]
    fn apps() {
        let a = parse_catalog_app("lab:8888=jupyter lab --port={port}").unwrap();
        assert_eq!((a.name.as_str(), a.port, a.command.len()), ("lab", 8888, 3));
        assert!(parse_app("lab").is_err());
        assert!(parse_app("lab:http").is_err());
        assert!(parse_app("Lab:80").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        ClientCli::command().debug_assert();
    }

    /// The binary's shape: global options flattened at the top, client commands flattened beside its own.
    #[derive(Debug, Parser)]
    struct Embedding {
        #[command(flatten)]
        global: GlobalOpts,
        #[command(subcommand)]
        command: EmbeddedCommand,
    }

    #[derive(Debug, Subcommand)]
    enum EmbeddedCommand {
        Serve {
            #[arg(long)]
            config: Option<String>,
        },
        #[command(flatten)]
        Client(ClientCommand),
    }

    #[test]
    fn embeds_in_the_binary_cli() {
        Embedding::command().debug_assert();
        let e = Embedding::try_parse_from(["gpuhub", "ps", "--json", "--server", "http://s:1"]).unwrap();
        assert!(e.global.json);
        assert_eq!(e.global.server.as_deref(), Some("http://s:1"));
        assert!(matches!(e.command, EmbeddedCommand::Client(ClientCommand::Ps(_))));
        let e = Embedding::try_parse_from(["gpuhub", "serve", "--config", "x.toml"]).unwrap();
        assert!(matches!(e.command, EmbeddedCommand::Serve { config: Some(_) }));
    }

    #[test]
    fn run_parses_everything() {
        let cli = parse(&[
            "run",
            "--name",
            "train",
            "--image",
            "pytorch",
            "--gpus",
            "2",
            "--cpus",
            "0.5",
            "--memory",
            "4GiB",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--priority",
            "-5",
            "--follow",
            "--json",
            "--",
            "python",
            "-c",
            "print(1)",
        ])
        .unwrap();
        assert!(cli.global.json);
        let ClientCommand::Run(r) = cli.command else { panic!("not run") };
        assert_eq!(r.name.as_deref(), Some("train"));
        assert!(!r.workspace);
        assert_eq!(r.image, "pytorch");
        assert_eq!(r.gpus, Some(GpuAsk::Whole(2)));
        assert_eq!(r.cpus, Some(0.5));
        assert_eq!(r.memory, Some(Bytes(4 << 30)));
        assert_eq!(r.env, vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]);
        assert_eq!(r.priority, Some(-5));
        assert!(r.follow);
        assert_eq!(r.command, ["python", "-c", "print(1)"]);
    }

    #[test]
    fn run_minimal_and_workspace() {
        let cli = parse(&["run", "--workspace", "--image", "ubuntu"]).unwrap();
        let ClientCommand::Run(r) = cli.command else { panic!("not run") };
        assert!(r.workspace);
        assert!(r.command.is_empty());
        assert!(r.env.is_empty());
        assert_eq!((r.gpus, r.cpus, r.memory, r.priority), (None, None, None, None));
        assert!(parse(&["run", "--", "true"]).is_err(), "--image is required");
    }

    #[test]
    fn reservations_parse() {
        let cli = parse(&[
            "reservations",
            "add",
            "--queue",
            "vision",
            "--gpus",
            "2",
            "--model",
            "H200",
            "--start",
            "2026-12-01T00:00:00Z",
            "--duration",
            "1d",
        ])
        .unwrap();
        let ClientCommand::Reservations(ReservationsArgs {
            command: Some(ReservationsCommand::Add { gpus, duration, start, .. }),
        }) = cli.command
        else {
            panic!("not reservations add")
        };
        assert_eq!((gpus, duration), (2, Some(gpuhub_core::Seconds(86_400))));
        assert_eq!(start.unwrap().to_rfc3339(), "2026-12-01T00:00:00+00:00");
        let e = parse(&["reservations", "add", "--queue", "q", "--gpus", "1", "--start", "tomorrow"]).unwrap_err();
        assert!(e.to_string().contains("--start"), "{e}");
        let e = parse(&[
            "reservations",
            "add",
            "--queue",
            "q",
            "--gpus",
            "1",
            "--end",
            "2026-12-01T00:00:00Z",
            "--duration",
            "1h",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("cannot be used with"), "{e}");
        let e = parse(&["reservations", "add", "--queue", "q", "--gpus", "1"]).unwrap_err();
        assert!(e.to_string().contains("--end") && e.to_string().contains("--duration"), "{e}");
    }

    #[test]
    fn run_takes_scheduling_options() {
        let cli = parse(&[
            "run",
            "--image",
            "x",
            "--gpus",
            "0.25",
            "--gpu-memory",
            "10GiB",
            "--queue",
            "vision",
            "--constraint",
            "gpu.model == \"H200\"",
            "--time-limit",
            "1h30m",
            "--disk",
            "50GiB",
        ])
        .unwrap();
        let ClientCommand::Run(r) = cli.command else { panic!("not run") };
        assert_eq!(r.gpus, Some(GpuAsk::Milli(250)));
        assert_eq!(r.gpu_memory, Some(Bytes(10 << 30)));
        assert_eq!(r.queue.as_deref(), Some("vision"));
        assert_eq!(r.constraint.as_deref(), Some("gpu.model == \"H200\""));
        assert_eq!(r.time_limit, Some(gpuhub_core::Seconds(5400)));
        assert_eq!(r.disk, Some(Bytes(50 << 30)));
        assert!(parse(&["run", "--image", "x", "--disk", "lots"]).is_err(), "--disk takes a size");
        assert_eq!(parse_gpus("0.5"), Ok(GpuAsk::Milli(500)));
        assert_eq!(parse_gpus("0.001"), Ok(GpuAsk::Milli(1)));
        assert_eq!(parse_gpus("8"), Ok(GpuAsk::Whole(8)));
    }

    #[test]
    fn run_rejects_bad_values() {
        let e = parse(&["run", "--image", "x", "--env", "NOEQUALS"]).unwrap_err().to_string();
        assert!(e.contains("NOEQUALS") && e.contains("--env"), "{e}");
        let e = parse(&["run", "--image", "x", "--env", "=v"]).unwrap_err().to_string();
        assert!(e.contains("empty variable name"), "{e}");
        let e = parse(&["run", "--image", "x", "--memory", "4XB"]).unwrap_err().to_string();
        assert!(e.contains("--memory") && e.contains("unknown unit"), "{e}");
        assert!(parse(&["run", "--image", "x", "--gpus", "-1"]).is_err());
        for bad in ["1.5", "0.0001", "0.0", "many"] {
            let e = parse(&["run", "--image", "x", "--gpus", bad]);
            let Err(e) = e else { panic!("--gpus {bad} accepted") };
            assert!(e.to_string().contains("--gpus"), "{e}");
        }
        let e = parse(&["run", "--image", "x", "--time-limit", "2 weeks"]).unwrap_err().to_string();
        assert!(e.contains("--time-limit") && e.contains("unit"), "{e}");
        assert!(parse(&["run", "--image", "x", "--cpus", "many"]).is_err());
    }

    #[test]
    fn env_parser() {
        assert_eq!(parse_env("K=V").unwrap(), ("K".into(), "V".into()));
        assert_eq!(parse_env("K=").unwrap(), ("K".into(), String::new()));
        assert!(parse_env("K").unwrap_err().contains("\"K\""));
    }

    #[test]
    fn global_options_anywhere() {
        let cli = parse(&["--server", "http://a:1", "ps", "--all", "--json"]).unwrap();
        assert_eq!(cli.global.server.as_deref(), Some("http://a:1"));
        assert!(cli.global.json);
        assert!(matches!(cli.command, ClientCommand::Ps(PsArgs { all: true })));
        let cli = parse(&["login", "--server", "http://b:2", "--user", "alice", "--password-stdin"]).unwrap();
        assert_eq!(cli.global.server.as_deref(), Some("http://b:2"));
        let ClientCommand::Login(l) = cli.command else { panic!("not login") };
        assert_eq!(l.user, "alice");
        assert!(l.password_stdin);
        assert!(parse(&["login"]).is_err(), "--user is required");
    }

    #[test]
    fn workload_commands() {
        let cli = parse(&["logs", "-f", "train"]).unwrap();
        let ClientCommand::Logs(l) = cli.command else { panic!("not logs") };
        assert!(l.follow);
        assert_eq!(l.name, "train");
        for cmd in ["stop", "start", "rm", "inspect"] {
            let cli = parse(&[cmd, "w1", "--owner", "bob"]).unwrap();
            let (ClientCommand::Stop(n) | ClientCommand::Start(n) | ClientCommand::Rm(n) | ClientCommand::Inspect(n)) =
                cli.command
            else {
                panic!("{cmd}")
            };
            assert_eq!((n.name.as_str(), n.owner.as_deref()), ("w1", Some("bob")));
            assert!(parse(&[cmd]).is_err(), "{cmd} needs a name");
        }
        assert!(matches!(parse(&["nodes"]).unwrap().command, ClientCommand::Nodes));
        assert!(matches!(parse(&["whoami"]).unwrap().command, ClientCommand::Whoami));
    }

    #[test]
    fn images_and_users() {
        let cli = parse(&["images"]).unwrap();
        assert!(matches!(cli.command, ClientCommand::Images(ImagesArgs { command: None, mine: false })));
        let cli = parse(&["images", "add", "pytorch", "pytorch/pytorch:2", "--description", "torch"]).unwrap();
        let ClientCommand::Images(ImagesArgs {
            command: Some(ImagesCommand::Add { name, image, description, .. }),
            ..
        }) = cli.command
        else {
            panic!("not images add")
        };
        assert_eq!((name.as_str(), image.as_str(), description.as_str()), ("pytorch", "pytorch/pytorch:2", "torch"));

        let cli = parse(&["user", "add", "bob", "--admin", "--password-stdin"]).unwrap();
        assert!(matches!(
            cli.command,
            ClientCommand::User { command: UserCommand::Add { ref name, admin: true, password_stdin: true } } if name == "bob"
        ));
        for (sub, want) in [("disable", "bob"), ("enable", "bob"), ("rm", "bob")] {
            let cli = parse(&["user", sub, want]).unwrap();
            let ClientCommand::User { command } = cli.command else { panic!("not user") };
            let got = match command {
                UserCommand::Disable { name, .. } | UserCommand::Enable { name } | UserCommand::Rm { name, .. } => name,
                other => panic!("{other:?}"),
            };
            assert_eq!(got, want);
        }
        // list and ls alike, in every command group (the newcomer met `queue ls` beside `user list`)
        for list in ["list", "ls"] {
            assert!(matches!(
                parse(&["user", list]).unwrap().command,
                ClientCommand::User { command: UserCommand::List }
            ));
            assert!(matches!(
                parse(&["ssh-key", list]).unwrap().command,
                ClientCommand::SshKey { command: SshKeyCommand::List }
            ));
            assert!(matches!(
                parse(&["queue", list]).unwrap().command,
                ClientCommand::Queue { command: crate::cli::queue::QueueCommand::Ls }
            ));
        }
        assert!(parse(&["user"]).is_err());
    }

    #[test]
    fn ssh_commands() {
        let cli = parse(&["ssh-key", "add", "/k/id.pub"]).unwrap();
        let ClientCommand::SshKey { command: SshKeyCommand::Add { file, .. } } = cli.command else { panic!("not add") };
        assert_eq!(file, PathBuf::from("/k/id.pub"));
        assert!(matches!(
            parse(&["ssh-key", "list"]).unwrap().command,
            ClientCommand::SshKey { command: SshKeyCommand::List }
        ));
        let cli = parse(&["ssh-key", "rm", "SHA256:x/y"]).unwrap();
        assert!(
            matches!(cli.command, ClientCommand::SshKey { command: SshKeyCommand::Rm { ref fingerprint } } if fingerprint == "SHA256:x/y")
        );
        assert!(parse(&["ssh-key", "add"]).is_err());

        let cli = parse(&["ssh", "nb"]).unwrap();
        let ClientCommand::Ssh(a) = cli.command else { panic!("not ssh") };
        assert_eq!((a.name.as_str(), a.owner, a.identity, a.options.len(), a.command.len()), ("nb", None, None, 0, 0));
        let cli = parse(&[
            "ssh", "nb", "--owner", "alice", "-i", "/k/id", "-o", "A=1", "-o", "B=2", "--", "ls", "-l", "--all",
        ])
        .unwrap();
        let ClientCommand::Ssh(a) = cli.command else { panic!("not ssh") };
        assert_eq!(a.owner.as_deref(), Some("alice"));
        assert_eq!(a.identity, Some(PathBuf::from("/k/id")));
        assert_eq!(a.options, ["A=1", "B=2"]);
        assert_eq!(a.command, ["ls", "-l", "--all"]);
        assert!(parse(&["ssh"]).is_err(), "ssh needs a workspace");

        let cli = parse(&["ssh-config", "--identity", "/k/id"]).unwrap();
        let ClientCommand::SshConfig(c) = cli.command else { panic!("not ssh-config") };
        assert_eq!(c.identity, Some(PathBuf::from("/k/id")));
    }
}
