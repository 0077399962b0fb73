//! Reads: a reservation, an item's levels, the console's hot items, and the
//! audit of the accounting invariant. Plain reads in one snapshot, never SKIP LOCKED (which would
//! hide rows other transactions lock and give an inconsistent view).

use chrono::Utc;
use holdfast_core::{AuditReport, Error, ItemId, ItemLevels, Reservation, ReservationId, ShopId};

use super::reserve::reservation;
use super::{Fail, SqlStore};
use crate::dialect::{Dialect, Stmt, TxMode};
use crate::driver::{Arg, Driver};
use crate::housekeeping::HotItem;
use crate::run;
use crate::tag;

/// How many times a level read is made while a hold keeps expiring around
/// its snapshot (each read's window is a few microseconds unless the machine
/// stalls it; the last answer stands).
pub(super) const UNSETTLED_READS: u32 = 8;

impl<D: Dialect> SqlStore<D> {
    pub(super) async fn get_once(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let head = run::head_of::<D>(&mut tx, shop, id).await?.ok_or(Fail::Domain(Error::NotFound))?;
        let lines = run::lines_of::<D>(&mut tx, shop, id).await?;
        tx.commit().await?;
        Ok(reservation(head, lines))
    }

    /// An item's levels as of one moment. A read is judged at a time a
    /// little apart from its snapshot's; when a hold of the item expired in
    /// between, the answer might count it as expired while missing commits
    /// made before it expired (or the other way round), which no single
    /// moment gives, so it reads again, up to [`UNSETTLED_READS`] times.
    pub(super) async fn levels_once(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Fail> {
        let mut reads = 0;
        loop {
            let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
            let _lease = tag::Lease::transaction();
            let before = Utc::now();
            let (locations, unsettled) = run::levels_of::<D>(&mut tx, shop.as_str(), item.as_str(), before).await?;
            tx.commit().await?;
            reads += 1;
            if !unsettled {
                return Ok(ItemLevels { item: item.clone(), locations });
            }
            if reads == UNSETTLED_READS {
                tracing::warn!(%shop, %item, reads, "holds kept expiring around every snapshot; answering the last read");
                return Ok(ItemLevels { item: item.clone(), locations });
            }
            tracing::debug!(%shop, %item, reads, "a hold expired around the snapshot; reading again");
        }
    }

    /// The console's hot items ([`crate::Housekeeping::hot_items`]): the
    /// busiest (shop, item)s, then each one's levels and pool, in one
    /// snapshot.
    pub(crate) async fn hot_items_once(&self, window_ms: i64, limit: u32) -> Result<Vec<HotItem>, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let before = Utc::now();
        let busiest = run::rows::<D>(&mut tx, Stmt::HotItems, &[window_ms.into(), i64::from(limit).into()]).await?;
        let mut items = Vec::with_capacity(busiest.len());
        for r in &busiest {
            let (shop, item) = (D::Db::text(r, "shop_id")?, D::Db::text(r, "item_id")?);
            let args = [shop.as_str().into(), item.as_str().into()];
            let (locations, _) = run::levels_of::<D>(&mut tx, &shop, &item, before).await?;
            let pool = run::rows::<D>(&mut tx, Stmt::ItemPool, &args).await?;
            let pool = pool.first().ok_or(Fail::Domain(Error::Internal("item_pool returned no row".into())))?;
            let mut hot = HotItem {
                sold_recently: D::Db::int(r, "sold")?,
                pool_rows: D::Db::int(pool, "pooled")?,
                refills: D::Db::int(pool, "refills")?,
                shop,
                item,
                pod: None,
                on_hand: 0,
                available: 0,
                held: 0,
                committed: 0,
            };
            for l in &locations {
                hot.on_hand += l.quantities.on_hand;
                hot.available += l.quantities.available;
                hot.held += l.quantities.reserved;
                hot.committed += l.quantities.committed;
            }
            items.push(hot);
        }
        tx.commit().await?;
        Ok(items)
    }

    pub(super) async fn audit_once(&self, shop: Option<&ShopId>) -> Result<AuditReport, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let args = [Arg::MaybeText(shop.map(|s| s.as_str()))];
        let rows = run::all::<D, _>(&mut tx, Stmt::Audit, &args, run::audit_row::<D>).await?;
        tx.commit().await?;
        let (orphans, rows): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(orphan, _)| *orphan);
        Ok(AuditReport::from_rows(rows.into_iter().map(|(_, r)| r), orphans.into_iter().map(|(_, r)| r).collect()))
    }
}

/// Two level reads of one item in one snapshot, `between` apart, each with
/// whether it is unsettled: for tests of a hold expiring around a snapshot.
#[cfg(feature = "testing")]
impl<D: Dialect> SqlStore<D> {
    pub(crate) async fn levels_twice(
        &self,
        shop: &ShopId,
        item: &ItemId,
        between: std::time::Duration,
    ) -> Result<[(Vec<holdfast_core::LocationLevel>, bool); 2], Error> {
        let read = async {
            let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
            let before = Utc::now();
            let first = run::levels_of::<D>(&mut tx, shop.as_str(), item.as_str(), before).await?;
            tokio::time::sleep(between).await;
            let second = run::levels_of::<D>(&mut tx, shop.as_str(), item.as_str(), before).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>([first, second])
        };
        read.await.map_err(|e| Error::Internal(e.to_string()))
    }
}
