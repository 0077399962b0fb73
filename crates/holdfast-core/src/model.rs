//! Requests, reservations, stock levels and audit rows: the values that cross
//! the `Store` boundary.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Invalid;
use crate::ids::{IdempotencyKey, ItemId, LocationId, Quantity, ReservationId, ShopId, Ttl};

/// Most lines one reservation may have.
pub const MAX_LINES: usize = 100;
/// Most candidate locations one line may name.
pub const MAX_CANDIDATES: usize = 32;

/// One cart line as the caller sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub item: ItemId,
    pub quantity: Quantity,
    /// Ordered candidate locations; `None` means every location that stocks
    /// the item, in ascending `location_id` order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<LocationId>>,
}

/// A validated reserve request: at most [`MAX_LINES`] lines, each item once,
/// candidate lists non-empty and without repeats. Its fields are read
/// through accessors, so no request that skipped [`ReserveRequest::new`]
/// reaches a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveRequest {
    shop: ShopId,
    key: IdempotencyKey,
    lines: Vec<Line>,
    ttl: Ttl,
    allow_partial: bool,
    allow_split: bool,
}

impl ReserveRequest {
    pub fn new(
        shop: ShopId,
        key: IdempotencyKey,
        lines: Vec<Line>,
        ttl: Ttl,
        allow_partial: bool,
        allow_split: bool,
    ) -> Result<Self, Invalid> {
        if lines.is_empty() {
            return Err(Invalid::new("lines", "at least one line is required"));
        }
        if lines.len() > MAX_LINES {
            return Err(Invalid::new(
                "lines",
                format!("at most {MAX_LINES} lines per reservation (got {})", lines.len()),
            ));
        }
        let mut items = BTreeSet::new();
        for line in &lines {
            if !items.insert(&line.item) {
                return Err(Invalid::new(
                    "lines",
                    format!("item {} appears twice; send one line with the total quantity", line.item),
                ));
            }
            if let Some(locs) = &line.locations {
                if locs.is_empty() || locs.len() > MAX_CANDIDATES {
                    return Err(Invalid::new(
                        "locations",
                        format!("give 1 to {MAX_CANDIDATES} candidate locations, or none for all"),
                    ));
                }
                let distinct: BTreeSet<_> = locs.iter().collect();
                if distinct.len() != locs.len() {
                    return Err(Invalid::new("locations", "a candidate location is repeated"));
                }
            }
        }
        Ok(Self { shop, key, lines, ttl, allow_partial, allow_split })
    }

    pub fn shop(&self) -> &ShopId {
        &self.shop
    }

    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines
    }

    pub fn ttl(&self) -> Ttl {
        self.ttl
    }

    /// Hold what there is instead of nothing.
    pub fn allow_partial(&self) -> bool {
        self.allow_partial
    }

    /// Fill a line from several of its candidate locations.
    pub fn allow_split(&self) -> bool {
        self.allow_split
    }

    /// The same request with another lifetime (every [`Ttl`] is valid).
    pub fn with_ttl(mut self, ttl: Ttl) -> Self {
        self.ttl = ttl;
        self
    }

    /// A canonical text of the lines, stored with the reservation: a replay
    /// with the same key must send the same lines (in any order).
    pub fn fingerprint(&self) -> String {
        let mut lines: Vec<String> = self
            .lines
            .iter()
            .map(|l| {
                let locs = l
                    .locations
                    .as_ref()
                    .map(|v| v.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(","))
                    .unwrap_or_default();
                format!("{}:{}@{}", l.item, l.quantity.get(), locs)
            })
            .collect();
        lines.sort();
        lines.join(";")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReservationStatus {
    Held,
    Claimed,
    Released,
    Expired,
}

impl ReservationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Claimed => "claimed",
            Self::Released => "released",
            Self::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "held" => Self::Held,
            "claimed" => Self::Claimed,
            "released" => Self::Released,
            "expired" => Self::Expired,
            _ => return None,
        })
    }
}

impl fmt::Display for ReservationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Units of one item held at one location by a reservation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Allocation {
    pub item: ItemId,
    pub location: LocationId,
    pub quantity: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub id: ReservationId,
    pub key: IdempotencyKey,
    pub status: ReservationStatus,
    pub expires_at: DateTime<Utc>,
    pub lines: Vec<Allocation>,
}

impl Reservation {
    pub fn units(&self) -> u64 {
        self.lines.iter().map(|l| l.quantity as u64).sum()
    }
}

/// The answer to a reserve: the reservation, and whether this call created it
/// (`false` for an idempotent replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub reservation: Reservation,
    pub created: bool,
}

