//! Workload commands: `run`, `ps`, `logs`, `stop`, `start`, `rm`, `inspect`.

use super::{Out, print_json};
use crate::cli::{GpuAsk, RunArgs};
use crate::http::{Api, decode};
use crate::table::{Table, age, size, truncate};
use crate::{ClientError, Context};
use chrono::{DateTime, Utc};
use gpuhub_api::{CreateWorkloadRequest, ResourceRequest, WorkloadView};
use gpuhub_core::Bytes;
use gpuhub_core::workload::{WorkloadKind, WorkloadState};
use reqwest::Method;
use serde_json::Value;

/// The longest REASON shown by `ps`.
const REASON_WIDTH: usize = 40;

/// The request `gpuhub run` sends for these arguments.
pub(crate) fn create_request(args: &RunArgs) -> CreateWorkloadRequest {
    CreateWorkloadRequest {
        name: args.name.clone(),
        kind: if args.workspace { WorkloadKind::Workspace } else { WorkloadKind::Job },
        image: args.image.clone(),
        command: (!args.command.is_empty()).then(|| args.command.clone()),
        env: args.env.iter().cloned().collect(),
        resources: ResourceRequest {
            cpus: args.cpus,
            memory: args.memory,
            gpus: match args.gpus {
                Some(GpuAsk::Whole(n)) => Some(n),
                _ => None,
            },
            gpu_milli: match args.gpus {
                Some(GpuAsk::Milli(m)) => Some(m),
                _ => None,
            },
            gpu_memory: args.gpu_memory,
        },
        priority: args.priority,
        priority_class: args.priority_class.clone(),
        apps: args.apps.clone(),
        queue: args.queue.clone(),
        constraint: args.constraint.clone(),
        runtime_limit: args.time_limit,
        members: args.members,
        datasets: args.datasets.clone(),
        teams: args.teams.clone(),
        service: None,
        disk: args.disk,
    }
}

/// `gpuhub run`: submits, prints the name (or the JSON), and with `--follow` streams the output and
/// returns the workload's exit code.
pub(crate) async fn run(ctx: &Context, api: &Api, json: bool, args: RunArgs, out: Out<'_>) -> Result<i32, ClientError> {
    let req = create_request(&args);
    let v = api.send_json(Method::POST, &["workloads"], &req).await?.unwrap_or(Value::Null);
    let w: WorkloadView = decode(&v, api.url(&["workloads"], &[]).as_str())?;
    if json {
        print_json(out, &v)?;
    } else {
        writeln!(out, "{}", w.name)?;
    }
    out.flush()?;
    if !args.follow {
        return Ok(0);
    }
    if w.state == gpuhub_core::workload::WorkloadState::Pulling {
        show_pull(ctx, api, &w).await?;
    }
    follow_to_end(ctx, api, &w.name, out).await
}

/// While the workload's image is pulled: a progress bar on standard error (a line per change off a
/// terminal), from the submission's answer on, until it is no longer `pulling`; then what the pull
/// fetched, as the workload recorded it (however fast the pull was).
async fn show_pull(ctx: &Context, api: &Api, submitted: &WorkloadView) -> Result<(), ClientError> {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    let mut last = String::new();
    let mut w = submitted.clone();
    loop {
        if w.state != gpuhub_core::workload::WorkloadState::Pulling {
            if tty && !last.is_empty() {
                eprint!("\r\x1b[2K");
            }
            if let Some(line) = pull_end_line(&w) {
                eprintln!("{line}");
            }
            return Ok(());
        }
        let line = pull_line(&w);
        if line != last {
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
            last = line;
        }
        tokio::time::sleep(ctx.poll_interval.min(std::time::Duration::from_millis(250))).await;
        w = get(api, &submitted.name, None).await?;
    }
}

