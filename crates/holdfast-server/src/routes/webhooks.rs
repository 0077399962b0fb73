//! `/v1/shops/{shop}/webhooks…`: a shop's webhook subscriptions — add (the
//! secret is in this answer only), list, remove.

use std::str::FromStr;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use holdfast_core::{Invalid, Subscription, Topic, Topics, WEBHOOK_URL_MAX, WEBHOOK_URL_PATTERN};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

use super::{Body, PathParam, ShopPath, body};
use crate::auth::ShopAccess;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    #[schema(schema_with = webhook_url)]
    pub url: String,
    /// Topics to send; absent, `null` or empty: every topic.
    #[schema(value_type = Option<Vec<Topic>>)]
    pub topics: Option<Vec<String>>,
}

/// What `subscribe` accepts: the same rule as [`holdfast_core::check_webhook_url`].
fn webhook_url() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(WEBHOOK_URL_PATTERN))
        .max_length(Some(WEBHOOK_URL_MAX))
        .description(Some(
            "Where deliveries are POSTed: an `http://` or `https://` URL with a host and no user name or password, \
             at most 2000 characters of printable ASCII (percent-encode anything else).",
        ))
        .examples(["https://shop.example/hooks/holdfast"])
        .build()
}

/// The ids subscriptions get: `wh_` and 16 of a-z 2-7.
pub const WEBHOOK_ID_PATTERN: &str = "^wh_[a-z2-7]{16}$";

/// A subscription's id, as the service makes them. Any other text is taken
/// as it is: it names no subscription, so the route answers `404`.
#[derive(Debug)]
pub struct WebhookId(pub String);

impl FromStr for WebhookId {
    type Err = Invalid;

    fn from_str(s: &str) -> Result<Self, Invalid> {
        Ok(Self(s.to_string()))
    }
}

impl PathParam for WebhookId {
    const NAME: &'static str = "id";
    const NOTE: Option<&'static str> = Some("any other value answers `404`");
}

impl utoipa::PartialSchema for WebhookId {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(WEBHOOK_ID_PATTERN))
            .description(Some("A webhook subscription: `wh_` and 16 of a-z 2-7"))
            .examples(["wh_mfrggzdfmztwq2lk"])
            .into()
    }
}

impl ToSchema for WebhookId {}

/// A subscription as listed: its secret is never shown again.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookBody {
    #[schema(value_type = WebhookId)]
    pub id: String,
    pub url: String,
    #[schema(value_type = Vec<Topic>)]
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
    #[schema(value_type = WebhookId)]
    pub id: String,
    pub url: String,
    /// The topics it gets: those asked for, or every topic.
    #[schema(value_type = Vec<Topic>)]
    pub topics: Vec<String>,
    /// `whsec_` and the base64 of 32 random bytes; shown in this answer only.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]{43}=$")]
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
    post, path = "/v1/shops/{shop}/webhooks", tag = "webhooks", operation_id = "create_webhook",
    params(ShopAccess),
    request_body = CreateWebhook,
    responses(
        (status = 201, description = "subscribed; the secret is shown this once", body = CreatedWebhook),
        (status = 422, description = "`invalid_request`: the URL or a topic", body = ErrorBody),
    )
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
    get, path = "/v1/shops/{shop}/webhooks", tag = "webhooks", operation_id = "list_webhooks",
    params(ShopAccess),
    responses((status = 200, description = "the shop's subscriptions, oldest first", body = WebhookList))
)]
pub async fn list(State(state): State<AppState>, access: ShopAccess) -> ApiResult<Json<WebhookList>> {
    let subs = state.db.webhooks.list_subscriptions(&access.shop).await?;
    Ok(Json(WebhookList { webhooks: subs.into_iter().map(Into::into).collect() }))
}

/// Remove a subscription; deliveries not yet made to it are dropped.
#[utoipa::path(
    delete, path = "/v1/shops/{shop}/webhooks/{id}", tag = "webhooks", operation_id = "remove_webhook",
    params(ShopPath<WebhookId>),
    responses(
        (status = 204, description = "removed"),
        (status = 404, description = "`not_found`: the shop has no such subscription", body = ErrorBody),
    )
)]
pub async fn remove(State(state): State<AppState>, p: ShopPath<WebhookId>) -> ApiResult<StatusCode> {
    if state.db.webhooks.remove_subscription(&p.shop, &p.at.0).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("no such webhook subscription"))
    }
}
