//! The reservation engine: the algorithm of SPEC §3–§4, written once for every
//! SQL dialect.
//!
//! # Where each quantity lives
//!
//! * `inventory_levels` (the ledger row) keeps `on_hand`, the `committed`
//!   units already folded into it, and `unpooled`: available units not yet in
//!   the pool.
//! * `reservation_units` (the pool) keeps one row per free unit, at most
//!   `pool_cap` per (item, location), in slots `0..pool_cap`.
//! * `reserved_quantities` keeps one row per (reservation, item, location) with
//!   a `state`: `held`; `committed` (claimed, not yet folded); `returned`
//!   (released or expired, not yet folded); `settled` / `restocked` (folded).
//!
//! Reserve, claim, release and expire touch only pool rows and the
//! reservation's own rows, so none of them queues on the hot ledger row. The
//! ledger row is locked only to refill the pool, by stock changes, and when a
//! reserve comes up short; whoever holds it folds the `committed` and
//! `returned` rows into it. So for every (shop, item, location):
//!
//! ```text
//! on_hand   = unpooled + pooled + reserved + committed
//! unpooled  = ledger.unpooled  + Σ returned
//! committed = ledger.committed + Σ committed
//! reserved  = Σ held
//! ```
//!
//! # The global lock order
//!
//! Every path takes locks in this order and never waits for a lock out of it:
//!
//! 1. the `reservations` row (claim, release, extend; blocking `FOR UPDATE`);
//! 2. `inventory_levels` rows, in (item_id, location_id) order, in one
//!    statement (slow-path reserve, stock changes);
//! 3. `reservation_units` rows, only with `SKIP LOCKED` (never waits);
//! 4. `reserved_quantities` rows of the transaction's own reservations, and
//!    new `reservations` rows last: the reserve takes its units first and
//!    inserts the hold after.
//!
//! Locks taken with `SKIP LOCKED` never wait, so they cannot close a cycle even
//! where they come "early" (reserve's fast path) or "late" (the inline expiry of
//! reservations under a ledger lock). A deadlock or serialization failure that
//! still happens is retried, a bounded number of times, and counted.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use holdfast_core::{
    Allocation, AuditReport, Error, ItemId, ItemLevels, LocationId, LocationLevel, Reservation, ReservationId,
    ReservationStatus, ReserveRequest, Reserved, ShopId, Shortfall, StockChange, StoreStats, Ttl,
};
use rand::Rng;
use sqlx::Pool;

use crate::dialect::{Conn, Dialect, Fast, Fault, Ledger, TxMode, Want};
use crate::tag;

/// Settings shared by every SQL store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Most unit rows per (shop, item, location) in the pool.
    pub pool_cap: u32,
    /// Most attempts of one operation (deadlocks, busy database, contention).
    pub max_attempts: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { pool_cap: 1_000, max_attempts: 60 }
    }
}

/// Why one attempt of an operation did not finish.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The database said no; [`Dialect::fault`] tells whether to retry.
    Db(sqlx::Error),
    /// Units the operation needs are locked by transactions still in flight:
    /// they may roll back, so this is not "sold out". Retry after a pause.
    Contended,
    /// A final answer for the caller.
    Domain(Error),
    /// A ledger row the slow path needs is locked by a refill in progress.
    LedgerBusy,
    /// Waited for another transaction's refill: start over at once (no
    /// backoff; not counted as a retry, since the other one made progress).
    Again,
}

/// What the lock-free look at a short reserve found.
#[derive(Debug)]
enum Verdict {
    /// Not enough units even if every unit no live hold has were free.
    SoldOut(Vec<Shortfall>),
    /// Perhaps enough; the ledger rows that exist, where the dialect can tell.
    Maybe(Option<Vec<Key>>),
}

