//! The engine's nodes as people see them (who holds each GPU, whole or in shares) and the image catalog.

use super::{Kind, ServiceError};
use crate::state::AppState;
use gpuhub_api::{GpuHolder, GpuShareView, GpuView, ImageEntry, NodeView};
use gpuhub_core::user::User;
use gpuhub_core::workload::Workload;
use gpuhub_core::{Bytes, CpuMilli, names};

/// Every node of the engine, with who holds each GPU, or the engine's error ([`Kind::Unavailable`]).
pub async fn node_views(st: &AppState) -> Result<Vec<NodeView>, ServiceError> {
    let snapshot = st.controller.inventory().snapshot();
    if let Some(e) = &snapshot.error {
        let mut err = ServiceError::new(
            Kind::Unavailable,
            format!(
                "the {} engine's nodes cannot be read: {e}; workloads stay queued until it answers",
                st.engine.name()
            ),
        );
        err.retry_after = Some(super::RETRY_AFTER);
        return Err(err);
    }
    // every active workload as kept between requests (followed through the controller's changes and
    // every submission): the views are made again only once that moved or the inventory did
    let active = st.active().await?;
    if let Some(c) = st.node_views.lock().unwrap().as_ref()
        && std::sync::Arc::ptr_eq(&c.active, &active)
        && c.inventory_at == snapshot.at
    {
        return Ok(c.views.clone());
    }
    let holding: Vec<&Workload> = active.iter().map(|w| &**w).filter(|w| w.state().holds_resources()).collect();
    let views: Vec<NodeView> = snapshot.nodes.iter().map(|n| node_view(n, &holding, snapshot.nodes.len())).collect();
    *st.node_views.lock().unwrap() =
        Some(crate::state::NodeViewsCache { active, inventory_at: snapshot.at, views: views.clone() });
    Ok(views)
}

/// What runs on a node: each member placed there (a row from before members were kept runs on the only
/// node), with its GPUs.
fn on_node<'a>(node: &'a str, w: &'a Workload, single: bool) -> impl Iterator<Item = &'a [String]> + 'a {
    let legacy = (w.members.is_empty() && single).then_some(w.gpus.as_slice());
    let members = w.members.iter().filter(move |m| m.node.as_deref() == Some(node)).map(|m| m.gpus.as_slice());
    legacy.into_iter().chain(members)
}

fn node_view(n: &gpuhub_driver::EngineNode, active: &[&Workload], count: usize) -> NodeView {
    let c = &n.capacity;
    let single = count == 1;
    let (mut cpu_used, mut mem_used) = (0u64, 0u64);
    let mut held: Vec<(&Workload, &str)> = Vec::new();
    for &w in active {
        for gpus in on_node(&c.name, w, single) {
            cpu_used += w.resources.cpu_milli.0;
            mem_used += w.resources.memory.0;
            held.extend(gpus.iter().map(|g| (w, g.as_str())));
        }
    }
    let gpus = c
        .gpus
        .iter()
        .map(|g| GpuView {
            uuid: g.uuid.clone(),
            index: g.index,
            model: g.model.clone(),
            memory: g.memory,
            holder: held
                .iter()
                .find(|(w, u)| w.resources.gpu_milli == 0 && *u == g.uuid)
                .map(|(w, _)| GpuHolder { owner: w.owner.clone(), workload: w.name.clone() }),
            shares: held
                .iter()
                .filter(|(w, u)| w.resources.gpu_milli > 0 && *u == g.uuid)
                .map(|(w, _)| GpuShareView {
                    owner: w.owner.clone(),
                    workload: w.name.clone(),
                    milli: w.resources.gpu_milli,
                    memory: w.resources.gpu_memory,
                })
                .collect(),
            sharing: g.sharing,
        })
        .collect();
    NodeView {
        name: c.name.clone(),
        state: n.state.clone(),
        cpus: c.cpus.cores(),
        cpus_free: CpuMilli(c.cpus.0.saturating_sub(cpu_used)).cores(),
        memory: c.memory,
        memory_free: Bytes(c.memory.0.saturating_sub(mem_used)),
        gpus,
    }
}

/// Adds or replaces catalog entry `entry` for admin `caller`. The image must be a reference of the
/// distribution spec's grammar (`[registry[:port]/]path[:tag][@digest]`) and present in the engine.
pub async fn create_image(st: &AppState, caller: &User, entry: ImageEntry) -> Result<ImageEntry, ServiceError> {
    super::require_admin(caller)?;
    names::validate("image", &entry.name)?;
    for app in &entry.apps {
        app.validate()?;
    }
    if let Err(why) = gpuhub_core::image::check_reference(&entry.image) {
        return Err(ServiceError::invalid_at(
            "image",
            format!("invalid image: {:?} is not an image reference: {why}", entry.image),
        ));
    }
    if !st.engine.image_exists(&entry.image).await? {
        return Err(ServiceError::invalid(format!(
            "invalid image: the container engine has no image {:?} (build or pull it on the node first)",
            entry.image
        )));
    }
    st.store.upsert_image(&entry).await?;
    Ok(entry)
}

/// Removes catalog entry `name` for admin `caller`; workloads made from it keep their image reference.
pub async fn delete_image(st: &AppState, caller: &User, name: &str) -> Result<(), ServiceError> {
    super::require_admin(caller)?;
    st.store.delete_image(name).await?;
    Ok(())
}
