//! The tables of the migration off Redis (migration 0003 of each dialect):
//! the mode rules behind [`ModeStore`] and the legacy store's SQL ledger
//! behind [`LegacyLedger`]. Plain single-row reads and writes with no part in
//! the reservation engine's lock order, sent and tagged like every other
//! statement: `/* conn_tag:modes */` for the rules (polled by every serving
//! process), `/* conn_tag:legacy_ledger */` for the ledger.

use async_trait::async_trait;
use holdfast_core::{Backend, Error, ItemId, LedgerRow, LegacyLedger, LocationId, Mode, ModeStore, Rules, ShopId};

use crate::dialect::{Dialect, Stmt};
use crate::driver::{Arg, Driver};
use crate::engine::SqlStore;
use crate::run::{self, Row, name, plain};

fn mode<D: Dialect>(r: &Row<D>) -> sqlx::Result<Mode> {
    name::<D::Db, Mode>(r, "mode")
}

fn shop_mode<D: Dialect>(r: &Row<D>) -> sqlx::Result<(ShopId, Mode)> {
    Ok((name::<D::Db, _>(r, "shop_id")?, mode::<D>(r)?))
}

fn rollout<D: Dialect>(r: &Row<D>) -> sqlx::Result<(Mode, u8)> {
    Ok((mode::<D>(r)?, D::Db::int(r, "percent")?.clamp(0, 100) as u8))
}

fn engaged<D: Dialect>(r: &Row<D>) -> sqlx::Result<bool> {
    D::Db::flag(r, "engaged")
}

fn legacy_row<D: Dialect>(r: &Row<D>) -> sqlx::Result<LedgerRow> {
    Ok(LedgerRow {
        shop: name::<D::Db, _>(r, "shop_id")?,
        item: name::<D::Db, _>(r, "item_id")?,
        location: name::<D::Db, _>(r, "location_id")?,
        on_hand: D::Db::int(r, "on_hand")?,
        committed: D::Db::int(r, "committed")?,
    })
}

fn location<D: Dialect>(r: &Row<D>) -> sqlx::Result<(ItemId, LocationId)> {
    Ok((name::<D::Db, _>(r, "item_id")?, name::<D::Db, _>(r, "location_id")?))
}

#[async_trait]
impl<D: Dialect> ModeStore for SqlStore<D> {
    /// Every rule, in one round trip per table.
    async fn load_rules(&self) -> Result<Rules, Error> {
        plain!(self, "modes", |c| async move {
            let shops = run::all::<D, _>(c, Stmt::ShopModes, &[], shop_mode::<D>).await?;
            let rollout = run::all::<D, _>(c, Stmt::ModeRollout, &[], rollout::<D>).await?;
            let engaged = run::all::<D, _>(c, Stmt::KillSwitch, &[], engaged::<D>).await?.pop();
            Ok(Rules {
                shops: shops.into_iter().collect(),
                rollout: rollout.into_iter().collect(),
                kill_switch: engaged.unwrap_or(false),
                ..Rules::default()
            })
        })
    }

    async fn set_shop_mode(&self, shop: &ShopId, mode: Option<Mode>) -> Result<(), Error> {
        let n = match mode {
            Some(m) => plain!(self, "modes", |c| run::exec::<D>(
                c,
                Stmt::SetShopMode,
                &[shop.as_str().into(), m.as_str().into()]
            )),
            None => plain!(self, "modes", |c| run::exec::<D>(c, Stmt::ClearShopMode, &[shop.as_str().into()])),
        };
        n.map(|_| ())
    }

    async fn set_rollout(&self, pod: Option<&str>, mode: Mode, percent: u8) -> Result<(), Error> {
        if let Some(pod) = pod {
            return Err(holdfast_core::Invalid::new(
                "pod",
                format!("no pod {pod:?}: this runs on one database, without --pods"),
            )
            .into());
        }
        let args = [Arg::Text(mode.as_str()), Arg::Int(percent.into())];
        plain!(self, "modes", |c| run::exec::<D>(c, Stmt::SetRollout, &args)).map(|_| ())
    }