/// `IMAGE: pulled 24MiB (2 layers); queued`: the message of the state its pull ended in, from its
/// history (a failed pull's message names the image and the registry's words itself).
pub(crate) fn pull_end_line(w: &WorkloadView) -> Option<String> {
    use gpuhub_core::workload::WorkloadState;
    let after = w.history.iter().rposition(|e| e.state == WorkloadState::Pulling)? + 1;
    let end = w.history.get(after)?;
    let message = end.message.as_deref().unwrap_or(end.state.as_str());
    Some(if end.state == WorkloadState::Queued { format!("{}: {message}", w.image) } else { message.to_owned() })
}

/// Streams a new workload's output until it ends and returns its exit code. While it waits to start, the
/// log stream may end at once or be refused; it is asked for again until output comes. Once output has
/// come, the stream is not asked for again (that would repeat it): the workload is polled instead.
pub(crate) async fn follow_to_end(ctx: &Context, api: &Api, name: &str, out: Out<'_>) -> Result<i32, ClientError> {
    let mut printed = 0;
    loop {
        match stream_logs(api, name, None, Source::default(), true, &mut *out).await {
            Ok(n) => printed += n,
            // not started yet (the server may refuse logs of a queued workload)
            Err(ClientError::Api { status: 404 | 409 | 425, .. }) if printed == 0 => {}
            Err(e) => return Err(e),
        }
        let w = get(api, name, None).await?;
        if w.state.is_terminal() {
            return Ok(ended(&w));
        }
        tokio::time::sleep(ctx.poll_interval).await;
        if printed == 0 {
            continue;
        }
        loop {
            let w = get(api, name, None).await?;
            if w.state.is_terminal() {
                return Ok(ended(&w));
            }
            tokio::time::sleep(ctx.poll_interval).await;
        }
    }
}

/// Why `gpuhub run --follow` ends non-zero when the program's own exit status does not say it: the
/// workload was stopped, lost, or failed although its program exited 0 (`train: lost: its container
/// vanished`). `None` for a success and for a program that failed with its own status.
pub(crate) fn ended_why(w: &WorkloadView) -> Option<String> {
    let code = exit_code(w);
    if code == 0 || (w.state == WorkloadState::Failed && w.exit_code == Some(i64::from(code))) {
        return None;
    }
    let why = w.message.as_deref().map_or_else(String::new, |m| format!(": {m}"));
    Some(format!("{}: {}{why} (exit code {code})", w.name, w.state.as_str()))
}

/// [`exit_code`], saying on standard error why when the program's own status does not ([`ended_why`]).
fn ended(w: &WorkloadView) -> i32 {
    if let Some(why) = ended_why(w) {
        eprintln!("{why}");
    }
    exit_code(w)
}

/// The exit code `gpuhub run --follow` ends with: the workload's own when it is a valid exit status,
/// else 1 for anything but success (and a stopped workspace).
pub(crate) fn exit_code(w: &WorkloadView) -> i32 {
    let ok =
        w.state == WorkloadState::Succeeded || (w.state == WorkloadState::Stopped && w.kind == WorkloadKind::Workspace);
    match w.exit_code {
        Some(0) if w.state == WorkloadState::Failed || w.state == WorkloadState::Lost => 1,
        Some(c @ 0..=255) => c as i32,
        Some(_) => 1,
        None if ok => 0,
        None => 1,
    }
}

/// The query that addresses a workload, as an admin may another user's.
fn owner_query(owner: Option<&str>) -> Vec<(&str, &str)> {
    owner.map(|o| vec![("owner", o)]).unwrap_or_default()
}

async fn get(api: &Api, name: &str, owner: Option<&str>) -> Result<WorkloadView, ClientError> {
    let segs = ["workloads", name];
    let q = owner_query(owner);
    decode(&api.get(&segs, &q).await?, api.url(&segs, &q).as_str())
}

/// Which output of a workload: its own (member 0's), a member's, or an app's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Source<'a> {
    /// An app of the workspace.
    pub app: Option<&'a str>,
    /// A member of a gang.
    pub member: Option<u32>,
}

