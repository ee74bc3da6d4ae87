//! Each member's output kept after its run: streamed from the engine chunk by chunk into a private
//! (0600) file under `<data>/logs`, cut at `log_max_bytes`, renamed into place when complete.

use crate::{Controller, logfile};
use gpuhub_core::workload::Workload;
use gpuhub_driver::MemberRef;
use std::path::{Path, PathBuf};

/// Where member `member` of workload `id`'s last run is archived: `<id>.log` for member 0 (as before
/// runs had members), `<id>@<member>.log` for the others (`@` is in no app's name, so the apps'
/// `<id>.<app>.log` never collide).
pub fn archive_path(data_dir: &Path, id: &str, member: u32) -> PathBuf {
    let name = if member == 0 { format!("{id}.log") } else { format!("{id}@{member}.log") };
    data_dir.join("logs").join(name)
}

/// Every log file of a workload: its members' archives and its apps' output.
pub fn member_log_paths(data_dir: &Path, w: &Workload) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (0..w.size.max(1)).map(|m| archive_path(data_dir, &w.id, m)).collect();
    out.extend(w.apps.iter().map(|a| data_dir.join("logs").join(format!("{}.{}.log", w.id, a.name))));
    out
}

/// Deletes every log file of a workload (a missing one is fine).
pub(crate) fn remove_logs(data_dir: &Path, w: &Workload) {
    for p in member_log_paths(data_dir, w) {
        let _ = std::fs::remove_file(p);
    }
}

impl Controller {
    /// Copies each member's output of a finished run to the data dir, so it outlives the run, and
    /// announces the workload on the change feed once an archive is there.
    pub(crate) fn archive_logs(&self, w: &Workload) {
        let Some(run) = w.run_id.clone() else { return };
        for member in 0..w.size.max(1) {
            let (engine, path) = (self.engine.clone(), archive_path(&self.settings.data_dir, &w.id, member));
            let (cap, changes, id, run) =
                (self.settings.log_max_bytes, self.changes.clone(), w.id.clone(), run.clone());
            tokio::spawn(async move {
                let stream = match engine.logs(&MemberRef::new(&run, member), false, None).await {
                    Ok(s) => s,
                    Err(e) => return tracing::warn!(error = %e, "cannot archive logs of member {member} of {run}"),
                };
                // a name of its own, so that two archives of one workload never write the same file
                let tmp = path.with_extension(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
                let write = async {
                    let mut file = logfile::create_private(&tmp).await?;
                    let archived = logfile::copy_capped(stream, &mut file, cap).await?;
                    file.sync_all().await?;
                    tokio::fs::rename(&tmp, &path).await?;
                    Ok::<_, std::io::Error>(archived)
                };
                match write.await {
                    Ok(a) if a.truncated => tracing::info!(workload = %id, bytes = a.bytes, "log archived, truncated"),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&tmp).await;
                        return tracing::warn!(error = %e, "cannot write {}", path.display());
                    }
                }
                let _ = changes.send(id);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_archives_never_meet_app_logs() {
        let d = Path::new("/d");
        assert_eq!(archive_path(d, "w1", 0), Path::new("/d/logs/w1.log"));
        assert_eq!(archive_path(d, "w1", 3), Path::new("/d/logs/w1@3.log"));
    }
}
