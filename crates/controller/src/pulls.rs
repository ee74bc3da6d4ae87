//! Pulls: a workload whose image the engine lacks is submitted `pulling`; the controller pulls the
//! image in the background (with the configured credentials of its registry), keeps how far each pull
//! is for the API, and records the end as an event: queued once the image is there, failed with the
//! registry's reason otherwise. A restart starts the pulls of `pulling` workloads again.

use crate::{Command, Controller};
use gpuhub_core::lifecycle::Event;
use gpuhub_core::workload::WorkloadState;
use gpuhub_driver::{EngineError, PullProgress};
use gpuhub_store::{StoreError, WorkloadFilter};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// How far each pull under way is, by workload id (shared with the API).
pub type Pulls = Arc<RwLock<HashMap<String, PullProgress>>>;

impl Controller {
    /// Starts a pull for every `pulling` workload that has none under way.
    pub(crate) async fn start_pulls(&mut self) {
        let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Pulling]) };
        let waiting = match self.store.list_workloads(&filter).await {
            Ok(w) => w,
            Err(e) => return tracing::warn!(error = %e, "cannot list pulling workloads"),
        };
        for w in waiting {
            if !self.pulling.insert(w.id.clone()) {
                continue;
            }
            let (engine, tx, pulls, id, image) =
                (self.engine.clone(), self.tx.clone(), self.pulls.clone(), w.id.clone(), w.image.clone());
            let registry = gpuhub_core::image::registry_of(&image).to_owned();
            let auth = self.settings.registries.iter().find(|a| a.server == registry).cloned();
            tracing::info!(workload = %id, image = %image, "pulling");
            tokio::spawn(async move {
                let report = |p: PullProgress| {
                    if let Ok(mut m) = pulls.write() {
                        m.insert(id.clone(), p);
                    }
                };
                let result = engine.pull(&image, auth.as_ref(), &report).await;
                let _ = tx.send(Command::Pulled { id, result }).await;
            });
        }
    }

    /// A pull ended: the workload is queued, or failed with the registry's words. One stopped or
    /// deleted meanwhile keeps what that recorded.
    pub(crate) async fn pulled(&mut self, id: String, result: Result<(), EngineError>) {
        self.pulling.remove(&id);
        let fetched = self.pulls.write().ok().and_then(|mut m| m.remove(&id));
        let mut w = match self.store.get_workload_by_id(&id).await {
            Ok(w) => w,
            Err(StoreError::NotFound { .. }) => return,
            Err(e) => return tracing::warn!(workload = %id, error = %e, "cannot record a pull's end"),
        };
        let event = match result {
            Ok(()) => Event::Pulled { fetched },
            Err(e) => {
                tracing::warn!(workload = %id, error = %e, "pull failed");
                Event::PullFailed { why: e.to_string() }
            }
        };
        if w.apply(event, self.clock.now()).is_err() {
            return;
        }
        if let Err(e) = self.save(&w).await {
            tracing::warn!(workload = %id, error = %e, "cannot record a pull's end");
        }
    }
}