impl From<sqlx::Error> for Fail {
    fn from(e: sqlx::Error) -> Self {
        Fail::Db(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Domain(e)
    }
}

#[derive(Debug, Default)]
struct Counters {
    retries: AtomicU64,
    deadlocks: AtomicU64,
    replenishments: AtomicU64,
    expired: AtomicU64,
}

/// A [`holdfast_core::Store`] over one SQL database.
#[derive(Debug)]
pub(crate) struct SqlStore<D: Dialect> {
    pub(crate) pool: Pool<D::Db>,
    cfg: StoreConfig,
    counters: Counters,
}

/// A ledger row locked by this transaction, and what it has done to it.
#[derive(Debug)]
struct Locked {
    row: Ledger,
    /// Expired holds released and pending rows folded into `row`.
    prepared: bool,
    /// `row` changed and must be written back.
    dirty: bool,
}

type Key = (ItemId, LocationId);

impl<D: Dialect> SqlStore<D> {
    pub(crate) fn new(pool: Pool<D::Db>, cfg: StoreConfig) -> Self {
        Self { pool, cfg, counters: Counters::default() }
    }

    pub(crate) fn stats(&self) -> StoreStats {
        let c = &self.counters;
        StoreStats {
            retries: c.retries.load(Ordering::Relaxed),
            deadlocks: c.deadlocks.load(Ordering::Relaxed),
            replenishments: c.replenishments.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
        }
    }

