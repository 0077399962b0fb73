//! The wire types of `/v1`, exactly as the README documents them. They are separate
//! from the domain types on purpose: a change to `holdfast-core`'s serde
//! cannot change the HTTP contract unnoticed, and each carries its OpenAPI
//! schema. Request bodies refuse unknown fields (a misspelt `allow_partial`
//! must not be ignored) and parse ids and quantities into the domain's
//! checked types, so a bad value is refused while the body is read.

use chrono::{DateTime, Utc};
use holdfast_core::{
    IdempotencyKey, ItemId, ItemLevels, Line, LocationId, LocationLevel, Quantity, Reservation, ReservationStatus,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateReservation {
    /// Idempotency key, unique per shop (e.g. the checkout token); 1–128 of `A-Za-z0-9_-.:`.
    #[schema(value_type = String, example = "checkout-7f3a")]
    pub key: IdempotencyKey,
    /// 1 to 100 lines, each item once.
    pub lines: Vec<LineBody>,
    /// 1 to 86400; default 600.
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
    #[schema(value_type = String, example = "sku-1")]
    pub item: ItemId,
    /// 1 to 10000.
    #[schema(value_type = i64, minimum = 1, maximum = 10000)]
    pub quantity: Quantity,
    /// Candidate locations in order of preference; absent: every location in
    /// ascending id order.
    #[schema(value_type = Option<Vec<String>>)]
    pub locations: Option<Vec<LocationId>>,
}

impl From<LineBody> for Line {
    fn from(l: LineBody) -> Self {
        Line { item: l.item, quantity: l.quantity, locations: l.locations }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// New lifetime from now: 1 to 86400.
    pub ttl_seconds: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ReservationBody {
    pub id: i64,
    pub key: String,
    /// held, claimed, released or expired.
    pub status: String,
    pub expires_at: DateTime<Utc>,
    pub lines: Vec<AllocationBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AllocationBody {
    pub item: String,
    pub location: String,
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
    pub on_hand: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdjustStock {
    /// Non-zero, −1,000,000,000 to 1,000,000,000.
    pub delta: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FulfilStock {
    /// Committed units shipped: 1 to 1,000,000,000.
    pub quantity: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LevelBody {
    pub location: String,
    pub on_hand: i64,
    pub available: i64,
    pub reserved: i64,
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
    pub item: String,
    #[serde(flatten)]
    pub level: LevelBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ItemLevelsBody {
    pub item: String,
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
    #[schema(value_type = Vec<Object>)]
    pub breaches: Vec<holdfast_core::AuditRow>,
    /// Pool or hold rows with no ledger row.
    #[schema(value_type = Vec<Object>)]
    pub orphans: Vec<holdfast_core::AuditRow>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok` (`/healthz`); `ready`, or `degraded` when some pods cannot be
    /// reached (`/readyz`).
    pub status: &'static str,
    /// With pods: each pod and whether it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<PodHealth>>,
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
