//! Stock changes (set, adjust, fulfil) and the work done under a ledger row
//! lock (lock order step 2): releasing expired holds inline, folding settled
//! units into the ledger row, and refilling the pool from it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use holdfast_core::{Error, ItemId, LocationId, LocationLevel, ShopId, StockChange, StockRequest};

use super::{Contention, Fail, SqlStore};
use crate::dialect::{Conn, Dialect, Ledger, LedgerLock, Spec, Stmt, TxMode, Unit, Want};
use crate::run;
use crate::tag;

/// How far ahead a reserve that will commit a hold looks for holds about to
/// expire where it came up short (docs/design.md, "Expiry and the sweeper").
const LOOKAHEAD_MS: i64 = 1_000;

/// How long before such holds expire the reserve must have sent its COMMIT:
/// the longest a commit may take to become visible after it was sent.
/// Commits 79 ms after they were sent were seen on a busy 2-core machine and
/// right after a crash recovery.
const COMMIT_ALLOWANCE: Duration = Duration::from_millis(100);

/// When the holds that matter expire sooner than this, the reserve waits for
/// them (holding nothing) instead of racing them to its commit.
const COMMIT_WINDOW_MS: i64 = 150;

impl<D: Dialect> SqlStore<D> {
    /// A stock change under the ledger lock. A decrease takes `unpooled`
    /// units first, then free pool rows; it never takes reserved or committed
    /// units. The caller reads the level after the commit.
    pub(super) async fn change_stock_once(&self, req: &StockRequest) -> Result<(), Fail> {
        let (shop, item, location, change) = (req.shop(), req.item(), req.location(), req.change());
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        if !matches!(change, StockChange::Fulfil(_))
            && run::exec::<D>(&mut tx, Stmt::EnsureLedger, &run::place(shop, item, location)).await? > 0
        {
            // A new ledger row gets its inventory watch row with it
            // (engine/watch.rs), while nobody else can want it yet.
            super::watch::add_watch_row::<D>(&mut tx, shop, item, location).await?;
        }
        let spec = [(item.clone(), Some(location.clone()))];
        let Some(mut row) = D::lock_ledgers(&mut tx, shop, &spec, LedgerLock::Wait).await?.pop() else {
            return Err(Fail::Domain(Error::StockConflict(format!(
                "no stock is recorded for item {item} at location {location}"
            ))));
        };
        self.prepare(&mut tx, shop, &mut row).await?;
        let on_hand_before = row.on_hand;
        match change {
            StockChange::Fulfil(q) => {
                if row.committed < q {
                    let committed = row.committed;
                    return Err(Fail::Domain(Error::StockConflict(format!(
                        "cannot fulfil {q}: only {committed} committed unit(s) of item {item} at location {location} are ready to ship"
                    ))));
                }
                row.on_hand -= q;
                row.committed -= q;
            }
            StockChange::Set(_) | StockChange::Adjust(_) => {
                let target = match change {
                    StockChange::Set(n) => n,
                    StockChange::Adjust(d) => row.on_hand + d,
                    StockChange::Fulfil(_) => unreachable!(),
                };
                if target < 0 {
                    return Err(Fail::Domain(Error::StockConflict(format!(
                        "on_hand of item {item} at location {location} is {}; it cannot go below zero",
                        row.on_hand
                    ))));
                }
                let delta = target - row.on_hand;
                if delta >= 0 {
                    row.unpooled += delta;
                } else {
                    let mut need = -delta;
                    let from_ledger = row.unpooled.min(need);
                    row.unpooled -= from_ledger;
                    need -= from_ledger;
                    // Free rows first, then rows fast-path reserves still
                    // hold (they may roll back), as in `acquire`.
                    for waiting in [false, true] {
                        while need > 0 {
                            let qty = need.min(self.cfg.pool_cap.max(1) as i64) as u32;
                            let wants = [Want { item: item.clone(), location: Some(location.clone()), qty }];
                            let taken = D::take_units(&mut tx, shop, &wants, waiting).await?;
                            let got: i64 = taken.iter().map(|t| t.count as i64).sum();
                            if got == 0 {
                                break;
                            }
                            need -= got;
                        }
                    }
                    if need > 0 {
                        self.none_in_flight(&mut tx, shop, (item, location), 1, false).await?;
                        return Err(Fail::Domain(Error::StockConflict(format!(
                            "on_hand of item {item} at location {location} cannot go to {target}: only {} unit(s) are unreserved; reserved and committed units cannot be removed",
                            -delta - need
                        ))));
                    }
                }
                row.on_hand = target;
            }
        }
        let raised = match change {
            StockChange::Set(n) => n - on_hand_before,
            StockChange::Adjust(d) => d,
            StockChange::Fulfil(_) => 0,
        };
        self.write_back(&mut tx, shop, std::iter::once(row)).await?;
        self.watch(&mut tx, shop, [(item.clone(), location.clone(), raised)]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The level a stock change answers with, read after its commit. Read
    /// inside its transaction, it would pair the change with the holds and
    /// claims of that moment, and fast-path reserves and claims (which never
    /// wait for the ledger lock) may commit before the change does: a reader
    /// in between would see them without the change, the answer the change
    /// without them, and no single order of the two would give both.
    pub(super) async fn level_at(
        &self,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> Result<LocationLevel, Fail> {
        self.levels_once(shop, item)
            .await?
            .locations
            .into_iter()
            .find(|l| &l.location == location)
            .ok_or_else(|| Fail::Domain(Error::Internal("ledger row vanished".into())))
    }

    /// Counts the units `given` took from each pool and starts a refill, on
    /// a task of its own, of each pool this process has taken half of
    /// `pool_cap` from since it last refilled it. Without this, the batch
    /// that finds a hot item's pool empty refills it inline while every
    /// buyer of the shop waits behind it (about 10 ms for 1,000 rows on
    /// PostgreSQL, once per `pool_cap` units); ahead of need, the batches go
    /// on taking the other half meanwhile. It is only a head start: a
    /// reserve that comes up short still refills inline, and a pool whose
    /// ledger row is locked (someone is refilling it) is left alone.
    pub(super) fn refill_ahead(&self, shop: &ShopId, given: &[Unit]) {
        let mut due = Vec::new();
        {
            let mut pools = self.refilling.lock().expect("refilling");
            if pools.len() > PoolCount::MOST {
                pools.retain(|_, p| p.running); // forget the counts, keep the guards
            }
            for u in given {
                let key = (shop.clone(), u.item.clone(), u.location.clone());
                let p = pools.entry(key).or_default();
                p.taken += 1;
                if !p.running && p.taken >= (self.cfg.pool_cap / 2).max(1) {
                    p.running = true;
                    due.push((u.item.clone(), u.location.clone()));
                }
            }
        }
        for (item, location) in due {
            let Some(me) = self.me.upgrade() else { return };
            let (shop, spec) = (shop.clone(), [(item.clone(), Some(location.clone()))]);
            tokio::spawn(tag::carried(tag::op("replenish", async move {
                if let Err(e) = me.refill(&shop, &spec).await {
                    tracing::debug!(error = ?e, "a refill ahead of need failed; reserves refill inline");
                }
                let mut pools = me.refilling.lock().expect("refilling");
                if let Some(p) = pools.get_mut(&(shop, item, location)) {
                    p.running = false;
                }
            })));
        }
    }

    /// This process refilled a pool: its count of units taken starts again.
    fn refilled(&self, shop: &ShopId, item: &ItemId, location: &LocationId) {
        let mut pools = self.refilling.lock().expect("refilling");
        if let Some(p) = pools.get_mut(&(shop.clone(), item.clone(), location.clone())) {
            p.taken = 0;
        }
    }

    /// Refills the pools of `spec` from their ledger rows, in a transaction
    /// of its own (the slow path's refill, for a batch's short requests).
    /// Rows another transaction holds are skipped: whoever holds one is
    /// refilling it already.
    pub(super) async fn refill(&self, shop: &ShopId, spec: &Spec) -> Result<(), Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let mut rows = D::lock_ledgers(&mut tx, shop, spec, LedgerLock::Skip).await?;
        for row in &mut rows {
            self.prepare(&mut tx, shop, row).await?;
        }
        let places: Vec<_> = rows.iter().map(|r| (r.item.clone(), r.location.clone(), 0)).collect();
        self.write_back(&mut tx, shop, rows.into_iter()).await?;
        self.watch(&mut tx, shop, places).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Under the ledger lock: releases the expired holds of this (item,
    /// location) — sweeper lag must not cause undersell — and folds claimed
    /// and released units into the ledger row.
    pub(super) async fn prepare(&self, tx: &mut Conn<D>, shop: &ShopId, row: &mut Ledger) -> Result<(), Fail> {
        let expired = D::expire_at(tx, shop, row).await?;
        self.counters.expired.fetch_add(expired.len() as u64, Ordering::Relaxed);
        self.expired_events(tx, &expired).await?;
        let folded = D::fold(tx, shop, row).await?;
        row.unpooled += folded.restocked;
        row.committed += folded.settled;
        Ok(())
    }

    /// Refills the pool of each ledger row from its `unpooled` units and
    /// writes the row back.
    pub(super) async fn write_back(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        rows: impl Iterator<Item = Ledger>,
    ) -> Result<(), Fail> {
        for mut row in rows {
            let mut refilled = 0i64;
            if row.unpooled > 0 {
                let n = row.unpooled.min(self.cfg.pool_cap as i64);
                let args = run::place(shop, &row.item, &row.location);
                let args = [args[0], args[1], args[2], i64::from(self.cfg.pool_cap).into(), n.into()];
                let inserted = tag::op("replenish", run::exec::<D>(tx, Stmt::Refill, &args)).await?;
                if inserted > 0 {
                    self.counters.replenishments.fetch_add(1, Ordering::Relaxed);
                    self.refilled(shop, &row.item, &row.location);
                    refilled = 1;
                }
                row.unpooled -= inserted as i64;
            }
            let args = run::place(shop, &row.item, &row.location);
            let args = [
                args[0],
                args[1],
                args[2],
                row.on_hand.into(),
                row.committed.into(),
                row.unpooled.into(),
                refilled.into(),
            ];
            run::exec::<D>(tx, Stmt::WriteLedger, &args).await?;
        }
        Ok(())
    }

    /// Fails with [`Fail::Contended`] when `matters` units (or more) of
    /// (item, location) are in flight in other transactions: pool rows this
    /// transaction could not take, expired holds it could not lock, released
    /// units not yet folded. That means "wait and retry", never "sold out".
    /// `matters`: the fewest units that would change the caller's answer
    /// here.
    ///
    /// `commits`: the caller will commit a hold others can read, so holds
    /// that expire before its commit is visible count too (`in_flight.sql`
    /// looks [`LOOKAHEAD_MS`] ahead). The answer is when COMMIT must be sent
    /// at the latest ([`COMMIT_ALLOWANCE`] before those holds expire), or,
    /// when they expire within [`COMMIT_WINDOW_MS`], a failure that says how
    /// long until they have.
    pub(super) async fn none_in_flight(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        (item, location): (&ItemId, &LocationId),
        matters: u32,
        commits: bool,
    ) -> Result<Option<Instant>, Fail> {
        let lookahead = if commits { LOOKAHEAD_MS } else { 0 };
        // Before the statement starts, whose clock `wait` counts from: the
        // deadline errs early, never late.
        let looked = Instant::now();
        let (n, wait) = look_ahead::<D>(tx, shop, (item, location), lookahead, matters).await?;
        if n >= i64::from(matters.max(1)) {
            return Err(Fail::Contended(Contention::InFlight));
        }
        match wait {
            None => Ok(None),
            Some(ms) if ms < COMMIT_WINDOW_MS => {
                Err(Fail::Contended(Contention::Expiring(Duration::from_millis(ms.max(1) as u64))))
            }
            Some(ms) => Ok(Some(looked + Duration::from_millis(ms as u64) - COMMIT_ALLOWANCE)),
        }
    }
}

/// `in_flight.sql`: the units of (item, location) in flight now, and how
/// many ms until holds expiring within `lookahead_ms` bring them to
/// `matters` (`None`: not within it).
pub(super) async fn look_ahead<D: Dialect>(
    tx: &mut Conn<D>,
    shop: &ShopId,
    (item, location): (&ItemId, &LocationId),
    lookahead_ms: i64,
    matters: u32,
) -> Result<(i64, Option<i64>), Fail> {
    use crate::driver::Driver;
    let [s, i, l] = run::place(shop, item, location);
    let args = [s, i, l, lookahead_ms.into(), i64::from(matters.max(1)).into()];
    let rows = run::rows::<D>(tx, Stmt::InFlight, &args).await?;
    let row = rows.first().ok_or(Fail::Domain(Error::Internal("in_flight returned no row".into())))?;
    let wait = if D::Db::is_null(row, "wait_ms")? { None } else { Some(D::Db::int(row, "wait_ms")?) };
    Ok((D::Db::int(row, "n")?, wait))
}

/// Per pool this process takes units from: how many it took since it last
/// refilled it, and whether a refill ahead of need is running
/// ([`SqlStore::refill_ahead`]).
pub(super) type Refilling = Mutex<HashMap<(ShopId, ItemId, LocationId), PoolCount>>;

#[derive(Debug, Default)]
pub(super) struct PoolCount {
    taken: u32,
    running: bool,
}

impl PoolCount {
    /// Pools counted at most; past it the counts start again (a count only
    /// decides when a head start begins).
    const MOST: usize = 10_000;
}