    /// Runs `attempt` until it gives an answer, retrying deadlocks, busy
    /// databases and contention with jittered backoff, at most
    /// `max_attempts` times. A broken connection is retried only for
    /// `idempotent` operations: a commit whose answer was lost may have landed.
    pub(crate) async fn retrying<T, F, Fut>(&self, idempotent: bool, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>> + Send,
    {
        let mut n = 0u32;
        let mut again = 0u32;
        loop {
            n += 1;
            let fail = match attempt().await {
                Ok(v) => return Ok(v),
                Err(Fail::Domain(e)) => return Err(e),
                // Bounded too, in case refills never end.
                Err(Fail::Again) if again < self.cfg.max_attempts * 20 => {
                    again += 1;
                    n -= 1;
                    continue;
                }
                Err(fail) => fail,
            };
            let retry = match &fail {
                Fail::Contended | Fail::Again | Fail::LedgerBusy => true,
                Fail::Db(e) => match D::fault(e) {
                    Fault::Deadlock => {
                        self.counters.deadlocks.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Fault::Busy => true,
                    Fault::Connection => idempotent && n < 4,
                    Fault::Other => false,
                },
                Fail::Domain(_) => unreachable!(),
            };
            if !retry || n >= self.cfg.max_attempts {
                return Err(match fail {
                    Fail::Contended | Fail::Again | Fail::LedgerBusy => Error::RetriesExhausted(n),
                    Fail::Db(e) => match D::fault(&e) {
                        Fault::Deadlock | Fault::Busy => Error::RetriesExhausted(n),
                        Fault::Connection => Error::Unavailable(e.to_string()),
                        Fault::Other => Error::Internal(e.to_string()),
                    },
                    Fail::Domain(e) => e,
                });
            }
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(backoff(n)).await;
        }
    }

    pub(crate) async fn migrate(&self) -> Result<(), Error> {
        tag::op("migrate", D::migrate(&self.pool)).await.map_err(|e| Error::Internal(format!("migration failed: {e}")))
    }

    pub(crate) async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        tag::op("reserve", self.retrying(true, || self.reserve_once(req))).await
    }

    /// One attempt of a reserve.
    ///
    /// Fast path: one statement takes, for every line, units from the pool of
    /// its first candidate location with `SKIP LOCKED`. When every line is
    /// filled, the hold is inserted and the transaction commits: no ledger
    /// row is touched.
    ///
    /// Otherwise the fast path rolls back *before* anything waits for a
    /// ledger lock, and the slow path runs in a new transaction. So a
    /// transaction that holds pool rows never waits for a ledger lock, and a
    /// slow-path transaction (which holds the ledger lock) may safely wait for
    /// the pool rows that fast-path transactions still hold: they finish
    /// without waiting for it. Without this rule, short carts holding a few
    /// units each would wait on each other at sell-out and retry forever.
    async fn reserve_once(&self, req: &ReserveRequest) -> Result<Reserved, Fail> {
        let wants: Vec<Want> = req
            .lines
            .iter()
            .map(|l| Want {
                item: l.item.clone(),
                location: l.locations.as_ref().map(|v| v[0].clone()),
                qty: l.quantity.get(),
            })
            .collect();
        if let Some(done) = self.fast_path(req, &wants).await? {
            return Ok(done);
        }

        let spec = candidate_spec(req);
        let verdict = match self.sold_out(req, &spec).await? {
            Verdict::SoldOut(shortfalls) => Err(Fail::Domain(Error::InsufficientStock(shortfalls))),
            Verdict::Maybe(existing) => {
                let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                let _lease = tag::Lease::transaction();
                let mut held = vec![BTreeMap::new(); req.lines.len()];
                match self.slow_path(&mut tx, req, &spec, existing.as_deref(), &mut held).await {
                    Ok(()) => return self.insert_hold(tx, req, &held).await,
                    Err(Fail::LedgerBusy) => {
                        // Another transaction is refilling: wait for it
                        // holding nothing, then start over from the fast
                        // path, where its rows are.
                        tx.rollback().await?;
                        D::await_ledgers(&self.pool, &req.shop, &spec).await?;
                        Err(Fail::Again)
                    }
                    Err(fail) => Err(fail),
                }
            }
        };
        match verdict {
            // A replayed key must answer with its reservation even when the
            // stock has gone since.
            Err(Fail::Domain(Error::InsufficientStock(s))) => match self.replay(req).await? {
                Some(r) => Ok(r),
                None => Err(Fail::Domain(Error::InsufficientStock(s))),
            },
            other => other,
        }
    }

    /// The fast path: every line from the pool of its first candidate
    /// location, with SKIP LOCKED. `None` when some line came up short; then
    /// nothing is held any more (no pool row, no ledger lock).
    async fn fast_path(&self, req: &ReserveRequest, wants: &[Want]) -> Result<Option<Reserved>, Fail> {
        if D::ONE_STATEMENT_FAST_PATH {
            let fast = {
                let _lease = tag::Lease::transaction();
                D::reserve_fast(&self.pool, &req.shop, &req.key, &req.fingerprint(), req.ttl, wants).await?
            };
            return match fast {
                Fast::Held { id, expires_at, taken } => {
                    let mut lines: Vec<Allocation> = taken
                        .into_iter()
                        .map(|t| Allocation { item: t.item, location: t.location, quantity: t.count })
                        .collect();
                    lines.sort();
                    let status = ReservationStatus::Held;
                    let reservation = Reservation { id, key: req.key.clone(), status, expires_at, lines };
                    Ok(Some(Reserved { reservation, created: true }))
                }
                Fast::KeyTaken => match self.replay(req).await? {
                    Some(r) => Ok(Some(r)),
                    // The other holder of the key rolled back meanwhile.
                    None => Err(Fail::Contended),
                },
                Fast::Short => Ok(None),
            };
        }
        // The dialect has no one-statement fast path: the same in a
        // transaction, rolled back when short.
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let taken = D::take_units(&mut tx, &req.shop, wants).await?;
        // Items are unique within a request, so the item names the line.
        let line_of: BTreeMap<&ItemId, usize> = req.lines.iter().enumerate().map(|(i, l)| (&l.item, i)).collect();
        let mut held: Vec<BTreeMap<LocationId, u32>> = vec![BTreeMap::new(); req.lines.len()];
        for t in taken {
            if let Some(&i) = line_of.get(&t.item) {
                *held[i].entry(t.location).or_default() += t.count;
            }
        }
        if (0..req.lines.len()).all(|i| total(&held[i]) == req.lines[i].quantity.get()) {
            return self.insert_hold(tx, req, &held).await.map(Some);
        }
        tx.rollback().await?;
        Ok(None)
    }

    /// The cheap answer for a sold-out item: from one lock-free snapshot,
    /// the shortfalls when the request cannot be met even if every unit no
    /// live hold has were free; otherwise the ledger rows that exist (`None`
    /// when the dialect cannot tell), and the slow path must find out.
    async fn sold_out(&self, req: &ReserveRequest, spec: &[(ItemId, Option<LocationId>)]) -> Result<Verdict, Fail> {
        let mut c = self.pool.acquire().await?;
        let _lease = tag::Lease::start();
        let Some(rows) = D::available(&mut c, &req.shop, spec).await? else {
            return Ok(Verdict::Maybe(None));
        };
        let mut shortfalls = Vec::new();
        let mut any_short = false;
        let mut any_units = false;
        for line in &req.lines {
            let at = |loc: &LocationId| {
                rows.iter().find(|(i, l, _)| i == &line.item && l == loc).map(|r| r.2.max(0)).unwrap_or(0)
            };
            let per_location: Vec<i64> = match &line.locations {
                Some(locs) => locs.iter().map(at).collect(),
                None => rows.iter().filter(|(i, _, _)| i == &line.item).map(|r| r.2.max(0)).collect(),
            };
            let best =
                if req.allow_split { per_location.iter().sum() } else { per_location.into_iter().max().unwrap_or(0) };
            let qty = line.quantity.get();
            any_short |= best < qty as i64;
            any_units |= best > 0;
            shortfalls.push(Shortfall {
                item: line.item.clone(),
                requested: qty,
                available: best.min(qty as i64) as u32,
            });
        }
        let hopeless = if req.allow_partial { !any_units } else { any_short };
        Ok(match hopeless {
            true => Verdict::SoldOut(shortfalls),
            false => Verdict::Maybe(Some(rows.into_iter().map(|(i, l, _)| (i, l)).collect())),
        })
    }

    /// Lock order step 4: inserts the hold for the units taken, and commits.
    async fn insert_hold(
        &self,
        mut tx: crate::dialect::Tx<D>,
        req: &ReserveRequest,
        held: &[BTreeMap<LocationId, u32>],
    ) -> Result<Reserved, Fail> {
        let mut lines: Vec<Allocation> = Vec::new();
        for (i, h) in held.iter().enumerate() {
            for (loc, &n) in h {
                if n > 0 {
                    lines.push(Allocation { item: req.lines[i].item.clone(), location: loc.clone(), quantity: n });
                }
            }
        }
        lines.sort();
        if lines.is_empty() {
            // allow_partial with nothing at all to hold.
            drop(tx);
            return match self.replay(req).await? {
                Some(r) => Ok(r),
                None => Err(Fail::Domain(Error::InsufficientStock(shortfalls(req, held)))),
            };
        }
        let fingerprint = req.fingerprint();
        match D::insert_reservation(&mut tx, &req.shop, &req.key, &fingerprint, req.ttl, &lines).await? {
            Some((id, expires_at)) => {
                tx.commit().await?;
                Ok(Reserved {
                    reservation: Reservation {
                        id,
                        key: req.key.clone(),
                        status: ReservationStatus::Held,
                        expires_at,
                        lines,
                    },
                    created: true,
                })
            }
            None => {
                // The key is taken: give the units back and answer as a replay.
                tx.rollback().await?;
                match self.replay(req).await? {
                    Some(r) => Ok(r),
                    // The other holder of the key rolled back meanwhile.
                    None => Err(Fail::Contended),
                }
            }
        }
    }

    /// The existing reservation of `req.key`, if any: returned when the lines
    /// match, `IdempotencyConflict` when they do not.
    async fn replay(&self, req: &ReserveRequest) -> Result<Option<Reserved>, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let Some(head) = D::find_by_key(&mut tx, &req.shop, &req.key).await? else {
            return Ok(None);
        };
        if head.fingerprint != req.fingerprint() {
            return Err(Fail::Domain(Error::IdempotencyConflict(req.key.to_string())));
        }
        let lines = D::lines(&mut tx, &req.shop, head.id).await?;
        tx.commit().await?;
        Ok(Some(Reserved { reservation: reservation(head, lines), created: false }))
    }

