//! Claim, release, extend and the expiry sweep: each locks the reservation
//! row first (lock order step 1) and flips the reservation's own rows. The
//! ledger row is not touched, so settling holds of a hot item does not queue
//! on it; whoever locks the ledger row next folds them in.

use std::sync::atomic::Ordering;

use holdfast_core::{Error, Reservation, ReservationId, ReservationStatus, ShopId, Ttl};

use super::reserve::reservation;
use super::{Fail, SqlStore};
use crate::dialect::{Conn, Dialect, LineState, Stmt, TxMode};
use crate::run;
use crate::tag;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    Claim,
    Release,
    Extend(Ttl),
}

impl Settle {
    fn verb(self) -> &'static str {
        match self {
            Settle::Claim => "claimed",
            Settle::Release => "released",
            Settle::Extend(_) => "extended",
        }
    }
}

impl<D: Dialect> SqlStore<D> {
    /// Claim, release or extend alone, in a transaction of its own.
    pub(super) async fn settle_once(&self, shop: &ShopId, id: ReservationId, op: Settle) -> Result<Reservation, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let answer = self.settle_in(&mut tx, shop, id, op).await;
        if let Ok(_) | Err(Fail::Domain(_)) = answer {
            // Also after a refusal: an expired hold was released on the way,
            // and anything else refused changed nothing.
            tx.commit().await?;
        }
        answer
    }

    /// Claim, release or extend in `tx`: lock the reservation row, decide by
    /// its status, flip the reservation's own rows.
    pub(super) async fn settle_in(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        id: ReservationId,
        op: Settle,
    ) -> Result<Reservation, Fail> {
        let Some(mut head) = run::head_of::<D>(tx, shop, id, true).await? else {
            return Err(Fail::Domain(Error::NotFound));
        };
        use ReservationStatus::*;
        let outcome: Result<(), Error> = match (head.status, op) {
            (Held, _) if head.expired && !matches!(op, Settle::Release) => {
                // A hold that has expired is never claimable: release it now
                // rather than wait for the sweeper.
                D::transition(tx, shop, id, Expired, LineState::Returned).await?;
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                head.status = Expired;
                Err(Error::Expired)
            }
            (Held, Settle::Claim) => {
                D::transition(tx, shop, id, Claimed, LineState::Committed).await?;
                head.status = Claimed;
                Ok(())
            }
            (Held, Settle::Release) => {
                D::transition(tx, shop, id, Released, LineState::Returned).await?;
                head.status = Released;
                Ok(())
            }
            (Held, Settle::Extend(ttl)) => {
                let args = [shop.as_str().into(), id.get().into(), (ttl.as_secs() as i64).into()];
                run::exec::<D>(tx, Stmt::Extend, &args).await?;
                head = run::head_of::<D>(tx, shop, id, false).await?.ok_or(Fail::Domain(Error::NotFound))?;
                Ok(())
            }
            // Idempotent repeats.
            (Claimed, Settle::Claim) | (Released | Expired, Settle::Release) => Ok(()),
            (Expired, _) => Err(Error::Expired),
            (status, op) => Err(Error::WrongStatus(status, op.verb())),
        };
        outcome.map_err(Fail::Domain)?;
        let lines = run::lines_of::<D>(tx, shop, id).await?;
        Ok(reservation(head, lines))
    }

    /// The sweeper's unit of work: up to `limit` due holds of any shop.
    pub(super) async fn sweep_once(&self, limit: u32) -> Result<u64, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let n = D::sweep(&mut tx, limit).await?;
        tx.commit().await?;
        Ok(n)
    }
}
