//! The wire types of `/v1`, exactly as the README documents them. They are separate
//! from the domain types on purpose: a change to `holdfast-core`'s serde
//! cannot change the HTTP contract unnoticed, and each carries its OpenAPI
//! schema. Request bodies refuse unknown fields (a misspelt `allow_partial`
//! must not be ignored) and parse ids and quantities into the domain's
//! checked types, so a bad value is refused while the body is read. An
//! integer may be written `3` or `3.0`: JSON Schema's `integer` is both.

use chrono::{DateTime, Utc};
use holdfast_core::ids::{integer, optional_integer};
use holdfast_core::{
    AuditRow, IdempotencyKey, ItemId, ItemLevels, Line, LocationId, LocationLevel, MAX_CANDIDATES, Quantity,
    Reservation, ReservationId, ReservationStatus,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ArrayBuilder, Object, ObjectBuilder, OneOfBuilder, Schema, Type};

/// The most and least of a stock quantity a request may name.
pub const STOCK_LIMIT: i64 = 1_000_000_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateReservation {
    pub key: IdempotencyKey,
    /// 1 to 100 lines, each item once (JSON Schema cannot say "once": a
    /// repeated item is `422 invalid_request`).
    #[schema(min_items = 1, max_items = 100)]
    pub lines: Vec<LineBody>,
    /// How long the hold lives, in seconds: 1 to 86400; absent or `null`: 600.
    #[schema(minimum = 1, maximum = 86400)]
    #[serde(default, deserialize_with = "optional_integer")]
    pub ttl_seconds: Option<i64>,
    /// Hold what there is instead of nothing.
    #[serde(default)]
    pub allow_partial: bool,
    /// Fill a line from several locations.
    #[serde(default)]
    pub allow_split: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LineBody {
    pub item: ItemId,
    pub quantity: Quantity,
    /// Candidate locations in order of preference, 1 to 32, none twice;
    /// absent or `null`: every location in ascending id order.
    #[schema(schema_with = candidate_locations)]
    pub locations: Option<Vec<LocationId>>,
}

fn candidate_locations() -> Schema {
    ArrayBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::Array, Type::Null]))
        .items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name("LocationId")))
        .min_items(Some(1))
        .max_items(Some(MAX_CANDIDATES))
        .unique_items(true)
        .description(Some(
            "Candidate locations in order of preference, 1 to 32, none twice; absent or `null`: every location in \
             ascending id order.",
        ))
        .into()
}

impl From<LineBody> for Line {
    fn from(l: LineBody) -> Self {
        Line { item: l.item, quantity: l.quantity, locations: l.locations }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// New lifetime from now, in seconds: 1 to 86400.
    #[schema(minimum = 1, maximum = 86400)]
    #[serde(deserialize_with = "integer")]
    pub ttl_seconds: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReservationBody {
    #[schema(value_type = ReservationId)]
    pub id: i64,
    #[schema(value_type = IdempotencyKey)]
    pub key: String,
    #[schema(value_type = ReservationStatus)]
    pub status: String,
    pub expires_at: DateTime<Utc>,
    /// What is held (or was): per item and location.
    pub lines: Vec<AllocationBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AllocationBody {
    #[schema(value_type = ItemId)]
    pub item: String,
    #[schema(value_type = LocationId)]
    pub location: String,
    #[schema(value_type = Quantity)]
    pub quantity: u32,
}

impl From<Reservation> for ReservationBody {
    fn from(r: Reservation) -> Self {
        let status: ReservationStatus = r.status;
        Self {
            id: r.id.get(),
            key: r.key.to_string(),
            status: status.as_str().to_string(),
            expires_at: r.expires_at,
            lines: r
                .lines
                .into_iter()
                .map(|a| AllocationBody {
                    item: a.item.to_string(),
                    location: a.location.to_string(),
                    quantity: a.quantity,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStock {
    /// 0 to 1,000,000,000.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    #[serde(deserialize_with = "integer")]
    pub on_hand: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdjustStock {
    /// Non-zero, −1,000,000,000 to 1,000,000,000.
    #[schema(schema_with = non_zero_delta)]
    #[serde(deserialize_with = "integer")]
    pub delta: i64,
}

fn non_zero_delta() -> Schema {
    let range = |min: i64, max: i64| {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int64)))
            .minimum(Some(min))
            .maximum(Some(max))
    };
    OneOfBuilder::new()
        .item(range(-STOCK_LIMIT, -1))
        .item(range(1, STOCK_LIMIT))
        .description(Some("Units to add to `on_hand`, negative to remove: non-zero, -1,000,000,000 to 1,000,000,000."))
        .into()
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FulfilStock {
    /// Committed units shipped: 1 to 1,000,000,000.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    #[serde(deserialize_with = "integer")]
    pub quantity: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LevelBody {
    #[schema(value_type = LocationId)]
    pub location: String,
    #[schema(minimum = 0)]
    pub on_hand: i64,
    /// `on_hand` less what is reserved and committed: what a reservation can take.
    #[schema(minimum = 0)]
    pub available: i64,
    #[schema(minimum = 0)]
    pub reserved: i64,
    /// Claimed and not yet fulfilled.
    #[schema(minimum = 0)]
    pub committed: i64,
}

impl From<LocationLevel> for LevelBody {
    fn from(l: LocationLevel) -> Self {
        let q = l.quantities;
        Self {
            location: l.location.to_string(),
            on_hand: q.on_hand,
            available: q.available,
            reserved: q.reserved,
            committed: q.committed,
        }
    }
}

/// The answer to a stock change: the (item, location) afterwards.
#[derive(Debug, Serialize, ToSchema)]
pub struct StockBody {
    #[schema(value_type = ItemId)]
    pub item: String,
    #[serde(flatten)]
    pub level: LevelBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ItemLevelsBody {
    #[schema(value_type = ItemId)]
    pub item: String,
    /// Every location that stocks the item, in ascending id order; none for
    /// an item never stocked.
    pub locations: Vec<LevelBody>,
}

impl From<ItemLevels> for ItemLevelsBody {
    fn from(l: ItemLevels) -> Self {
        Self { item: l.item.to_string(), locations: l.locations.into_iter().map(Into::into).collect() }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditBody {
    pub ok: bool,
    /// (shop, item, location) checked.
    pub checked: u64,
    /// Rows where `on_hand = unpooled + pooled + reserved + committed` fails.
    pub breaches: Vec<AuditRow>,
    /// Pool or hold rows with no ledger row.
    pub orphans: Vec<AuditRow>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok` (`/healthz`); `ready`, or `degraded` when some pods cannot be
    /// reached (`/readyz`).
    #[schema(schema_with = health_status)]
    pub status: &'static str,
    /// With pods: each pod and whether it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<PodHealth>>,
}

fn health_status() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ok", "ready", "degraded"]))
        .description(Some("`ok` (`/healthz`); `ready`, or `degraded` when some pods cannot be reached (`/readyz`)."))
        .build()
}

/// One pod's answer to the readiness check.
#[derive(Debug, Serialize, ToSchema)]
pub struct PodHealth {
    pub pod: String,
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