    /// A reserve under the ledger locks of every candidate location of every
    /// line (taken at once, in lock order). For each candidate in order, see
    /// [`Self::acquire`]. Afterwards the pool of every ledger row touched is
    /// refilled, so only one transaction per (item, location) refills at a
    /// time and the others find rows instead of queueing here.
    async fn slow_path(
        &self,
        tx: &mut Conn<D>,
        req: &ReserveRequest,
        spec: &[(ItemId, Option<LocationId>)],
        existing: Option<&[Key]>,
        held: &mut [BTreeMap<LocationId, u32>],
    ) -> Result<(), Fail> {
        // Take the ledger locks without waiting: when another transaction
        // holds one, it is refilling that pool, and queueing behind it here —
        // each waiter then holding the lock through its own commit — would
        // serialise the whole herd. The caller waits for it holding nothing.
        let rows = match existing {
            Some(existing) => {
                let rows = D::lock_ledgers_skip(tx, &req.shop, spec).await?;
                if existing.iter().any(|k| !rows.iter().any(|r| r.item == k.0 && r.location == k.1)) {
                    return Err(Fail::LedgerBusy);
                }
                rows
            }
            None => D::lock_ledgers(tx, &req.shop, spec).await?,
        };
        let mut ledgers: BTreeMap<Key, Locked> = rows
            .into_iter()
            .map(|row| ((row.item.clone(), row.location.clone()), Locked { row, prepared: false, dirty: false }))
            .collect();

        let mut still_short: Vec<(usize, Vec<LocationId>)> = Vec::new();
        for (i, (line, h)) in req.lines.iter().zip(held.iter_mut()).enumerate() {
            let qty = line.quantity.get();
            let candidates: Vec<LocationId> = match &line.locations {
                Some(locs) => locs.clone(),
                None => ledgers.keys().filter(|(it, _)| it == &line.item).map(|(_, l)| l.clone()).collect(),
            };
            if req.allow_split {
                for loc in &candidates {
                    let want = qty - total(h);
                    if want == 0 {
                        break;
                    }
                    let got = self.acquire(tx, &req.shop, &mut ledgers, &line.item, loc, want).await?;
                    *h.entry(loc.clone()).or_default() += got;
                }
            } else {
                // The first candidate that can fill the whole line wins; what
                // was taken at the others goes back to their ledger rows.
                let mut chosen = None;
                for loc in &candidates {
                    let have = h.get(loc).copied().unwrap_or(0);
                    let got = self.acquire(tx, &req.shop, &mut ledgers, &line.item, loc, qty - have).await?;
                    *h.entry(loc.clone()).or_default() += got;
                    if have + got == qty {
                        chosen = Some(loc.clone());
                        break;
                    }
                }
                // Without a winner keep the best single location: it is what a
                // partial reserve holds, and what a failing one reports.
                let keep = chosen.or_else(|| h.iter().max_by_key(|(_, n)| **n).map(|(l, _)| l.clone()));
                let give_back: Vec<(LocationId, u32)> =
                    h.iter().filter(|(l, _)| Some(*l) != keep.as_ref()).map(|(l, n)| (l.clone(), *n)).collect();
                for (loc, n) in give_back {
                    h.remove(&loc);
                    if n > 0 {
                        // Every candidate's ledger row is locked here, so the
                        // units go back to their own row's `unpooled`.
                        let locked = ledgers.get_mut(&(line.item.clone(), loc)).ok_or_else(|| {
                            Fail::Domain(Error::Internal("units taken from an unlocked location".into()))
                        })?;
                        locked.row.unpooled += n as i64;
                        locked.dirty = true;
                    }
                }
            }
            if total(h) < qty {
                still_short.push((i, candidates));
            }
        }

        if !still_short.is_empty() {
            // An empty SKIP LOCKED result is not "sold out": rows may be held
            // by transactions that can still roll back, and expired holds may
            // be in a sweeper's hands. Only when nothing is in flight is the
            // shortage real.
            for (i, candidates) in &still_short {
                for loc in candidates {
                    if D::in_flight(tx, &req.shop, &req.lines[*i].item, loc).await? > 0 {
                        return Err(Fail::Contended);
                    }
                }
            }
            if !req.allow_partial {
                return Err(Fail::Domain(Error::InsufficientStock(shortfalls(req, held))));
            }
        }

        self.write_back(tx, &req.shop, ledgers.into_values().filter(|l| l.dirty).map(|l| l.row)).await
    }

