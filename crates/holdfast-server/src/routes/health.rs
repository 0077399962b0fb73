//! Probes: `/healthz` says the process answers; `/readyz` that the database
//! does too (one indexed read of the token table, bounded in time). With
//! pods each pod is asked at once: ready while at least one pod answers (the
//! process serves that pod's shops; the others answer `503` themselves),
//! with `degraded` and each pod's answer when some do not.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::{HealthBody, PodHealth};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The process is up.
#[utoipa::path(
    get, path = "/healthz", tag = "health", operation_id = "healthz",
    responses((status = 200, description = "`{\"status\": \"ok\"}`", body = HealthBody))
)]
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { status: "ok", pods: None })
}

/// The database is reachable (and migrated).
#[utoipa::path(
    get, path = "/readyz", tag = "health", operation_id = "readyz",
    responses(
        (status = 200, description = "`ready`; with pods, `degraded` when some pods do not answer", body = HealthBody),
        (status = 503, description = "`unavailable`: the database (or every pod) does not answer", body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<HealthBody>> {
    let unavailable = |why: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", why);
    let answers = check_pods(&state).await.map_err(unavailable)?;
    if !state.db.has_pods() {
        return match answers.into_iter().next().and_then(|(_, e)| e) {
            None => Ok(Json(HealthBody { status: "ready", pods: None })),
            Some(why) => Err(unavailable(why)),
        };
    }
    let pods: Vec<PodHealth> =
        answers.into_iter().map(|(pod, error)| PodHealth { pod, ready: error.is_none(), error }).collect();
    let down: Vec<&str> = pods.iter().filter(|p| !p.ready).map(|p| p.pod.as_str()).collect();
    if down.len() == pods.len() {
        return Err(unavailable(format!("no pod answers: {}", down.join(", "))));
    }
    Ok(Json(HealthBody { status: if down.is_empty() { "ready" } else { "degraded" }, pods: Some(pods) }))
}

/// Asks each pod (or the one database) at once, bounded by 2 s: its name,
/// and why it did not answer.
pub async fn check_pods(state: &AppState) -> Result<Vec<(String, Option<String>)>, String> {
    let named = state.db.has_pods();
    let checks: Vec<_> = state
        .db
        .pods()
        .into_iter()
        .map(|pod| {
            tokio::spawn(async move {
                let check = async {
                    match named {
                        true => holdfast_sql::in_pod(pod.name.clone(), pod.db.tokens.find_token("")).await,
                        false => pod.db.tokens.find_token("").await,
                    }
                };
                let answer = match tokio::time::timeout(Duration::from_secs(2), check).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(format!("database check failed: {}", e.code())),
                    Err(_) => Some("database check took over 2 s".to_string()),
                };
                (pod.name, answer)
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(checks.len());
    for check in checks {
        answers.push(check.await.map_err(|e| format!("database check failed: {e}"))?);
    }
    Ok(answers)
}
