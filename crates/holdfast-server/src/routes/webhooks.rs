//! `/v1/shops/{shop}/webhooks…`: a shop's webhook subscriptions — add (the
//! secret is in this answer only), list, remove.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use holdfast_core::{Invalid, Subscription, Topic, Topics};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Body, Params, body, params};
use crate::auth::ShopAccess;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries are POSTed: an `http://` or `https://` URL.
    #[schema(example = "https://shop.example/hooks/holdfast")]
    pub url: String,
    /// Topics to send; absent or empty: every topic. `reservation.held`,
    /// `reservation.claimed`, `reservation.released`, `reservation.expired`.
    pub topics: Option<Vec<String>>,
}

/// A subscription as listed: its secret is never shown again.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookBody {
    #[schema(example = "wh_mfrggzdfmztwq2lk")]
    pub id: String,
    pub url: String,
    pub topics: Vec<String>,
    pub created_at: DateTime<Utc>,
    /// Set when the receiver answered `410 Gone`: nothing is sent to it any more.
    pub disabled_at: Option<DateTime<Utc>>,
}

impl From<Subscription> for WebhookBody {
    fn from(s: Subscription) -> Self {
        WebhookBody {
            id: s.id,
            url: s.url,
            topics: s.topics.iter().map(|t| t.as_str().to_string()).collect(),
            created_at: s.created_at,
            disabled_at: s.disabled_at,
        }
    }
}

/// A new subscription, with the secret its deliveries are signed with.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedWebhook {
    pub id: String,
    pub url: String,
    pub topics: Vec<String>,
    /// `whsec_` and the base64 of 32 random bytes; shown in this answer only.
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookBody>,
}

/// Topic names into a set; every topic when none is named.
pub fn topics(names: &[String]) -> Result<Topics, Invalid> {
    names.iter().map(|n| n.parse::<Topic>()).collect()
}

/// Subscribe a URL to the shop's events.
#[utoipa::path(
    post, path = "/v1/shops/{shop}/webhooks", tag = "webhooks",
    params(("shop" = String, Path, description = "shop id")),
    request_body = CreateWebhook,
    responses(
        (status = 201, description = "subscribed; the secret is shown this once", body = CreatedWebhook),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the token does not reach this shop", body = ErrorBody),
        (status = 422, description = "invalid_request: the URL or a topic", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    access: ShopAccess,
    req: Body<CreateWebhook>,
) -> ApiResult<(StatusCode, Json<CreatedWebhook>)> {
    let b = body(req)?;
    let topics = topics(b.topics.as_deref().unwrap_or_default())?;
    let (sub, secret) = crate::webhooks::subscribe(&*state.db.webhooks, &access.shop, &b.url, topics).await?;
    let listed = WebhookBody::from(sub);
    Ok((StatusCode::CREATED, Json(CreatedWebhook { id: listed.id, url: listed.url, topics: listed.topics, secret })))
}

/// The shop's subscriptions, oldest first.
#[utoipa::path(
    get, path = "/v1/shops/{shop}/webhooks", tag = "webhooks",
    params(("shop" = String, Path, description = "shop id")),
    responses(
        (status = 200, body = WebhookList),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(State(state): State<AppState>, access: ShopAccess) -> ApiResult<Json<WebhookList>> {
    let subs = state.db.webhooks.list_subscriptions(&access.shop).await?;
    Ok(Json(WebhookList { webhooks: subs.into_iter().map(Into::into).collect() }))
}

/// Remove a subscription; deliveries not yet made to it are dropped.
#[utoipa::path(
    delete, path = "/v1/shops/{shop}/webhooks/{id}", tag = "webhooks",
    params(("shop" = String, Path), ("id" = String, Path)),
    responses(
        (status = 204, description = "removed"),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden", body = ErrorBody),
        (status = 404, description = "the shop has no such subscription", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn remove(
    State(state): State<AppState>,
    access: ShopAccess,
    p: Params<(String, String)>,
) -> ApiResult<StatusCode> {
    let id = params(p)?.1;
    if state.db.webhooks.remove_subscription(&access.shop, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("no such webhook subscription"))
    }
}