    /// Takes up to `want` units of (item, location) for a transaction that
    /// holds the ledger lock. Pool rows come first: while this transaction
    /// waited for the lock, the holder before it most likely refilled the
    /// pool, and taking those rows needs no write to the ledger row, so a
    /// herd of short reserves passes through the lock quickly. When the pool
    /// is dry: release expired holds, fold pending rows, take units straight
    /// from `unpooled`; and last, wait for pool rows that fast-path
    /// transactions still hold (they commit or roll back without waiting for
    /// anything this transaction holds), so that what is left is really gone.
    async fn acquire(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        ledgers: &mut BTreeMap<Key, Locked>,
        item: &ItemId,
        location: &LocationId,
        want: u32,
    ) -> Result<u32, Fail> {
        let Some(locked) = ledgers.get_mut(&(item.clone(), location.clone())) else {
            return Ok(0); // nothing stocked there
        };
        let wants = [Want { item: item.clone(), location: Some(location.clone()), qty: want }];
        let mut got: u32 = D::take_units(tx, shop, &wants).await?.iter().map(|t| t.count).sum();
        if got < want {
            if !locked.prepared {
                self.prepare(tx, shop, &mut locked.row).await?;
                locked.prepared = true;
                locked.dirty = true;
            }
            let from_ledger = locked.row.unpooled.min((want - got) as i64);
            if from_ledger > 0 {
                locked.row.unpooled -= from_ledger;
                locked.dirty = true;
                got += from_ledger as u32;
            }
        }
        if got < want {
            let wants = [Want { item: item.clone(), location: Some(location.clone()), qty: want - got }];
            got += D::take_units_waiting(tx, shop, &wants).await?.iter().map(|t| t.count).sum::<u32>();
        }
        Ok(got)
    }

