//! `/admin/…`: admin tokens only. The audit of the accounting invariant;
//! modes, the kill switch and connection reports come with later issues.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use holdfast_core::ShopId;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::AuditBody;
use crate::auth::Admin;
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this shop (default: every shop).
    pub shop: Option<String>,
}

/// Check `on_hand = unpooled + pooled + reserved + committed` everywhere.
#[utoipa::path(
    get, path = "/admin/audit", tag = "admin",
    params(AuditQuery),
    responses((status = 200, body = AuditBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = []))
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