    async fn set_kill_switch(&self, engaged: bool) -> Result<(), Error> {
        plain!(self, "modes", |c| run::exec::<D>(c, Stmt::SetKillSwitch, &[Arg::Flag(engaged)])).map(|_| ())
    }
}

#[async_trait]
impl<D: Dialect> LegacyLedger for SqlStore<D> {
    fn backend(&self) -> Backend {
        D::BACKEND
    }

    async fn ledger_ensure(&self, shop: &ShopId, item: &ItemId, location: &LocationId) -> Result<(), Error> {
        let args = run::place(shop, item, location);
        plain!(self, "legacy_ledger", |c| run::exec::<D>(c, Stmt::LegacyEnsure, &args)).map(|_| ())
    }

    async fn ledger_rows(&self, shop: Option<&ShopId>, item: Option<&ItemId>) -> Result<Vec<LedgerRow>, Error> {
        let args = [Arg::MaybeText(shop.map(|s| s.as_str())), Arg::MaybeText(item.map(|i| i.as_str()))];
        plain!(self, "legacy_ledger", |c| run::all::<D, _>(c, Stmt::LegacyRows, &args, legacy_row::<D>))
    }

    async fn ledger_swap_on_hand(&self, row: &LedgerRow, new: i64) -> Result<bool, Error> {
        let [s, i, l] = run::place(&row.shop, &row.item, &row.location);
        let args = [s, i, l, Arg::Int(row.on_hand), Arg::Int(new)];
        let n = plain!(self, "legacy_ledger", |c| run::exec::<D>(c, Stmt::LegacySwapOnHand, &args))?;
        Ok(n == 1)
    }

    async fn ledger_fulfil(
        &self,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
        quantity: i64,
    ) -> Result<bool, Error> {
        let [s, i, l] = run::place(shop, item, location);
        let args = [s, i, l, Arg::Int(quantity)];
        let n = plain!(self, "legacy_ledger", |c| run::exec::<D>(c, Stmt::LegacyFulfil, &args))?;
        Ok(n == 1)
    }

    /// One transaction, rows in (item, location) order, so two claims never
    /// deadlock on each other.
    async fn ledger_commit(&self, shop: &ShopId, lines: &[(ItemId, LocationId, u32)]) -> Result<(), Error> {
        let mut lines = lines.to_vec();
        lines.sort();
        crate::tag::op("legacy_ledger", async {
            let mut tx = D::begin(&self.pool, crate::dialect::TxMode::Write).await.map_err(run::plain_error::<D>)?;
            let _lease = crate::tag::Lease::transaction();
            for (item, location, n) in &lines {
                let [s, i, l] = run::place(shop, item, location);
                let args = [s, i, l, Arg::Int((*n).into())];
                run::exec::<D>(&mut tx, Stmt::LegacyCommit, &args).await.map_err(run::plain_error::<D>)?;
            }
            tx.commit().await.map_err(run::plain_error::<D>)
        })
        .await
    }

    async fn ledger_put(&self, row: &LedgerRow) -> Result<(), Error> {
        self.ledger_ensure(&row.shop, &row.item, &row.location).await?;
        let [s, i, l] = run::place(&row.shop, &row.item, &row.location);
        let args = [s, i, l, Arg::Int(row.on_hand), Arg::Int(row.committed)];
        plain!(self, "legacy_ledger", |c| run::exec::<D>(c, Stmt::LegacyPut, &args)).map(|_| ())
    }

    async fn stocked_locations(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId)>, Error> {
        let args = [Arg::Text(shop.as_str())];
        plain!(self, "legacy_ledger", |c| run::all::<D, _>(c, Stmt::StockedLocations, &args, location::<D>))
    }
}