    /// Under the ledger lock: releases the expired holds of this (item,
    /// location) — sweeper lag must not cause undersell — and folds claimed
    /// and released units into the ledger row.
    async fn prepare(&self, tx: &mut Conn<D>, shop: &ShopId, row: &mut Ledger) -> Result<(), Fail> {
        let expired = D::expire_at(tx, shop, &row.item, &row.location).await?;
        self.counters.expired.fetch_add(expired, Ordering::Relaxed);
        let folded = D::fold(tx, shop, &row.item, &row.location).await?;
        row.unpooled += folded.restocked;
        row.committed += folded.settled;
        Ok(())
    }

    /// Refills the pool of each ledger row from its `unpooled` units and
    /// writes the row back.
    async fn write_back(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        rows: impl Iterator<Item = Ledger>,
    ) -> Result<(), Fail> {
        for mut row in rows {
            if row.unpooled > 0 {
                let n = row.unpooled.min(self.cfg.pool_cap as i64);
                let inserted =
                    tag::op("replenish", D::refill(tx, shop, &row.item, &row.location, self.cfg.pool_cap, n)).await?;
                if inserted > 0 {
                    self.counters.replenishments.fetch_add(1, Ordering::Relaxed);
                }
                row.unpooled -= inserted as i64;
            }
            D::write_ledger(tx, shop, &row).await?;
        }
        Ok(())
    }

