//! Reads: a reservation, an item's levels, and the audit of the accounting
//! invariant. Plain reads in one snapshot, never SKIP LOCKED (which would
//! hide rows other transactions lock and give an inconsistent view).

use holdfast_core::{AuditReport, Error, ItemId, ItemLevels, Reservation, ReservationId, ShopId};

use super::reserve::reservation;
use super::{Fail, SqlStore};
use crate::dialect::{Dialect, Stmt, TxMode};
use crate::driver::Arg;
use crate::run;
use crate::tag;

impl<D: Dialect> SqlStore<D> {
    pub(super) async fn get_once(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let head = run::head_of::<D>(&mut tx, shop, id).await?.ok_or(Fail::Domain(Error::NotFound))?;
        let lines = run::lines_of::<D>(&mut tx, shop, id).await?;
        tx.commit().await?;
        Ok(reservation(head, lines))
    }

    pub(super) async fn levels_once(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let args = [shop.as_str().into(), item.as_str().into()];
        let locations = run::all::<D, _>(&mut tx, Stmt::Levels, &args, run::level::<D>).await?;
        tx.commit().await?;
        Ok(ItemLevels { item: item.clone(), locations })
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
