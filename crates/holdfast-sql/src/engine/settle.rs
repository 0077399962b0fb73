//! Claim, release, extend and the expiry sweep: each locks the reservation
//! rows first (lock order step 1) and flips the reservations' own rows; a
//! batch of them costs the same few statements as one. The
//! ledger row is not written, so settling holds of a hot item does not queue
//! on it; whoever locks the ledger row next folds them in. A release only
//! takes a shared lock on it (see [`SqlStore::lock_for_release`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use holdfast_core::{
    Error, ItemId, LocationId, Reservation, ReservationId, ReservationStatus, Settle, ShopId, Topic, Ttl,
};

use super::reserve::reservation;
use super::{Fail, SqlStore};
use crate::dialect::{Conn, Dialect, Head, LedgerLock, LineState, Stmt, TxMode};
use crate::run;
use crate::tag;
use crate::webhooks::Event;

impl<D: Dialect> SqlStore<D> {
    /// Claims, releases and extends of one shop, in arrival order, in one
    /// transaction; each request gets the answer it would have had alone,
    /// after the ones before it.
    pub(super) async fn settle_all(
        &self,
        shop: &ShopId,
        ops: &[(ReservationId, Settle)],
    ) -> Result<Vec<Result<Reservation, Error>>, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let answers = self.settle_in(&mut tx, shop, ops).await?;
        // Also after refusals: an expired hold was released on the way, and
        // anything else refused changed nothing.
        tx.commit().await?;
        Ok(answers)
    }

    /// Claim, release or extend alone, in a transaction of its own.
    pub(super) async fn settle_once(&self, shop: &ShopId, id: ReservationId, op: Settle) -> Result<Reservation, Fail> {
        let mut answers = self.settle_all(shop, &[(id, op)]).await?;
        answers.pop().expect("one answer per request").map_err(Fail::Domain)
    }

    /// The work of [`Self::settle_all`] in `tx`, in a fixed number of
    /// statements whatever the batch's size: lock the reservation rows (in
    /// id order), decide each request by its hold's status as the requests
    /// before it left it, flip the holds that change (one statement per new
    /// status), read the answers' lines. An extend moves its expiry when it
    /// is decided.
    async fn settle_in(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        ops: &[(ReservationId, Settle)],
    ) -> Result<Vec<Result<Reservation, Error>>, Fail> {
        use ReservationStatus::*;
        let mut ids: Vec<ReservationId> = ops.iter().map(|&(id, _)| id).collect();
        ids.sort();
        ids.dedup();
        let mut heads: HashMap<ReservationId, Head> =
            run::heads_for_update::<D>(tx, shop, &ids).await?.into_iter().map(|h| (h.id, h)).collect();
        let mut moves: Vec<(ReservationId, ReservationStatus)> = Vec::new();
        // Extends: the hold, its new time to live, the index of the answer.
        let mut extends: Vec<(ReservationId, Ttl, usize)> = Vec::new();
        let mut decided: Vec<Result<Head, Error>> = Vec::with_capacity(ops.len());
        for &(id, op) in ops {
            let Some(head) = heads.get_mut(&id) else {
                decided.push(Err(Error::NotFound));
                continue;
            };
            let outcome = match (head.status, op) {
                (Held, _) if head.expired && !matches!(op, Settle::Release) => {
                    // A hold that has expired is never claimable: release it
                    // now rather than wait for the sweeper.
                    moves.push((id, Expired));
                    self.counters.expired.fetch_add(1, Ordering::Relaxed);
                    head.status = Expired;
                    Err(Error::Expired)
                }
                (Held, Settle::Claim) => {
                    moves.push((id, Claimed));
                    head.status = Claimed;
                    Ok(())
                }
                (Held, Settle::Release) => {
                    moves.push((id, Released));
                    head.status = Released;
                    Ok(())
                }
                // Moved last, just before the commit (below).
                (Held, Settle::Extend(ttl)) => {
                    extends.push((id, ttl, decided.len()));
                    Ok(())
                }
                // Idempotent repeats.
                (Claimed, Settle::Claim) | (Released | Expired, Settle::Release) => Ok(()),
                (Expired, _) => Err(Error::Expired),
                (status, op) => Err(Error::WrongStatus(status, op.verb())),
            };
            decided.push(outcome.map(|()| head.clone()));
        }
        // Every released hold was answered, so its lines are among these.
        let mut answered: Vec<ReservationId> = decided.iter().filter_map(|d| d.as_ref().ok().map(|h| h.id)).collect();
        answered.sort();
        answered.dedup();
        let mut lines =
            if answered.is_empty() { HashMap::new() } else { run::lines_of_each::<D>(tx, shop, &answered).await? };
        self.lock_for_release(tx, shop, &moves, &lines).await?;
        for (status, state) in
            [(Claimed, LineState::Committed), (Released, LineState::Returned), (Expired, LineState::Returned)]
        {
            let flip: Vec<ReservationId> = moves.iter().filter(|m| m.1 == status).map(|m| m.0).collect();
            if !flip.is_empty() {
                D::transition(tx, shop, &flip, status, state).await?;
            }
        }
        // Released and expired units are available again (engine/watch.rs);
        // a claim changes nothing that is available.
        let returned: Vec<ReservationId> =
            moves.iter().filter(|m| matches!(m.1, Released | Expired)).map(|m| m.0).collect();
        if !returned.is_empty() && self.wants_inventory(Some(&mut *tx), shop).await? {
            let mut touched = Vec::new();
            for id in returned {
                if let std::collections::hash_map::Entry::Vacant(e) = lines.entry(id) {
                    e.insert(run::lines_of::<D>(tx, shop, id).await?);
                }
                let of = lines.get(&id).into_iter().flatten();
                touched.extend(of.map(|a| (a.item.clone(), a.location.clone(), i64::from(a.quantity))));
            }
            self.watch(tx, shop, touched).await?;
        }
        // A claim decided before its hold's expiry must also commit before
        // it: from then on a reader counts the units as free. Look again at
        // the claimed holds, just before the commit; one that lapsed while
        // this transaction waited (for a lock, for the disk) sends the batch
        // round again, where it is answered `expired`.
        let mut claimed: Vec<ReservationId> = moves.iter().filter(|m| m.1 == Claimed).map(|m| m.0).collect();
        claimed.sort();
        claimed.dedup();
        if !claimed.is_empty() && run::heads_for_update::<D>(tx, shop, &claimed).await?.iter().any(|h| h.expired) {
            return Err(Fail::Again);
        }
        // The same for an extend: a hold whose time ran out while this
        // transaction waited has counted as free since; moving its expiry
        // now would hold those units again behind a reader's back. The
        // statement moves only a hold still in time.
        for (id, ttl, at) in extends {
            let args = [shop.as_str().into(), id.get().into(), (ttl.as_secs() as i64).into()];
            if run::exec::<D>(tx, Stmt::Extend, &args).await? == 0 {
                return Err(Fail::Again);
            }
            let moved = run::head_of::<D>(tx, shop, id).await?.ok_or(Error::NotFound)?;
            // This answer and later ones of the same hold in the batch carry
            // the new expiry, each with the status decided for it.
            for d in decided[at..].iter_mut().flatten().filter(|h| h.id == id) {
                d.expires_at = moved.expires_at;
                d.expired = false;
            }
        }
        // The holds that changed, as events, in the same transaction.
        let mut events = Vec::new();
        for &(id, status) in &moves {
            let topic = match status {
                Claimed => Topic::ReservationClaimed,
                Released => Topic::ReservationReleased,
                Expired => Topic::ReservationExpired,
                Held => continue,
            };
            let Some(head) = heads.get(&id) else { continue };
            if !self.outbox.wants(self, Some(&mut *tx), shop, &[topic]).await? {
                continue;
            }
            let of = match lines.get(&id) {
                Some(of) => of.clone(),
                None => run::lines_of::<D>(tx, shop, id).await?,
            };
            events.push(Event::reservation(topic, shop, &reservation(head.clone(), of)));
        }
        self.write_events(tx, &events).await?;
        Ok(decided
            .into_iter()
            .map(|d| {
                d.map(|head| {
                    let of = lines.get(&head.id).cloned().unwrap_or_default();
                    reservation(head, of)
                })
            })
            .collect())
    }

    /// Lock order step 2 for a release: the ledger rows of the released
    /// units, shared, held to commit. A release makes units available the
    /// moment it commits, and a reserve that came up short decided so under
    /// the ledger lock, from what had been released when it looked. Were a
    /// release to commit between that look and the reserve's commit, a reader
    /// in between would see the released units and not the reserve's, an
    /// order no single inventory has; so a release waits for the reserve.
    /// Shared locks do not wait for each other, so releases do not queue on
    /// a hot item's ledger row; only a reserve or stock change holding it
    /// makes them wait. An expiry needs no lock: the units of a hold past its
    /// time count as available from that time on, before any sweep.
    async fn lock_for_release(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        moves: &[(ReservationId, ReservationStatus)],
        lines: &HashMap<ReservationId, Vec<holdfast_core::Allocation>>,
    ) -> Result<(), Fail> {
        let mut spec: Vec<(ItemId, Option<LocationId>)> = moves
            .iter()
            .filter(|m| m.1 == ReservationStatus::Released)
            .flat_map(|m| lines.get(&m.0).into_iter().flatten())
            .map(|a| (a.item.clone(), Some(a.location.clone())))
            .collect();
        if spec.is_empty() {
            return Ok(());
        }
        spec.sort();
        spec.dedup();
        D::lock_ledgers(tx, shop, &spec, LedgerLock::Share).await?;
        Ok(())
    }

    /// The sweeper's unit of work: up to `limit` due holds of any shop.
    pub(super) async fn sweep_once(&self, limit: u32) -> Result<u64, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let gone = D::sweep(&mut tx, limit).await?;
        self.expired_events(&mut tx, &gone).await?;
        self.watch_expired(&mut tx, &gone).await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    /// Retention's look ahead: the (item, location)s with units not folded
    /// yet among the `limit` oldest finished reservations past the period.
    pub(super) async fn stale_folds(
        &self,
        older_than: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<(ShopId, ItemId, LocationId)>, Fail> {
        let mut c = run::Solo::<D>::acquire(&self.pool).await?;
        let _lease = tag::Lease::start();
        let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let args = [ms.into(), i64::from(limit).into()];
        let rows = run::rows::<D>(&mut c, Stmt::StaleFolds, &args).await?;
        c.done().await?;
        let place = |r: &run::Row<D>| {
            Ok((
                run::name::<D::Db, _>(r, "shop_id")?,
                run::name::<D::Db, _>(r, "item_id")?,
                run::name::<D::Db, _>(r, "location_id")?,
            ))
        };
        Ok(rows.iter().map(place).collect::<sqlx::Result<_>>()?)
    }

    /// One retention transaction (`Store::purge`).
    pub(super) async fn purge_once(&self, older_than: std::time::Duration, limit: u32) -> Result<u64, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let n = D::purge(&mut tx, older_than, limit).await?;
        tx.commit().await?;
        Ok(n)
    }
}
