//! `GET /v1/notifications/status`: how far behind each notification sink
//! is (backlog, oldest event waiting, delivered, failed and dropped
//! counts, the last error), for an operator looking at a receiver outage.

use crate::control::Control;
use crate::notify::OutboxStatus;
use axum::extract::State;
use axum::Json;
use std::sync::Arc;

/// The notification outbox, per sink.
#[utoipa::path(get, path = "/v1/notifications/status", operation_id = "notificationsStatus",
    responses((status = 200, description = "Backlog and counters per sink", body = OutboxStatus)))]
pub async fn status<C: Control>(State(ctl): State<Arc<C>>) -> Json<OutboxStatus> {
    Json(ctl.notifications())
}
