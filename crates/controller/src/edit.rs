//! Edits of a workload's terms (a longer run-time limit, another priority or queue), made by the
//! controller so they never race its own writes; the next pass plans with them, and an engine that
//! holds a run's time limit itself is given the longer one.

use crate::{ControlError, Controller};
use gpuhub_core::edit::EditWorkloadRequest;
use gpuhub_core::workload::Workload;

impl Controller {
    /// Applies `edit` asked by `by` to workload `id` ([`Workload::amend`]'s rules, checked again here
    /// against the stored state) and records what changed in its history.
    pub(crate) async fn edit(
        &mut self,
        id: &str,
        edit: &EditWorkloadRequest,
        by: &str,
    ) -> Result<Workload, ControlError> {
        let mut w = self.store.get_workload_by_id(id).await?;
        let changed = w.amend(edit)?;
        if changed.is_empty() {
            return Ok(w);
        }
        // an engine that holds the run's time limit itself (Slurm) is told first: if it refuses, nothing
        // changes
        if let (Some(limit), Some(run)) = (edit.runtime_limit, w.run_id.as_deref().filter(|_| w.has_live_run())) {
            self.engine.extend_time_limit(run, std::time::Duration::from_secs(limit.0)).await?;
        }
        let note = format!("{} (by {by})", changed.join(", "));
        self.store.edit_workload(&w, &note, self.clock.now()).await?;
        tracing::info!(workload = %w.id, %by, change = %note, "workload edited");
        self.changed(&w.id);
        Ok(w)
    }
}
