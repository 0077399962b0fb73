//! Probes: `/healthz` says the process answers; `/readyz` that the database
//! does too (one indexed read of the token table, bounded in time).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::HealthBody;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = HealthBody)))]
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { status: "ok" })
}

/// The database is reachable (and migrated).
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, body = HealthBody), (status = 503, body = ErrorBody))
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<HealthBody>> {
    let unavailable = |why: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why);
    match tokio::time::timeout(Duration::from_secs(2), state.db.tokens.find_token("")).await {
        Ok(Ok(_)) => Ok(Json(HealthBody { status: "ready" })),
        Ok(Err(e)) => Err(unavailable(format!("database check failed: {}", e.code()))),
        Err(_) => Err(unavailable("database check took over 2 s".into())),
    }
}
