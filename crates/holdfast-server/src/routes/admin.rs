//! `/admin/…`: admin tokens only. The audit of the accounting invariant, the
//! connection report, and the Redis migration's modes and kill switch (only
//! when serving with `--redis-url`).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use holdfast_core::{ConnHold, ShopId};
use holdfast_redis::{AdminModes, Migration, ModeChange, ModesView};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Body, body};
use crate::api::AuditBody;
use crate::auth::Admin;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this shop (default: every shop).
    #[param(value_type = ShopId, required = false)]
    pub shop: Option<String>,
}

/// Check `on_hand = unpooled + pooled + reserved + committed` everywhere.
#[utoipa::path(
    get, path = "/admin/audit", tag = "admin", operation_id = "audit",
    params(AuditQuery),
    responses((status = 200, description = "the audit's findings", body = AuditBody))
)]
pub async fn audit(
    State(state): State<AppState>,
    _admin: Admin,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> ApiResult<Json<AuditBody>> {
    let shop = q?.0.shop.map(ShopId::new).transpose()?;
    let report = state.store.audit(shop.as_ref()).await?;
    Ok(Json(AuditBody { ok: report.ok(), checked: report.checked, breaches: report.breaches, orphans: report.orphans }))
}

/// `GET /admin/connections`: per-tag connection use since the process started.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionsBody {
    /// Sorted by total hold time, longest first.
    pub tags: Vec<ConnHold>,
}

/// Who held database connections, and for how long, per conn tag.
#[utoipa::path(
    get, path = "/admin/connections", tag = "admin", operation_id = "connections",
    responses((status = 200, description = "connection use per conn tag", body = ConnectionsBody))
)]
pub async fn connections(_admin: Admin) -> Json<ConnectionsBody> {
    Json(ConnectionsBody { tags: holdfast_sql::connection_report() })
}

fn migration(state: &AppState) -> ApiResult<&Migration> {
    state.migration.as_ref().ok_or_else(|| {
        ApiError::not_found("this server runs without --redis-url: there are no modes and no kill switch")
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ModesQuery {
    /// Comma-separated shop ids whose mode in force to show.
    #[param(pattern = "^,*(?:[A-Za-z0-9_.:-]{1,64},+)*(?:[A-Za-z0-9_.:-]{1,64})?$")]
    pub shops: Option<String>,
}

/// The mode rules (shop pins, rollout percentages, kill switch), the mode of
/// the shops asked for, and the shadow counters. Needs `--redis-url`.
#[utoipa::path(
    get, path = "/admin/modes", tag = "admin", operation_id = "modes",
    params(ModesQuery),
    responses(
        (status = 200, description = "rules, resolved modes, shadow counters", body = AdminModes),
        (status = 404, description = "`not_found`: serving without --redis-url", body = ErrorBody),
    )
)]
pub async fn modes(
    State(state): State<AppState>,
    _admin: Admin,
    q: Result<Query<ModesQuery>, QueryRejection>,
) -> ApiResult<Json<AdminModes>> {
    let shops = match q?.0.shops {
        Some(list) => list.split(',').filter(|s| !s.is_empty()).map(ShopId::new).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    Ok(Json(migration(&state)?.admin_view(&shops)))
}

/// One change to the rules: `{"shop": "s1", "mode": "sql-primary"}` (`null`
/// removes the pin) or `{"rollout": "sql", "percent": 10}` (with pods, add
/// `"pod": "p2"` to roll out one pod's shops only). Needs `--redis-url`.
#[utoipa::path(
    put, path = "/admin/modes", tag = "admin", operation_id = "set_mode",
    request_body = ModeChange,
    responses(
        (status = 200, description = "the rules now in force", body = ModesView),
        (status = 404, description = "`not_found`: serving without --redis-url", body = ErrorBody),
        (status = 422, description = "`invalid_request`, also for a `pod` the pods file does not name", body = ErrorBody),
    )
)]
pub async fn set_mode(
    State(state): State<AppState>,
    _admin: Admin,
    change: Body<ModeChange>,
) -> ApiResult<Json<ModesView>> {
    let m = migration(&state)?;
    let change = body(change)?;
    Ok(Json(m.control.apply(&change).await?))
}

/// `{"engaged": bool}`, the body and answer of the kill-switch routes.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KillSwitchBody {
    pub engaged: bool,
}

/// Whether the kill switch is engaged. Needs `--redis-url`.
#[utoipa::path(
    get, path = "/admin/kill-switch", tag = "admin", operation_id = "kill_switch",
    responses(
        (status = 200, description = "whether it is engaged", body = KillSwitchBody),
        (status = 404, description = "`not_found`: serving without --redis-url", body = ErrorBody),
    )
)]
pub async fn kill_switch(State(state): State<AppState>, _admin: Admin) -> ApiResult<Json<KillSwitchBody>> {
    Ok(Json(KillSwitchBody { engaged: migration(&state)?.control.kill_switch().engaged }))
}

/// Engaged: every `sql-primary` shop goes back to Redis at once (stored in
/// the database; every process follows within a second). Needs `--redis-url`.
#[utoipa::path(
    post, path = "/admin/kill-switch", tag = "admin", operation_id = "set_kill_switch",
    request_body = KillSwitchBody,
    responses(
        (status = 200, description = "whether it is engaged now", body = KillSwitchBody),
        (status = 404, description = "`not_found`: serving without --redis-url", body = ErrorBody),
    )
)]
pub async fn set_kill_switch(
    State(state): State<AppState>,
    _admin: Admin,
    b: Body<KillSwitchBody>,
) -> ApiResult<Json<KillSwitchBody>> {
    let m = migration(&state)?;
    let engaged = body(b)?.engaged;
    Ok(Json(KillSwitchBody { engaged: m.control.set_kill_switch(engaged).await?.engaged }))
}