/// Copies a workload's log (or its app's or member's) to `out` chunk by chunk as it arrives; returns the
/// number of bytes.
pub(crate) async fn stream_logs(
    api: &Api,
    name: &str,
    owner: Option<&str>,
    source: Source<'_>,
    follow: bool,
    out: Out<'_>,
) -> Result<u64, ClientError> {
    let mut q = owner_query(owner);
    if let Some(app) = source.app {
        q.push(("app", app));
    }
    let member = source.member.map(|m| m.to_string());
    if let Some(m) = &member {
        q.push(("member", m));
    }
    if follow {
        q.push(("follow", "true"));
    }
    let url = api.url(&["workloads", name, "logs"], &q);
    let mut resp = api.send(Method::GET, url.clone(), None).await?;
    let mut n = 0;
    while let Some(chunk) = resp.chunk().await.map_err(|e| api.transport_error(&url, &e))? {
        out.write_all(&chunk)?;
        out.flush()?;
        n += chunk.len() as u64;
    }
    Ok(n)
}

/// `gpuhub logs [-f] [--app APP | --member N]`.
pub(crate) async fn logs(
    api: &Api,
    name: &str,
    owner: Option<&str>,
    source: Source<'_>,
    follow: bool,
    out: Out<'_>,
) -> Result<(), ClientError> {
    if follow {
        // say on stderr why nothing comes yet: the stream starts when the workload does
        let q: Vec<(&str, &str)> = owner.map(|o| vec![("owner", o)]).unwrap_or_default();
        if let Ok(v) = api.get(&["workloads", name], &q).await {
            if let Some(line) = waiting_line(&v) {
                eprintln!("{line}");
            }
        }
    }
    stream_logs(api, name, owner, source, follow, out).await.map(drop)
}

/// `pulling IMAGE [######----] 60% of 5.00MiB (1 of 2 layers)`: a pulling workload's progress.
pub(crate) fn pull_line(w: &WorkloadView) -> String {
    let Some(p) = &w.pull else { return format!("pulling {}: starting", w.image) };
    if p.total_bytes == 0 {
        return format!("pulling {}: {}", w.image, p.text());
    }
    let filled = ((p.current_bytes.min(p.total_bytes) * 20) / p.total_bytes) as usize;
    format!("pulling {} [{}{}] {}", w.image, "#".repeat(filled), "-".repeat(20 - filled), p.text())
}

/// For a queued workload: `NAME is queued: REASON (position N, estimated start T); waiting for it to start`.
pub(crate) fn waiting_line(v: &Value) -> Option<String> {
    if v["state"] != "queued" {
        return None;
    }
    let name = v["name"].as_str().unwrap_or("the workload");
    let e = &v["explanation"];
    let why = e["message"].as_str().or_else(|| v["message"].as_str()).unwrap_or("waiting");
    let mut extra = Vec::new();
    if let Some(p) = e["position"].as_u64() {
        extra.push(format!("position {p}"));
    }
    if let Some(t) = e["estimated_start"].as_str() {
        extra.push(format!("estimated start {t}"));
    }
    let extra = if extra.is_empty() { String::new() } else { format!(" ({})", extra.join(", ")) };
    Some(format!("{name} is queued: {why}{extra}; waiting for it to start"))
}

/// `gpuhub ps [--all]`.
pub(crate) async fn ps(api: &Api, json: bool, all: bool, out: Out<'_>) -> Result<(), ClientError> {
    let q: &[(&str, &str)] = if all { &[("all", "true")] } else { &[] };
    let v = Value::Array(api.get_all_pages(&["workloads"], q).await?);
    if json {
        return print_json(out, &v);
    }
    let list: Vec<WorkloadView> = decode(&v, api.url(&["workloads"], q).as_str())?;
    write!(out, "{}", ps_table(&list, all, crate::clock::now(), terminal_width()))?;
    Ok(())
}

