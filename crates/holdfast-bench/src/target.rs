//! What a flash sale runs against: any `Store` in this process (holdfast on
//! its SQL backends, the legacy Redis store), one of the baselines, or a
//! running `holdfast serve` over HTTP (`crate::http`). Each target sells one
//! hot (item, location) and can tell, at the end, what its own books say was
//! sold and held.

use std::sync::Arc;

use async_trait::async_trait;
use holdfast_core::{
    Error, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReservationId, ReserveRequest, ShopId, StockChange,
    StockRequest, Store, Ttl,
};

use holdfast_core::ConnHold;
use holdfast_sql::{Housekeeping, ServerState, TableSize};

/// What the target's books say after the sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Books {
    /// Units sold (claimed).
    pub committed: i64,
    /// Units held by open holds.
    pub reserved: i64,
    /// Units still free.
    pub available: i64,
    /// The target's own invariant check; `None` when the target cannot run
    /// it (an HTTP target whose token is not an admin token).
    pub audit_ok: Option<bool>,
}

/// holdfast's tables and the database server's clean-up at one moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tables {
    pub tables: Vec<TableSize>,
    /// Every table above, with its indexes.
    pub total_bytes: u64,
    #[serde(flatten)]
    pub server: ServerState,
}

/// Counters a target keeps about itself, as in `StoreStats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TargetStats {
    pub retries: u64,
    pub deadlocks: u64,
    /// Reserves sent in coalesced batches, and the batches.
    pub reserves_batched: u64,
    pub reserve_batches: u64,
}

#[async_trait]
pub trait Target: Send + Sync {
    /// Puts `stock` units on sale.
    async fn setup(&self, stock: u32) -> Result<(), Error>;
    /// Holds `qty` units; `Ok(None)` when there are not enough.
    async fn reserve(&self, key: &str, qty: u32) -> Result<Option<i64>, Error>;
    /// Payment succeeded; returns the units sold.
    async fn claim(&self, id: i64) -> Result<u64, Error>;
    async fn release(&self, id: i64) -> Result<(), Error>;
    async fn books(&self) -> Result<Books, Error>;
    /// Retries and deadlocks so far (the flash sale subtracts the counts at
    /// its start).
    async fn stats(&self) -> TargetStats;
    /// Connection hold per conn tag so far, where the store reports it
    /// (`None` otherwise); the flash sale keeps the difference over the run.
    async fn connections(&self) -> Result<Option<Vec<ConnHold>>, Error> {
        Ok(None)
    }
    /// holdfast's tables by size and the server's clean-up, now; `None`
    /// where the target cannot tell (baselines, HTTP).
    async fn tables(&self) -> Option<Tables> {
        None
    }
}

/// Any `Store`: holdfast itself on any backend, or the legacy Redis store.
#[derive(Debug)]
pub struct StoreTarget {
    pub store: Arc<dyn Store>,
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    /// Hold lifetime; long enough that nothing expires during a run.
    pub ttl: Ttl,
    /// The store is holdfast's SQL store, whose connection hold per tag this
    /// process records (`holdfast_sql::connection_report`).
    pub conn_report: bool,
    /// The SQL database's table sizes and clean-up, where there is one.
    pub housekeeping: Option<Arc<dyn Housekeeping>>,
}

impl StoreTarget {
    pub fn new(store: Arc<dyn Store>, shop: ShopId) -> Self {
        Self {
            store,
            shop,
            item: ItemId::new("limited-sneaker").expect("valid"),
            location: LocationId::new("main-warehouse").expect("valid"),
            ttl: Ttl::DEFAULT,
            conn_report: false,
            housekeeping: None,
        }
    }
}

#[async_trait]
impl Target for StoreTarget {
    async fn setup(&self, stock: u32) -> Result<(), Error> {
        let set = StockChange::Set(stock as i64);
        self.store
            .change_stock(&StockRequest::new(self.shop.clone(), self.item.clone(), self.location.clone(), set)?)
            .await?;
        Ok(())
    }

    async fn reserve(&self, key: &str, qty: u32) -> Result<Option<i64>, Error> {
        let line = Line {
            item: self.item.clone(),
            quantity: Quantity::new(qty as i64)?,
            locations: Some(vec![self.location.clone()]),
        };
        let req =
            ReserveRequest::new(self.shop.clone(), IdempotencyKey::new(key)?, vec![line], self.ttl, false, false)?;
        match self.store.reserve(&req).await {
            Ok(r) => Ok(Some(r.reservation.id.get())),
            Err(Error::InsufficientStock(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn claim(&self, id: i64) -> Result<u64, Error> {
        Ok(self.store.claim(&self.shop, ReservationId::new(id)?).await?.units())
    }

    async fn release(&self, id: i64) -> Result<(), Error> {
        self.store.release(&self.shop, ReservationId::new(id)?).await.map(|_| ())
    }

    async fn books(&self) -> Result<Books, Error> {
        let levels = self.store.levels(&self.shop, &self.item).await?;
        let q = levels
            .locations
            .iter()
            .find(|l| l.location == self.location)
            .map(|l| l.quantities)
            .ok_or_else(|| Error::Internal("the sale's location vanished".into()))?;
        let audit = self.store.audit(Some(&self.shop)).await?;
        Ok(Books { committed: q.committed, reserved: q.reserved, available: q.available, audit_ok: Some(audit.ok()) })
    }

    async fn stats(&self) -> TargetStats {
        let s = self.store.stats();
        TargetStats {
            retries: s.retries,
            deadlocks: s.deadlocks,
            reserves_batched: s.reserves_batched,
            reserve_batches: s.reserve_batches,
        }
    }

    async fn connections(&self) -> Result<Option<Vec<ConnHold>>, Error> {
        Ok(self.conn_report.then(holdfast_sql::connection_report))
    }

    async fn tables(&self) -> Option<Tables> {
        let h = self.housekeeping.as_ref()?;
        // A sample that fails (the server is busy) is left out, not fatal.
        let tables = h.table_sizes().await.ok()?;
        let server = h.server_state().await.ok()?;
        Some(Tables { total_bytes: tables.iter().map(|t| t.bytes).sum(), tables, server })
    }
}
