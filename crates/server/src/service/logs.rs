//! A workload's output for a caller: from the engine while its run exists, else from the run's archive
//! (at most `log_max_bytes`), or an app's (`apps`); followed, a queued workload's log waits (signalled)
//! for its run. The body ends with a line that says why when it stops early.

mod apps;

use super::{Kind, ServiceError};
use crate::state::AppState;
use futures::StreamExt;
use gpuhub_controller::logfile;
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadState};
use gpuhub_driver::{EngineError, MemberRef};
use serde::Deserialize;
use utoipa::IntoParams;

/// A log as it is sent: chunks of output.
pub type LogBody = futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>;

/// `?follow=true`: keep streaming until the workload ends; `?tail=N`: only the last N lines;
/// `?limit_bytes=N`: at most N bytes (after `tail`).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Keep streaming until the workload ends.
    #[serde(default)]
    pub follow: bool,
    /// Another user's workload (admins only).
    #[serde(default)]
    pub owner: Option<String>,
    /// Only the last N lines of output (0: none).
    #[serde(default)]
    pub tail: Option<u64>,
    /// At most this many bytes (at least 1), counted from the start of what is returned.
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// The output of this app of the workspace instead of the workload's own.
    #[serde(default)]
    pub app: Option<String>,
    /// The output of this member of a gang (0-based; default 0).
    #[serde(default)]
    pub member: Option<u32>,
}

/// Workload `name`'s log as `q` asks for it, if `caller` may read it (as [`super::lookup`]); a member it
/// does not have is [`Kind::NotFound`].
pub async fn open(st: &AppState, caller: &User, name: &str, q: &LogsQuery) -> Result<LogBody, ServiceError> {
    if q.limit_bytes == Some(0) {
        return Err(ServiceError::new(Kind::Malformed, "invalid query: limit_bytes must be at least 1"));
    }
    let mut changes = st.controller.changes();
    let w = super::lookup(st, caller, name, q.owner.as_deref()).await?;
    let member = q.member.unwrap_or(0);
    if member >= w.size.max(1) {
        return Err(ServiceError::not_found(format!(
            "workload {} has no member {member} (it has {} member{}, 0 to {})",
            w.name,
            w.size,
            if w.size == 1 { "" } else { "s" },
            w.size.max(1) - 1
        )));
    }
    let what = LogSource {
        app: q.app.clone(),
        member,
        tail: q.tail,
        follow: q.follow,
        limit: q.limit_bytes.unwrap_or(u64::MAX),
    };
    if !(q.follow && waiting_for_a_run(&w)) {
        return Ok(ends_cleanly(log_stream(st, &w, &what).await?).boxed());
    }
    // followed before it has a run: answered at once (a client cannot tell an answer that says nothing
    // from a hang), then the body waits (signalled, no polling) until the workload has a run of its own
    // or has ended (through its image's pull too); a re-queued workload may still name its previous run
    let st = st.clone();
    let body = futures::stream::once(async move {
        let mut w = w;
        while waiting_for_a_run(&w) {
            loop {
                match changes.recv().await {
                    Ok(id) if id == w.id => break,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(_) => return Err(ServiceError::internal("controller is gone")),
                }
            }
            w = match st.store.get_workload_by_id(&w.id).await {
                Ok(w) => w,
                // deleted before it ran: its log is empty and ends here
                Err(gpuhub_store::StoreError::NotFound { .. }) => return Ok(futures::stream::empty().boxed()),
                Err(e) => return Err(e.into()),
            };
        }
        log_stream(&st, &w, &what).await
    })
    .map(|r: Result<_, ServiceError>| match r {
        Ok(s) => s,
        Err(e) => futures::stream::once(futures::future::ready(Err(std::io::Error::other(e.detail)))).boxed(),
    })
    .flatten()
    .boxed();
    Ok(ends_cleanly(body).boxed())
}

/// A log body that fails part-way (its container removed under it, the engine gone) ends with a line
/// that says why, and cleanly: a connection cut inside a chunked body tells a client nothing, and
/// HTTP clients report it as a broken connection, not as the end of a log.
fn ends_cleanly(
    log: futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    log.scan(false, |stopped, chunk| {
        let next = if *stopped {
            None
        } else {
            Some(Ok(chunk.unwrap_or_else(|e| {
                *stopped = true;
                bytes::Bytes::from(format!("\n[gpuhub: the log stopped early: {e}]\n"))
            })))
        };
        futures::future::ready(next)
    })
}

/// Whether a followed log must wait for the workload's run: it has none of its own yet.
fn waiting_for_a_run(w: &Workload) -> bool {
    matches!(w.state(), WorkloadState::Pulling | WorkloadState::Queued)
        || (w.state() == WorkloadState::Starting && w.run_id.is_none())
}

/// Which log a request reads and how.
struct LogSource {
    app: Option<String>,
    member: u32,
    tail: Option<u64>,
    follow: bool,
    limit: u64,
}

/// The log `what` names of `w`: an app's (gpuhub's file), the engine's for its run, else the archived
/// one (empty when there is none), at most `limit` bytes, followed while it holds resources.
async fn log_stream(st: &AppState, w: &Workload, what: &LogSource) -> Result<LogBody, ServiceError> {
    let follow = what.follow && w.state().holds_resources();
    if let Some(app) = &what.app {
        return Ok(apps::stream(st, w, app, what.tail, what.limit, follow).await?.boxed());
    }
    if let Some(run) = &w.run_id {
        match st.engine.logs(&MemberRef::new(run, what.member), follow, what.tail).await {
            // passed on chunk by chunk as the engine delivers them, never collected
            Ok(stream) => {
                return Ok(logfile::take_bytes(stream, what.limit).map(|r| r.map_err(std::io::Error::other)).boxed());
            }
            Err(EngineError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let archived = gpuhub_controller::archive_path(&st.data_dir, &w.id, what.member);
    let mut file = match tokio::fs::File::open(&archived).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(futures::stream::empty().boxed()),
        Err(e) => return Err(ServiceError::internal(e)),
    };
    let len = file.metadata().await.map_err(ServiceError::internal)?.len();
    let start = match what.tail {
        Some(n) => logfile::tail_offset(&mut file, len, n).await.map_err(ServiceError::internal)?,
        None => 0,
    };
    Ok(logfile::read_range(file, start, (len - start).min(what.limit)).boxed())
}
