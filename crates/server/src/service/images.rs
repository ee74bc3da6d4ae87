//! Users' personal images (workspaces saved as images): removing one, and what an engine's refusal of
//! an image operation means.

use super::{Kind, ServiceError};
use crate::state::AppState;
use gpuhub_core::user::User;
use gpuhub_driver::EngineError;

/// Removes `user`'s personal image `name` from the engine and the catalog (refused while a workload
/// runs it: the engine's refusal is [`Kind::Conflict`]).
pub async fn delete_personal(st: &AppState, user: &User, name: &str) -> Result<(), ServiceError> {
    let image = st.store.get_personal_image(&user.username, name).await?;
    match st.engine.remove_image(&image.reference).await {
        Ok(()) | Err(EngineError::NotFound(_)) => {}
        Err(e) => return Err(engine_error(e)),
    }
    st.store.delete_personal_image(&user.username, name).await?;
    Ok(())
}

/// This installation's id (made at its first start), which names its personal images and users'
/// networks apart from another installation's on the same engine.
pub async fn installation(st: &AppState) -> Result<String, ServiceError> {
    st.store
        .get_setting("instance_id")
        .await?
        .ok_or_else(|| ServiceError::internal("this installation has no instance_id setting"))
}

/// An engine's answer to saving or removing an image: a container gone or an image in use is a
/// conflict.
pub fn engine_error(e: EngineError) -> ServiceError {
    match e {
        EngineError::Unsupported { .. } => ServiceError::invalid(e.to_string()),
        EngineError::NotFound(_) => ServiceError::conflict(format!("the workspace's container is gone: {e}")),
        EngineError::Rejected(m) => ServiceError::conflict(m),
        EngineError::Unavailable(_) => ServiceError::new(Kind::Unavailable, e.to_string()),
        other => ServiceError::internal(other),
    }
}
