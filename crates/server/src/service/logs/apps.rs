//! The output of a workspace's apps (`?app=NAME` on the logs endpoint): the controller copies each
//! app's output into `<data>/logs/<id>.<app>.log` (cut at `log_max_bytes`); this serves that file with
//! the same `tail`, `limit_bytes` and `follow` as the main log.

use crate::service::ServiceError;
use crate::state::AppState;
use bytes::Bytes;
use futures::Stream;
use gpuhub_controller::logfile;
use gpuhub_core::workload::Workload;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// How often a followed app log at its end is checked for more output (a file gives no signal when it
/// grows).
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// The file of `app`'s output, or [`Kind::NotFound`](crate::service::Kind::NotFound) naming the apps `w` has.
pub fn path(st: &AppState, w: &Workload, app: &str) -> Result<PathBuf, ServiceError> {
    let Some(a) = w.apps.iter().find(|a| a.name == app) else {
        let names: Vec<&str> = w.apps.iter().map(|a| a.name.as_str()).collect();
        let known = if names.is_empty() { "it has none".to_owned() } else { format!("apps: {}", names.join(", ")) };
        return Err(ServiceError::not_found(format!("workload {} has no app named {app:?} ({known})", w.name)));
    };
    if a.command.is_empty() {
        return Err(ServiceError::not_found(format!(
            "app {app} of {} has no start command of gpuhub's, so gpuhub holds no output of it",
            w.name
        )));
    }
    Ok(st.data_dir.join("logs").join(format!("{}.{}.log", w.id, a.name)))
}

/// `app`'s output: from `tail` lines before the end (else the start), at most `limit` bytes, and with
/// `follow` what it writes later, until the workload stops holding resources.
pub async fn stream(
    st: &AppState,
    w: &Workload,
    app: &str,
    tail: Option<u64>,
    limit: u64,
    follow: bool,
) -> Result<impl Stream<Item = std::io::Result<Bytes>> + Send + 'static, ServiceError> {
    let path = path(st, w, app)?;
    let start = match tokio::fs::File::open(&path).await {
        Ok(mut f) => {
            let len = f.metadata().await.map_err(ServiceError::internal)?.len();
            match tail {
                Some(n) => logfile::tail_offset(&mut f, len, n).await.map_err(ServiceError::internal)?,
                None => 0,
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(ServiceError::internal(e)),
    };
    let (store, id) = (st.store.clone(), w.id.clone());
    // state: where to read next, what may still be sent, whether to look again once at the end
    Ok(futures::stream::unfold((start, limit, follow), move |(at, left, follow)| {
        let (path, store, id) = (path.clone(), store.clone(), id.clone());
        async move {
            if left == 0 {
                return None;
            }
            loop {
                let len = match tokio::fs::metadata(&path).await {
                    Ok(m) => m.len(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                    Err(e) => return Some((Err(e), (at, 0, false))),
                };
                if len > at {
                    let mut file = match tokio::fs::File::open(&path).await {
                        Ok(f) => f,
                        Err(e) => return Some((Err(e), (at, 0, false))),
                    };
                    let n = (len - at).min(left).min(64 * 1024);
                    let mut buf = vec![0u8; n as usize];
                    if let Err(e) = file.seek(std::io::SeekFrom::Start(at)).await {
                        return Some((Err(e), (at, 0, false)));
                    }
                    return match file.read(&mut buf).await {
                        Ok(0) => None,
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(Bytes::from(buf)), (at + n as u64, left - n as u64, follow)))
                        }
                        Err(e) => Some((Err(e), (at, 0, false))),
                    };
                }
                if !follow {
                    return None;
                }
                // at the end: done once the workload no longer runs (after one last look)
                let running = matches!(store.get_workload_by_id(&id).await, Ok(w) if w.state().holds_resources());
                if !running {
                    let len = tokio::fs::metadata(&path).await.map(|m| m.len()).unwrap_or(0);
                    if len <= at {
                        return None;
                    }
                    continue;
                }
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        }
    }))
}
