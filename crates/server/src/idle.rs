//! Idle GPUs found and reclaimed: after every monitoring round, the pure rule
//! (`gpuhub_monitor::IdleTracker`) is fed the snapshot, each running workload's kind, its last use
//! through the hub ([`crate::activity::Activity`]) and its owner's keep; a warning is logged, shown on
//! the workload (`idle` in its view, `ps`) and posted to `[idle] webhook`; a stop goes to the
//! controller with the typed reason `idle` (a workspace keeps its home and can be started again).

use crate::state::AppState;
pub use crate::state::idle::IdleWatch;
use chrono::TimeDelta;
use gpuhub_api::IdleReportRow;
use gpuhub_core::stop::StopReason;
use gpuhub_core::workload::WorkloadState;
use gpuhub_monitor::{Facts, IdleAction, IdleRule};
use gpuhub_store::WorkloadFilter;
use std::collections::HashMap;

/// The configured rule.
pub fn rule(st: &AppState) -> IdleRule {
    let c = &st.config.idle;
    let secs = |s: u64| TimeDelta::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000));
    IdleRule {
        threshold_pct: c.threshold_pct,
        after: secs(c.after_secs),
        grace: secs(c.grace_secs),
        jobs: c.jobs,
        exempt_queues: c.exempt_queues.clone(),
        queue_after: c.queue_after_secs.iter().map(|(q, s)| (q.clone(), secs(*s))).collect(),
    }
}

/// Applies the rule after every monitoring round until `stop` completes.
pub async fn run(st: AppState, stop: impl std::future::Future<Output = ()>) {
    if !st.config.idle.enabled {
        return;
    }
    let rule = rule(&st);
    let judge = |st: AppState| {
        let rule = rule.clone();
        async move { round(&st, &rule).await }
    };
    after_each_round(&st, stop, "idle gpus", judge).await;
}

/// Calls `judge` after every monitoring round until `stop` completes (the idle rule, the GPU memory
/// guard); a round it cannot judge is logged under `what`, and the next one comes.
pub(crate) async fn after_each_round<F, J>(
    st: &AppState,
    stop: impl std::future::Future<Output = ()>,
    what: &str,
    judge: J,
) where
    J: Fn(AppState) -> F,
    F: std::future::Future<Output = Result<(), gpuhub_store::StoreError>>,
{
    tokio::pin!(stop);
    let mut rounds = st.metrics.rounds();
    loop {
        tokio::select! {
            () = &mut stop => return,
            changed = rounds.changed() => {
                if changed.is_err() {
                    return;
                }
                if let Err(e) = judge(st.clone()).await {
                    tracing::warn!(error = %e, "{what}: cannot judge this round");
                }
            }
        }
    }
}

async fn round(st: &AppState, rule: &IdleRule) -> Result<(), gpuhub_store::StoreError> {
    let snapshot = st.metrics.get();
    let now = snapshot.at.unwrap_or_else(|| st.clock.now());
    let filter = WorkloadFilter { owner: None, states: Some(vec![WorkloadState::Running]) };
    let running = st.store.list_workloads(&filter).await?;
    let facts: HashMap<String, Facts> = running
        .iter()
        .map(|w| {
            let f = Facts {
                kind: w.kind,
                last_used: st.activity.last_used(&w.id),
                kept_until: st.idle.kept_until(&w.id, now),
            };
            (w.id.clone(), f)
        })
        .collect();
    let actions = {
        let mut tracker = st.idle.tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tracker.observe(rule, &snapshot, &facts, now)
    };
    st.activity.retain(&facts.keys().cloned().collect());
    st.idle.forget_ended(now);
    for action in actions {
        let Some(w) = running.iter().find(|w| match &action {
            IdleAction::Warn { workload_id, .. } | IdleAction::Stop { workload_id, .. } => &w.id == workload_id,
        }) else {
            continue;
        };
        let who = format!("{}/{}", w.owner, w.name);
        match action {
            IdleAction::Warn { since, stop_at, .. } => {
                tracing::info!(workload = %who, %since, %stop_at, "idle gpus: owner warned");
                notify(
                    st,
                    serde_json::json!({"event": "idle-warning", "workload": who, "owner": w.owner,
                    "since": since, "stop_at": stop_at, "gpus": w.gpus}),
                );
            }
            IdleAction::Stop { since, detail, .. } => {
                tracing::info!(workload = %who, %since, "idle gpus: stopping");
                notify(
                    st,
                    serde_json::json!({"event": "idle-stop", "workload": who, "owner": w.owner,
                    "since": since, "gpus": w.gpus, "detail": detail}),
                );
                let reason = StopReason::Idle { since, at: now, detail };
                let (controller, id) = (st.controller.clone(), w.id.clone());
                // the stop answers once the run has ended; the next round must not wait for it
                tokio::spawn(async move {
                    if let Err(e) = controller.stop(&id, reason).await {
                        tracing::warn!(workload = %who, error = %e, "idle gpus: the stop failed");
                    }
                });
            }
        }
    }
    Ok(())
}

/// Posts `body` to the configured webhook, in the background; a failure is logged.
pub(crate) fn notify(st: &AppState, body: serde_json::Value) {
    let Some(url) = st.config.idle.webhook.clone() else { return };
    tokio::spawn(async move {
        let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build();
        let sent = match client {
            Ok(c) => c.post(&url).json(&body).send().await.and_then(|r| r.error_for_status()).map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::warn!(url, error = %e, "idle gpus: the webhook failed");
        }
    });
}

/// The admin's report: every idle workload that still runs.
pub async fn report(st: &AppState) -> Result<Vec<IdleReportRow>, gpuhub_store::StoreError> {
    let now = st.clock.now();
    let mut rows = Vec::new();
    for id in st.idle.idle_ids() {
        let Ok(w) = st.store.get_workload_by_id(&id).await else { continue };
        if let Some(idle) = st.idle.view(&id, now) {
            let queue = if w.queue.is_empty() { "default".to_owned() } else { w.queue.clone() };
            rows.push(IdleReportRow { workload: format!("{}/{}", w.owner, w.name), gpus: w.gpus, queue, idle });
        }
    }
    rows.sort_by(|a, b| a.idle.since.cmp(&b.idle.since).then_with(|| a.workload.cmp(&b.workload)));
    Ok(rows)
}