/// The REASON of a workload: what interrupted it (`preempted by alice/train-3 3m ago`) while that is
/// its story, else the first line of its message.
pub(crate) fn reason(w: &WorkloadView, now: DateTime<Utc>) -> String {
    if let Some(i) = &w.interruption
        && w.state != WorkloadState::Running
    {
        let who = match (i.reason.as_str(), &i.by) {
            ("preempted", Some(by)) => format!("preempted by {by}"),
            ("user", Some(by)) => format!("stopped by {by}"),
            ("time-limit", _) => "time limit reached".to_owned(),
            ("engine-failure", _) => format!("engine failure: {}", i.detail.as_deref().unwrap_or("")),
            ("owner-disabled", _) => "owner's account disabled".to_owned(),
            ("idle", _) => "stopped: idle GPUs".to_owned(),
            ("gpu-memory-exceeded", _) => "stopped: GPU memory above its grant".to_owned(),
            ("engine-restarted", _) if w.state == WorkloadState::Queued => "engine restarted: queued again".to_owned(),
            ("engine-restarted", _) => "ended by an engine restart".to_owned(),
            (other, _) => other.to_owned(),
        };
        return format!("{who} {} ago", age(i.at, now));
    }
    if let Some(g) = w.gpu_guard.first() {
        return format!(
            "GPU memory {} of {}; stops in {}",
            size(Bytes(g.used_bytes)),
            size(Bytes(g.granted_bytes)),
            age(now, g.stop_at)
        );
    }
    if let Some(idle) = &w.idle {
        let gone = |t: DateTime<Utc>| age(now, t);
        return match (idle.kept_until, idle.stop_at) {
            (Some(k), _) => format!("idle GPUs; kept for {}", gone(k)),
            (None, Some(stop)) => format!("idle GPUs; stops in {} (gpuhub keep)", gone(stop)),
            (None, None) => format!("idle GPUs for {}", age(idle.since, now)),
        };
    }
    w.message.as_deref().and_then(|m| m.lines().next()).unwrap_or("").to_owned()
}

/// The narrowest REASON column worth showing; the IMAGE column gives way to keep it.
const REASON_MIN: usize = 16;
/// The narrowest IMAGE column when it gives way to a whole REASON.
const IMAGE_SOFT: usize = 10;
/// The narrowest IMAGE column when it gives way to the narrowest REASON.
const IMAGE_MIN: usize = 5;

/// The `ps` table: NAME KIND STATE IMAGE CPUS MEMORY GPUS AGE, OWNER first with `--all`, REASON last
/// when any workload has one. With a terminal `width`, REASON (and, when that is not enough, IMAGE) is
/// cut so that no row is wider (the full text is in `inspect`); without one REASON is cut at
/// [`REASON_WIDTH`].
pub(crate) fn ps_table(list: &[WorkloadView], all: bool, now: DateTime<Utc>, width: Option<usize>) -> String {
    let reasons: Vec<String> = list.iter().map(|w| reason(w, now)).collect();
    let any_reason = reasons.iter().any(|r| !r.is_empty());
    let mut header = vec!["NAME", "KIND", "STATE", "IMAGE", "CPUS", "MEMORY", "GPUS", "AGE"];
    if all {
        header.insert(0, "OWNER");
    }
    let mut rows: Vec<Vec<String>> = list
        .iter()
        .map(|w| {
            let mut row = vec![
                w.name.clone(),
                w.kind.as_str().to_owned(),
                w.state.as_str().to_owned(),
                w.image.clone(),
                w.resources.cpu_milli.to_string(),
                size(w.resources.memory),
                w.resources.gpu_display(),
                age(w.created_at, now),
            ];
            if all {
                row.insert(0, w.owner.clone());
            }
            row
        })
        .collect();
    if any_reason {
        let image = header.iter().position(|h| *h == "IMAGE").unwrap_or(0);
        let col = |rows: &[Vec<String>], i: usize| {
            rows.iter().map(|r| r[i].chars().count()).chain([header[i].len()]).max().unwrap_or(0)
        };
        // every column but REASON, with the two spaces after each
        let fixed = |rows: &[Vec<String>]| (0..header.len()).map(|i| col(rows, i) + 2).sum::<usize>();
        let reason_width = match width {
            None => REASON_WIDTH,
            Some(width) => {
                // IMAGE gives way to a whole reason down to IMAGE_SOFT, and further only for REASON_MIN
                let want = reasons.iter().map(|r| r.chars().count()).max().unwrap_or(0).min(REASON_WIDTH);
                for (need, floor) in [(want, IMAGE_SOFT), (REASON_MIN, IMAGE_MIN)] {
                    let over = (fixed(&rows) + need).saturating_sub(width);
                    if over > 0 {
                        let cut = col(&rows, image).saturating_sub(over).max(floor);
                        for r in &mut rows {
                            r[image] = truncate(&r[image], cut);
                        }
                    }
                }
                width.saturating_sub(fixed(&rows)).max("REASON".len())
            }
        };
        header.push("REASON");
        for (row, r) in rows.iter_mut().zip(&reasons) {
            row.push(truncate(r, reason_width));
        }
    }
    let mut t = Table::new(&header);
    for row in rows {
        t.row(row);
    }
    t.render("")
}

