//! Editing a workload's terms after submission: its owner (or an admin) lengthens the run-time limit of
//! a queued or running workload within its queue's `max_runtime`; an admin changes a queued workload's
//! priority or queue. The controller applies the edit and records it in the workload's history.

use super::{Kind, Problems, ServiceError};
use crate::state::AppState;
use gpuhub_api::{CreateWorkloadRequest, EditWorkloadRequest};
use gpuhub_core::user::User;
use gpuhub_core::workload::{Workload, WorkloadKind};
use gpuhub_store::StoreError;

/// Applies `req` to `w` for `caller` (who found `w` through [`super::lookup`]: its owner or an admin).
/// Forbidden: priority or queue from a non-admin; a conflict: a state that does not allow the change;
/// invalid: a limit that does not grow or passes the queue's maximum, an unknown queue, an empty edit.
pub async fn edit(
    st: &AppState,
    caller: &User,
    w: &Workload,
    req: &EditWorkloadRequest,
) -> Result<Workload, ServiceError> {
    if req.is_empty() {
        return Err(ServiceError::invalid("nothing to change: give runtime_limit, priority or queue"));
    }
    if req.updates_spec() {
        return update(st, caller, w, req).await;
    }
    if (req.priority.is_some() || req.queue.is_some()) && !caller.is_admin() {
        return Err(ServiceError::new(Kind::Forbidden, "only an admin may change a workload's priority or queue"));
    }
    // the rules on a copy first, for an answer that names the problem before the controller is asked
    let mut edited = w.clone();
    edited.amend(req)?;
    if req.queue.as_ref().is_some_and(|q| *q != w.queue) && w.waits_in_engine() {
        // submitted to an engine's own queue (Slurm's partition and QOS follow the team queue)
        return Err(ServiceError::new(
            Kind::Conflict,
            format!(
                "workload {} already waits in the {} engine's own queue under queue {}, where it cannot move; \
                 submit it anew in the other queue",
                w.name,
                st.engine.name(),
                if w.queue.is_empty() { "default" } else { &w.queue }
            ),
        ));
    }
    if let Some(q) = req.queue.as_deref().filter(|q| !q.is_empty()) {
        let live = st.live_config().await?;
        live.queue_for(&w.owner, true, Some(q))
            .map_err(|e| ServiceError::invalid_at("queue", format!("invalid queue: {e}")))?;
        if *q != w.queue {
            super::disk::check_move(st, w, q).await?;
        }
    }
    if let Some(limit) = edited.runtime_limit.filter(|_| req.runtime_limit.is_some() || req.queue.is_some()) {
        super::submit::check_queue_cap(st, &edited.queue, limit).await?;
    }
    let w = st.controller.edit(&w.id, req.clone(), &caller.username).await?;
    st.controller.kick();
    Ok(w)
}

/// A service's update: its image, command or environment, checked as at submission. A running service
/// is updated by a rolling update where the engine and its nodes allow one (the controller starts the
/// new run beside the serving one and switches once it is ready: `gpuhub_controller::rollout`); else a
/// live service is stopped, changed and queued again, and its history says why; an ended one is only
/// changed. Recorded in its history.
async fn update(
    st: &AppState,
    caller: &User,
    w: &Workload,
    req: &EditWorkloadRequest,
) -> Result<Workload, ServiceError> {
    let field = if req.image.is_some() {
        "image"
    } else if req.command.is_some() {
        "command"
    } else {
        "env"
    };
    if req.runtime_limit.is_some() || req.priority.is_some() || req.queue.is_some() {
        return Err(ServiceError::invalid_at(
            field,
            "invalid update: image, command and env change alone, without runtime_limit, priority or queue",
        ));
    }
    if w.kind != WorkloadKind::Service {
        return Err(ServiceError::invalid_at(
            field,
            format!("invalid {field}: only a service is updated in place; submit a {} anew", w.kind.as_str()),
        ));
    }
    let mut new = w.clone();
    let mut changed = Vec::new();
    // every bad value is answered at once, each with its field, as at submission
    let mut problems = Problems::default();
    if let Some(image) = &req.image {
        let reference = match st.store.get_personal_image(&w.owner, image).await {
            Ok(p) => Some(p.reference),
            Err(StoreError::NotFound { .. }) => {
                match problems.check(super::submit::resolve_image(st, caller, image).await)? {
                    Some((reference, _, pull)) => {
                        if pull {
                            return Err(ServiceError::new(
                                Kind::Conflict,
                                format!(
                                    "the engine does not have {reference}, and an update does not pull: run something \
                                     with it once (it is pulled then), then update"
                                ),
                            )
                            .at("image"));
                        }
                        Some(reference)
                    }
                    None => None,
                }
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(reference) = reference.filter(|r| *r != w.image) {
            changed.push(format!("image {} → {reference}", w.image));
            new.image = reference;
        }
    }
    if let Some(command) = req.command.as_ref().filter(|c| **c != w.command) {
        changed.push("command".to_owned());
        new.command = command.clone();
    }
    if let Some(env) = req.env.as_ref().filter(|e| **e != w.env) {
        changed.push("environment".to_owned());
        new.env = env.clone();
    }
    // the checks of a submission: NUL in arguments, reserved variables, sizes
    let as_submitted = CreateWorkloadRequest {
        command: Some(new.command.clone()),
        env: new.env.clone(),
        ..serde_json::from_value(serde_json::json!({"kind": "service", "image": new.image}))
            .map_err(|e| ServiceError::invalid(e.to_string()))?
    };
    if new.command.iter().any(|a| a.contains('\0')) {
        problems.push(ServiceError::invalid_at("command", "invalid command: arguments must not contain NUL"));
    }
    problems.check(gpuhub_core::env::check_user_env(&new.env).map_err(ServiceError::from))?;
    for p in super::submit::size_problems(&st.config.limits, &as_submitted) {
        problems.push(p);
    }
    problems.finish()?;
    if changed.is_empty() {
        return Ok(w.clone());
    }
    let live = !w.state().is_terminal();
    let change = format!("{} (by {})", changed.join(", "), caller.username);
    let mut note = format!("updated: {change}");
    if live {
        let terms = gpuhub_controller::Terms {
            image: new.image.clone(),
            command: new.command.clone(),
            env: new.env.clone(),
            change: change.clone(),
        };
        match st.controller.update(&w.id, terms).await? {
            gpuhub_controller::Update::Rolling(updated) => return Ok(*updated),
            gpuhub_controller::Update::NotRolled(why) => note = format!("{note}; stop-then-start: {why}"),
        }
    }
    let mut updated = if live { super::stop(st, caller, w).await? } else { w.clone() };
    updated.image = new.image;
    updated.command = new.command;
    updated.env = new.env;
    st.store.update_workload_spec(&updated, &note, st.clock.now()).await?;
    tracing::info!(workload = %w.id, by = %caller.username, change = %note, "service updated");
    if !live {
        return Ok(updated);
    }
    let started = st.controller.start(&w.id).await?;
    st.controller.kick();
    Ok(started)
}