/// Quantities of one (item, location).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Quantities {
    pub on_hand: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocationLevel {
    pub location: LocationId,
    #[serde(flatten)]
    pub quantities: Quantities,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemLevels {
    pub item: ItemId,
    pub locations: Vec<LocationLevel>,
}

/// The terms of the accounting invariant for one (shop, item, location), as
/// read in one consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRow {
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    pub on_hand: i64,
    /// Available units counted on the ledger row (not in the pool).
    pub unpooled: i64,
    /// Unit rows in the pool.
    pub pooled: i64,
    pub reserved: i64,
    pub committed: i64,
}

impl AuditRow {
    /// `on_hand = unpooled + pooled + reserved + committed`, every term ≥ 0.
    pub fn holds(&self) -> bool {
        let terms = [self.on_hand, self.unpooled, self.pooled, self.reserved, self.committed];
        terms.iter().all(|t| *t >= 0) && self.on_hand == self.unpooled + self.pooled + self.reserved + self.committed
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// How many (shop, item, location) were checked.
    pub checked: u64,
    /// The rows where the invariant does not hold (empty when all is well).
    pub breaches: Vec<AuditRow>,
    /// Units in the pool or held by reservations with no ledger row at all.
    pub orphans: Vec<AuditRow>,
}

impl AuditReport {
    pub fn ok(&self) -> bool {
        self.breaches.is_empty() && self.orphans.is_empty()
    }

    /// Builds a report from every row read; keeps only the failing ones.
    pub fn from_rows(rows: impl IntoIterator<Item = AuditRow>, orphans: Vec<AuditRow>) -> Self {
        let mut checked = 0;
        let mut breaches = Vec::new();
        for row in rows {
            checked += 1;
            if !row.holds() {
                breaches.push(row);
            }
        }
        Self { checked, breaches, orphans }
    }
}

/// Counters a store keeps about itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStats {
    /// Transactions retried after a deadlock, serialization failure, busy
    /// database or a contended pool.
    pub retries: u64,
    /// Of those, the deadlocks and serialization failures the database reported.
    pub deadlocks: u64,
    /// Pool refills from the ledger.
    pub replenishments: u64,
    /// Holds released because they expired (sweeper and inline).
    pub expired: u64,
    /// Reserves that went to the database in a coalesced batch, and the
    /// batches they went in: their ratio is the mean batch size.
    pub reserves_batched: u64,
    pub reserve_batches: u64,
}

/// The sweeper's backlog as the database shows it: holds still `held` past
/// their expiry. Every process sweeping one database reads the same
/// numbers, so they hold across replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unswept {
    /// How many, counted up to [`Unswept::COUNT_LIMIT`].
    pub holds: u64,
    /// How long ago the oldest of them expired; zero when there is none.
    pub oldest: std::time::Duration,
}

impl Unswept {
    /// Most holds one reading counts: far past any backlog a working
    /// sweeper leaves, and a bound on what the reading costs.
    pub const COUNT_LIMIT: u64 = 10_000;
}

/// A validated stock change of one (item, location) of a shop: built only
/// through [`StockRequest::new`], which refuses a change out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockRequest {
    shop: ShopId,
    item: ItemId,
    location: LocationId,
    change: StockChange,
}

impl StockRequest {
    pub fn new(shop: ShopId, item: ItemId, location: LocationId, change: StockChange) -> Result<Self, Invalid> {
        Ok(Self { shop, item, location, change: change.validate()? })
    }

    pub fn shop(&self) -> &ShopId {
        &self.shop
    }

    pub fn item(&self) -> &ItemId {
        &self.item
    }

    pub fn location(&self) -> &LocationId {
        &self.location
    }

    pub fn change(&self) -> StockChange {
        self.change
    }
}

/// Stock a shop changes by hand: receiving, counting, damage, shipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockChange {
    /// Set `on_hand` to this value.
    Set(i64),
    /// Add this (possibly negative) delta to `on_hand`.
    Adjust(i64),
    /// Ship this many committed units: `on_hand` and `committed` both fall.
    Fulfil(i64),
}

impl StockChange {
    pub fn validate(self) -> Result<Self, Invalid> {
        const LIMIT: i64 = 1_000_000_000;
        match self {
            StockChange::Set(n) if !(0..=LIMIT).contains(&n) => {
                Err(Invalid::new("on_hand", format!("must be between 0 and {LIMIT} (got {n})")))
            }
            StockChange::Adjust(d) if d == 0 || !(-LIMIT..=LIMIT).contains(&d) => {
                Err(Invalid::new("delta", format!("must be non-zero and between -{LIMIT} and {LIMIT} (got {d})")))
            }
            StockChange::Fulfil(q) if !(1..=LIMIT).contains(&q) => {
                Err(Invalid::new("quantity", format!("must be between 1 and {LIMIT} (got {q})")))
            }
            ok => Ok(ok),
        }
    }
}