/// The terminal's width: `COLUMNS` when set, else the width of the terminal on standard output;
/// `None` when output is not a terminal.
pub(crate) fn terminal_width() -> Option<usize> {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|c| *c > 0) {
        return Some(c);
    }
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// `gpuhub stop` and `gpuhub start`.
pub(crate) async fn action(
    api: &Api,
    json: bool,
    name: &str,
    owner: Option<&str>,
    verb: &str,
    out: Out<'_>,
) -> Result<(), ClientError> {
    let segs = ["workloads", name, verb];
    let q = owner_query(owner);
    let v = api.call(Method::POST, &segs, &q, None).await?;
    match v {
        Some(v) if json => print_json(out, &v),
        Some(v) => {
            let w: WorkloadView = decode(&v, api.url(&segs, &q).as_str())?;
            writeln!(out, "{}: {}", w.name, w.state)?;
            Ok(())
        }
        None => Ok(()),
    }
}

/// `gpuhub rm`.
pub(crate) async fn rm(
    api: &Api,
    json: bool,
    name: &str,
    owner: Option<&str>,
    out: Out<'_>,
) -> Result<(), ClientError> {
    let v = api.call(Method::DELETE, &["workloads", name], &owner_query(owner), None).await?;
    match v {
        Some(v) if json => print_json(out, &v),
        _ if json => Ok(()),
        _ => {
            writeln!(out, "removed {name}")?;
            Ok(())
        }
    }
}

