//! `holdfast mode reconcile`: makes the two sides equal for one shop before
//! it enters (or after it leaves) shadow mode.
//!
//! * from SQL (default): each Redis counter := SQL's `available`, the Redis
//!   held count := SQL's `reserved`, the legacy ledger := SQL's `on_hand`
//!   and `committed`.
//! * from Redis: SQL's `available` is moved to the Redis counter by a stock
//!   adjustment, so holdfast's own invariant keeps holding.
//!
//! Holds live at the time are not copied: run it when a shop is quiet, or
//! again after the longest hold TTL, and confirm with shadow mode reading
//! zero mismatches.

use holdfast_core::{Error, ItemId, LegacyLedger, LocationId, ShopId, StockChange, StockRequest, Store};
use serde::{Deserialize, Serialize};

use crate::store::RedisStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Redis counters recomputed from SQL.
    FromSql,
    /// SQL availability set from the Redis counters.
    FromRedis,
}

/// One (item, location) that was reconciled: `available` before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciledRow {
    pub item: ItemId,
    pub location: LocationId,
    pub before: i64,
    pub after: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    pub shop: ShopId,
    pub direction: Direction,
    pub rows: Vec<ReconciledRow>,
}

pub async fn reconcile(
    sql: &dyn Store,
    redis: &RedisStore,
    ledger: &dyn LegacyLedger,
    shop: &ShopId,
    direction: Direction,
) -> Result<ReconcileReport, Error> {
    let mut rows = Vec::new();
    match direction {
        Direction::FromSql => {
            let redis_now = redis.shop_quantities(shop).await?;
            for (item, location) in ledger.stocked_locations(shop).await? {
                let levels = sql.levels(shop, &item).await?;
                let Some(l) = levels.locations.into_iter().find(|l| l.location == location) else { continue };
                let before = redis_now
                    .iter()
                    .find(|(i, loc, _)| *i == item && *loc == location)
                    .map(|(_, _, q)| q.available)
                    .unwrap_or(0);
                redis.put_counters(shop, &item, &location, l.quantities).await?;
                rows.push(ReconciledRow { item, location, before, after: l.quantities.available });
            }
        }
        Direction::FromRedis => {
            for (item, location, q) in redis.shop_quantities(shop).await? {
                let levels = sql.levels(shop, &item).await?;
                let current = levels.locations.iter().find(|l| l.location == location).map(|l| l.quantities);
                let before = current.map(|c| c.available).unwrap_or(0);
                let target = q.available.max(0);
                let change = match current {
                    None => Some(StockChange::Set(target)),
                    Some(c) if c.available != target => Some(StockChange::Adjust(target - c.available)),
                    Some(_) => None,
                };
                if let Some(change) = change {
                    sql.change_stock(&StockRequest::new(shop.clone(), item.clone(), location.clone(), change)?).await?;
                }
                rows.push(ReconciledRow { item, location, before, after: target });
            }
        }
    }
    Ok(ReconcileReport { shop: shop.clone(), direction, rows })
}