    pub(crate) async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        tag::op("claim", self.retrying(true, || self.settle_once(shop, id, Settle::Claim))).await
    }

    pub(crate) async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        tag::op("release", self.retrying(true, || self.settle_once(shop, id, Settle::Release))).await
    }

    pub(crate) async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation, Error> {
        tag::op("extend", self.retrying(true, || self.settle_once(shop, id, Settle::Extend(ttl)))).await
    }

    /// Claim, release or extend: lock the reservation row (lock order step
    /// 1), decide by its status, flip the reservation's own rows. The ledger
    /// row is not touched, so claims of a hot item do not queue on it.
    async fn settle_once(&self, shop: &ShopId, id: ReservationId, op: Settle) -> Result<Reservation, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let Some(mut head) = D::head(&mut tx, shop, id, true).await? else {
            return Err(Fail::Domain(Error::NotFound));
        };
        use ReservationStatus::*;
        let outcome: Result<(), Error> = match (head.status, op) {
            (Held, _) if head.expired && !matches!(op, Settle::Release) => {
                // A hold that has expired is never claimable: release it now
                // rather than wait for the sweeper.
                D::transition(&mut tx, shop, id, Expired, "returned").await?;
                self.counters.expired.fetch_add(1, Ordering::Relaxed);
                head.status = Expired;
                Err(Error::Expired)
            }
            (Held, Settle::Claim) => {
                D::transition(&mut tx, shop, id, Claimed, "committed").await?;
                head.status = Claimed;
                Ok(())
            }
            (Held, Settle::Release) => {
                D::transition(&mut tx, shop, id, Released, "returned").await?;
                head.status = Released;
                Ok(())
            }
            (Held, Settle::Extend(ttl)) => {
                head.expires_at = D::extend(&mut tx, shop, id, ttl).await?;
                Ok(())
            }
            // Idempotent repeats.
            (Claimed, Settle::Claim) | (Released | Expired, Settle::Release) => Ok(()),
            (Expired, _) => Err(Error::Expired),
            (status, op) => Err(Error::WrongStatus(status, op.verb())),
        };
        if let Err(e) = outcome.as_ref()
            && head.status != Expired
        {
            return Err(Fail::Domain(e.clone()));
        }
        let lines = D::lines(&mut tx, shop, id).await?;
        tx.commit().await?;
        outcome.map_err(Fail::Domain)?;
        Ok(reservation(head, lines))
    }

    pub(crate) async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        tag::op("get", async move {
            self.retrying(true, || async move {
                let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
                let _lease = tag::Lease::transaction();
                let head = D::head(&mut tx, shop, id, false).await?.ok_or(Fail::Domain(Error::NotFound))?;
                let lines = D::lines(&mut tx, shop, id).await?;
                tx.commit().await?;
                Ok(reservation(head, lines))
            })
            .await
        })
        .await
    }

    pub(crate) async fn expire(&self, limit: u32) -> Result<u64, Error> {
        tag::op("expire", async move {
            let n = self
                .retrying(true, || async move {
                    let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                    let _lease = tag::Lease::transaction();
                    let n = D::sweep(&mut tx, limit).await?;
                    tx.commit().await?;
                    Ok(n)
                })
                .await?;
            self.counters.expired.fetch_add(n, Ordering::Relaxed);
            Ok(n)
        })
        .await
    }

    pub(crate) async fn change_stock(
        &self,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
        change: StockChange,
    ) -> Result<LocationLevel, Error> {
        let change = change.validate()?;
        // Setting an absolute value may be repeated safely; a delta may not.
        let idempotent = matches!(change, StockChange::Set(_));
        tag::op("stock", self.retrying(idempotent, || self.change_stock_once(shop, item, location, change))).await
    }

    /// A stock change under the ledger lock. A decrease takes `unpooled`
    /// units first, then free pool rows; it never takes reserved or committed
    /// units.
    async fn change_stock_once(
        &self,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
        change: StockChange,
    ) -> Result<LocationLevel, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        if !matches!(change, StockChange::Fulfil(_)) {
            D::ensure_ledger(&mut tx, shop, item, location).await?;
        }
        let spec = [(item.clone(), Some(location.clone()))];
        let Some(mut row) = D::lock_ledgers(&mut tx, shop, &spec).await?.pop() else {
            return Err(Fail::Domain(Error::StockConflict(format!(
                "no stock is recorded for item {item} at location {location}"
            ))));
        };
        self.prepare(&mut tx, shop, &mut row).await?;
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
                            let taken = match waiting {
                                false => D::take_units(&mut tx, shop, &wants).await?,
                                true => D::take_units_waiting(&mut tx, shop, &wants).await?,
                            };
                            let got: i64 = taken.iter().map(|t| t.count as i64).sum();
                            if got == 0 {
                                break;
                            }
                            need -= got;
                        }
                    }
                    if need > 0 {
                        if D::in_flight(&mut tx, shop, item, location).await? > 0 {
                            return Err(Fail::Contended);
                        }
                        return Err(Fail::Domain(Error::StockConflict(format!(
                            "on_hand of item {item} at location {location} cannot go to {target}: only {} unit(s) are unreserved; reserved and committed units cannot be removed",
                            -delta - need
                        ))));
                    }
                }
                row.on_hand = target;
            }
        }
        self.write_back(&mut tx, shop, std::iter::once(row)).await?;
        let level = D::levels(&mut tx, shop, item)
            .await?
            .into_iter()
            .find(|l| &l.location == location)
            .ok_or_else(|| Fail::Domain(Error::Internal("ledger row vanished".into())))?;
        tx.commit().await?;
        Ok(level)
    }

    pub(crate) async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        tag::op("levels", async move {
            self.retrying(true, || async move {
                let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
                let _lease = tag::Lease::transaction();
                let locations = D::levels(&mut tx, shop, item).await?;
                tx.commit().await?;
                Ok(ItemLevels { item: item.clone(), locations })
            })
            .await
        })
        .await
    }

    pub(crate) async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        tag::op("audit", async move {
            self.retrying(true, || async move {
                let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
                let _lease = tag::Lease::transaction();
                let (rows, orphans) = D::audit(&mut tx, shop).await?;
                tx.commit().await?;
                Ok(AuditReport::from_rows(rows, orphans))
            })
            .await
        })
        .await
    }
}

