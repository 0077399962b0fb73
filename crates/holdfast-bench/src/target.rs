//! What a flash sale runs against: holdfast through the `Store` trait, or one
//! of the baselines. Each target sells one hot (item, location) and can tell,
//! at the end, what its own books say was sold and held.

use std::sync::Arc;

use async_trait::async_trait;
use holdfast_core::{
    Error, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReservationId, ReserveRequest, ShopId, StockChange,
    Store, Ttl,
};

/// What the target's books say after the sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Books {
    /// Units sold (claimed).
    pub committed: i64,
    /// Units held by open holds.
    pub reserved: i64,
    /// Units still free.
    pub available: i64,
    /// The target's own invariant check.
    pub audit_ok: bool,
}

/// Counters a target keeps about itself, as in `StoreStats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TargetStats {
    pub retries: u64,
    pub deadlocks: u64,
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
    fn stats(&self) -> TargetStats;
}

/// holdfast itself, on any backend.
#[derive(Debug)]
pub struct StoreTarget {
    pub store: Arc<dyn Store>,
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    /// Hold lifetime; long enough that nothing expires during a run.
    pub ttl: Ttl,
}

impl StoreTarget {
    pub fn new(store: Arc<dyn Store>, shop: ShopId) -> Self {
        Self {
            store,
            shop,
            item: ItemId::new("limited-sneaker").expect("valid"),
            location: LocationId::new("main-warehouse").expect("valid"),
            ttl: Ttl::DEFAULT,
        }
    }
}

#[async_trait]
impl Target for StoreTarget {
    async fn setup(&self, stock: u32) -> Result<(), Error> {
        self.store.change_stock(&self.shop, &self.item, &self.location, StockChange::Set(stock as i64)).await?;
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
        Ok(Books { committed: q.committed, reserved: q.reserved, available: q.available, audit_ok: audit.ok() })
    }

    fn stats(&self) -> TargetStats {
        let s = self.store.stats();
        TargetStats { retries: s.retries, deadlocks: s.deadlocks }
    }
}