/// `gpuhub inspect`: the workload as pretty JSON.
/// `gpuhub inspect NAME`: every field of the workload, as indented lines, or with `--json` the API's JSON.
pub(crate) async fn inspect(
    api: &Api,
    json: bool,
    name: &str,
    owner: Option<&str>,
    out: Out<'_>,
) -> Result<(), ClientError> {
    let v = api.get(&["workloads", name], &owner_query(owner)).await?;
    if json {
        return print_json(out, &v);
    }
    write!(out, "{}", crate::table::outline(&v))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_is_drawn_as_a_bar() {
        let mut w = WorkloadView { image: "r/x:1".into(), ..view("p", WorkloadState::Pulling, None) };
        assert_eq!(pull_line(&w), "pulling r/x:1: starting");
        w.pull = Some(gpuhub_api::PullView {
            status: "Downloading".into(),
            current_bytes: 3 << 20,
            total_bytes: 4 << 20,
            layers: 2,
            layers_done: 1,
        });
        assert_eq!(pull_line(&w), "pulling r/x:1 [###############-----] 75% of 4MiB (1 of 2 layers)");
    }

    #[test]
    fn the_end_of_a_pull_is_told_from_the_history() {
        use gpuhub_api::StateEvent;
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let e = |state, m: &str| StateEvent { at, state, message: Some(m.into()) };
        let mut w = WorkloadView { image: "r/x:1".into(), ..view("p", WorkloadState::Running, None) };
        assert_eq!(pull_end_line(&w), None, "no pull in its history");
        w.history = vec![
            e(WorkloadState::Pulling, "pulling r/x:1"),
            e(WorkloadState::Queued, "pulled 24MiB (2 layers); queued"),
            e(WorkloadState::Running, "running"),
        ];
        assert_eq!(pull_end_line(&w).as_deref(), Some("r/x:1: pulled 24MiB (2 layers); queued"));
        w.history =
            vec![e(WorkloadState::Pulling, "pulling r/x:1"), e(WorkloadState::Failed, "could not pull r/x:1: no")];
        assert_eq!(pull_end_line(&w).as_deref(), Some("could not pull r/x:1: no"));
        w.history.truncate(1);
        assert_eq!(pull_end_line(&w), None, "still pulling");
    }

    #[test]
    fn a_queued_workload_says_why_it_waits() {
        let v = serde_json::json!({"name": "big", "state": "queued", "message": "m",
            "explanation": {"reason": "resources", "message": "needs 4 GPUs, 2 free", "position": 2,
                            "estimated_start": "2026-11-22T18:00:00Z"}});
        assert_eq!(
            waiting_line(&v).unwrap(),
            "big is queued: needs 4 GPUs, 2 free (position 2, estimated start 2026-11-22T18:00:00Z); waiting for it to start"
        );
        assert_eq!(waiting_line(&serde_json::json!({"name": "x", "state": "running"})), None);
        let bare =
            serde_json::json!({"name": "x", "state": "queued", "message": "held: the owner's account is disabled"});
        assert!(waiting_line(&bare).unwrap().contains("disabled"));
    }
    use crate::ClientCli;
    use crate::cli::ClientCommand;
    use chrono::TimeZone;
    use clap::Parser;
    use gpuhub_core::workload::Resources;
    use gpuhub_core::{Bytes, CpuMilli};

    fn view(name: &str, state: WorkloadState, message: Option<&str>) -> WorkloadView {
        WorkloadView {
            id: format!("id-{name}"),
            name: name.into(),
            owner: "alice".into(),
            kind: WorkloadKind::Job,
            image: "pytorch/pytorch:2".into(),
            command: vec![],
            env: Default::default(),
            resources: Resources { cpu_milli: CpuMilli(1500), memory: Bytes(4 << 30), gpus: 1, ..Resources::default() },
            priority: 0,
            queue: String::new(),
            constraint: None,
            runtime_limit: None,
            disk: None,
            apps: vec![],
            datasets: Vec::new(),
            teams: Vec::new(),
            history: Vec::new(),
            state,
            size: 1,
            gpus: vec![],
            members: vec![],
            exit_code: None,
            message: message.map(str::to_owned),
            interruption: None,
            explanation: None,
            pull: None,
            idle: None,
            gpu_guard: Vec::new(),
            restarts: None,
            service: None,
            created_at: Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap(),
            started_at: None,
            finished_at: None,
        }
    }

    #[test]
    fn request_from_args() {
        let cli = ClientCli::try_parse_from([
            "gpuhub", "run", "--image", "img", "--memory", "2GiB", "--cpus", "2", "--env", "A=1", "--", "echo", "hi",
        ])
        .unwrap();
        let ClientCommand::Run(args) = cli.command else { panic!() };
        let json = serde_json::to_value(create_request(&args)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "job", "image": "img", "command": ["echo", "hi"], "env": {"A": "1"},
                "resources": {"cpus": 2.0, "memory": "2GiB"}
            })
        );
        let cli = ClientCli::try_parse_from(["gpuhub", "run", "--workspace", "--image", "img"]).unwrap();
        let ClientCommand::Run(args) = cli.command else { panic!() };
        let json = serde_json::to_value(create_request(&args)).unwrap();
        assert_eq!(json, serde_json::json!({"kind": "workspace", "image": "img", "resources": {}}));
        let cli = ClientCli::try_parse_from([
            "gpuhub",
            "run",
            "--image",
            "img",
            "--gpus",
            "0.5",
            "--gpu-memory",
            "8GiB",
            "--queue",
            "vision",
            "--constraint",
            "gpu.memory >= 40GiB",
            "--time-limit",
            "2h",
        ])
        .unwrap();
        let ClientCommand::Run(args) = cli.command else { panic!() };
        let json = serde_json::to_value(create_request(&args)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "job", "image": "img", "resources": {"gpu_milli": 500, "gpu_memory": "8GiB"},
                "queue": "vision", "constraint": "gpu.memory >= 40GiB", "runtime_limit": "2h"
            })
        );
    }

    #[test]
    fn ps_table_plain_and_all() {
        let now = Utc.with_ymd_and_hms(2025, 1, 1, 2, 0, 5).unwrap();
        let list = [view("train", WorkloadState::Running, None), view("eval", WorkloadState::Succeeded, None)];
        assert_eq!(
            ps_table(&list, false, now, None),
            "NAME   KIND  STATE      IMAGE              CPUS  MEMORY  GPUS  AGE\n\
             train  job   running    pytorch/pytorch:2  1.5   4GiB    1     2h\n\
             eval   job   succeeded  pytorch/pytorch:2  1.5   4GiB    1     2h\n"
        );
        let long = "waiting for 2 GPUs: all 8 are held by other workloads right now";
        let list = [view("q", WorkloadState::Queued, Some(long)), view("r", WorkloadState::Running, None)];
        let s = ps_table(&list, true, now, None);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with("OWNER  NAME") && lines[0].ends_with("AGE  REASON"), "{s}");
        assert!(
            lines[1].starts_with("alice  q ") && lines[1].ends_with("waiting for 2 GPUs: all 8 are held by o…"),
            "{s}"
        );
        assert!(lines[2].ends_with("2h"), "{s}");
        assert_eq!(ps_table(&[], false, now, None), "NAME  KIND  STATE  IMAGE  CPUS  MEMORY  GPUS  AGE\n");
    }

    #[test]
    fn an_idle_workload_says_when_it_stops() {
        let now = Utc.with_ymd_and_hms(2025, 1, 1, 2, 0, 0).unwrap();
        let mut w = view("nb", WorkloadState::Running, Some("running"));
        let idle = |stop: Option<i64>, kept: Option<i64>| gpuhub_api::IdleView {
            since: now - chrono::TimeDelta::hours(2),
            warned_at: stop.map(|_| now),
            stop_at: stop.map(|m| now + chrono::TimeDelta::minutes(m)),
            kept_until: kept.map(|h| now + chrono::TimeDelta::hours(h)),
        };
        w.idle = Some(idle(None, None));
        assert_eq!(reason(&w, now), "idle GPUs for 2h");
        w.idle = Some(idle(Some(30), None));
        assert_eq!(reason(&w, now), "idle GPUs; stops in 30m (gpuhub keep)");
        w.idle = Some(idle(None, Some(3)));
        assert_eq!(reason(&w, now), "idle GPUs; kept for 3h");
        w.idle = None;
        assert_eq!(reason(&w, now), "running");
    }

    #[test]
    fn a_share_over_its_gpu_memory_grant_says_so() {
        let now = Utc.with_ymd_and_hms(2025, 1, 1, 2, 0, 0).unwrap();
        let mut w = view("nb", WorkloadState::Running, Some("running"));
        w.gpu_guard = vec![gpuhub_api::GpuGuardView {
            member: 0,
            used_bytes: 12 << 30,
            granted_bytes: 10 << 30,
            since: now,
            stop_at: now + chrono::TimeDelta::seconds(45),
        }];
        assert_eq!(reason(&w, now), "GPU memory 12GiB of 10GiB; stops in 45s");
        let mut w = view("nb", WorkloadState::Failed, Some("stopped by the GPU memory guard: …"));
        w.interruption = Some(gpuhub_core::stop::InterruptionView {
            reason: "gpu-memory-exceeded".into(),
            by: None,
            queue: None,
            at: now - chrono::TimeDelta::minutes(3),
            detail: Some("member 0 used 12GiB".into()),
            next: "ended".into(),
        });
        assert_eq!(reason(&w, now), "stopped: GPU memory above its grant 3m ago");
        // a run the engine's restart killed, queued again (or failed, on_engine_restart = "fail")
        w.interruption.as_mut().unwrap().reason = "engine-restarted".into();
        w.state = WorkloadState::Queued;
        assert_eq!(reason(&w, now), "engine restarted: queued again 3m ago");
        w.state = WorkloadState::Failed;
        assert_eq!(reason(&w, now), "ended by an engine restart 3m ago");
    }

    #[test]
    fn ps_rows_never_wrap_at_80_columns() {
        use gpuhub_core::stop::InterruptionView;
        let now = Utc.with_ymd_and_hms(2025, 1, 1, 2, 0, 5).unwrap();
        let long = "waiting for 2 GPUs: all 8 are held by other workloads right now, and more words";
        let mut pre = view("p", WorkloadState::Queued, Some("preempted: queue vision reclaims"));
        pre.interruption = Some(InterruptionView {
            reason: "preempted".into(),
            by: Some("alice/train-3".into()),
            queue: Some("vision".into()),
            at: now - chrono::Duration::minutes(3),
            detail: None,
            next: "queued again".into(),
        });
        let mut wide = view("w", WorkloadState::Queued, Some(long));
        wide.image = "registry.example.com:5000/some-team/a-very-long-image-name:2025-01-01".into();
        let list = [view("q", WorkloadState::Queued, Some(long)), pre, wide];
        for all in [false, true] {
            let s = ps_table(&list, all, now, Some(80));
            for line in s.lines() {
                assert!(line.chars().count() <= 80, "{} columns: {line}\n{s}", line.chars().count());
            }
            let lines: Vec<&str> = s.lines().collect();
            assert!(lines[0].ends_with("REASON"), "{s}");
            assert!(lines[1].ends_with('…'), "a long reason is cut, not wrapped: {s}");
            assert!(lines[2].contains("preempted"), "{s}");
        }
        // the image gives way first: at 90 columns the typed reason is whole, the image cut
        let s = ps_table(&list[..2], false, now, Some(90));
        assert!(s.lines().all(|l| l.chars().count() <= 90), "{s}");
        let row = s.lines().nth(2).unwrap();
        assert!(row.ends_with("preempted by alice/train-3 3m ago") && row.contains("pytorch/p…"), "{s}");
        // wide enough: nothing is cut, and the typed reason reads as a sentence
        let s = ps_table(&list[1..2], false, now, Some(200));
        assert!(s.lines().nth(1).unwrap().ends_with("preempted by alice/train-3 3m ago"), "{s}");
    }

    #[test]
    fn exit_codes() {
        let with = |state, kind, code| WorkloadView { kind, exit_code: code, ..view("w", state, None) };
        use WorkloadKind::{Job, Workspace};
        use WorkloadState::*;
        assert_eq!(exit_code(&with(Succeeded, Job, Some(0))), 0);
        assert_eq!(exit_code(&with(Succeeded, Job, None)), 0);
        assert_eq!(exit_code(&with(Failed, Job, Some(3))), 3);
        assert_eq!(exit_code(&with(Failed, Job, None)), 1);
        assert_eq!(exit_code(&with(Failed, Job, Some(0))), 1);
        assert_eq!(exit_code(&with(Failed, Job, Some(256)),), 1, "would wrap to 0");
        assert_eq!(exit_code(&with(Failed, Job, Some(-9))), 1);
        assert_eq!(exit_code(&with(Lost, Job, None)), 1);
        assert_eq!(exit_code(&with(Stopped, Job, Some(137))), 137);
        assert_eq!(exit_code(&with(Stopped, Job, None)), 1);
        assert_eq!(exit_code(&with(Stopped, Workspace, None)), 0);
        // why, when the program's own status does not say it
        assert_eq!(ended_why(&with(Succeeded, Job, Some(0))), None);
        assert_eq!(ended_why(&with(Failed, Job, Some(3))), None, "the program's own failure");
        assert_eq!(ended_why(&with(Stopped, Workspace, None)), None);
        let lost = WorkloadView { message: Some("its container vanished".into()), ..with(Lost, Job, None) };
        assert_eq!(ended_why(&lost).as_deref(), Some("w: lost: its container vanished (exit code 1)"));
        assert_eq!(ended_why(&with(Failed, Job, Some(0))).as_deref(), Some("w: failed (exit code 1)"));
        assert_eq!(ended_why(&with(Stopped, Job, Some(137))).as_deref(), Some("w: stopped (exit code 137)"));
    }
}