#[derive(Debug, Clone, Copy)]
enum Settle {
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

/// Every candidate (item, location) of a request; `None` stands for every
/// location of the item.
fn candidate_spec(req: &ReserveRequest) -> Vec<(ItemId, Option<LocationId>)> {
    req.lines
        .iter()
        .flat_map(|line| match &line.locations {
            Some(locs) => locs.iter().map(|l| (line.item.clone(), Some(l.clone()))).collect(),
            None => vec![(line.item.clone(), None)],
        })
        .collect()
}

fn total(h: &BTreeMap<LocationId, u32>) -> u32 {
    h.values().sum()
}

fn shortfalls(req: &ReserveRequest, held: &[BTreeMap<LocationId, u32>]) -> Vec<Shortfall> {
    req.lines
        .iter()
        .zip(held)
        .map(|(l, h)| Shortfall { item: l.item.clone(), requested: l.quantity.get(), available: total(h) })
        .collect()
}

fn reservation(head: crate::dialect::Head, lines: Vec<Allocation>) -> Reservation {
    Reservation { id: head.id, key: head.key, status: head.status, expires_at: head.expires_at, lines }
}

/// Full jitter, growing from 1 ms to at most 32 ms.
fn backoff(attempt: u32) -> Duration {
    let cap_us = 1_000u64 << attempt.min(5);
    Duration::from_micros(rand::thread_rng().gen_range(200..=cap_us))
}
