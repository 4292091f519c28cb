//! `GET /v1/cluster`: the nodes sharing the store, whether each is alive
//! (its heartbeat younger than `[cluster].node_timeout_ms`), how old its
//! last heartbeat is and how many open sessions it held then; on the embedded
//! store, this node alone.

use super::error::{ApiError, ErrorBody};
use crate::cluster::membership::ClusterView;
use crate::control::Control;
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

/// The cluster as this node last read it.
#[utoipa::path(get, path = "/v1/cluster", operation_id = "cluster",
    responses(
        (status = 200, description = "The nodes, their liveness and the open sessions each holds", body = ClusterView),
        (status = 404, description = "No node behind this API", body = ErrorBody),
    ))]
pub async fn get<C: Control>(State(ctl): State<Arc<C>>) -> Result<Json<ClusterView>, ApiError> {
    ctl.cluster()
        .map(Json)
        .ok_or_else(|| ApiError::not_found("no node behind this API"))
}
