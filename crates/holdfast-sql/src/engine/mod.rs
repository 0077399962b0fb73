//! The reservation engine, written once for every SQL dialect: the pool of
//! unit rows, its inline refill, holds and their settlement, stock changes,
//! and the reports. docs/design.md describes the tables, the accounting
//! invariant and the one global lock order every path here follows; the
//! comments point at its steps.
//!
//! This module is the table of operations — each one's connection tag and
//! retry policy — and the policy itself ([`SqlStore::retrying`]). One attempt
//! of each operation is in `reserve`, `settle`, `stock` and `reports`.

mod batch;
mod gate;
mod reports;
mod reserve;
pub(crate) use reserve::reservation;
mod settle;
mod stock;
mod watch;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use holdfast_core::{
    AuditReport, Backend, Error, ItemId, ItemLevels, LocationLevel, Reservation, ReservationId, ReserveRequest,
    Reserved, Settle, ShopId, StockChange, StockRequest, Store, StoreStats, Ttl,
};
use rand::Rng;
use sqlx::Pool;

use crate::coalesce::Coalescer;
use crate::detach::{self, Detached};
use crate::dialect::{Dialect, Fault};
use crate::tag;

/// Settings shared by every SQL store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Most unit rows per (shop, item, location) in the pool.
    pub pool_cap: u32,
    /// Most attempts of one operation (deadlocks, busy database, contention).
    pub max_attempts: u32,
    /// Request coalescing: concurrent reserves, and concurrent claims,
    /// releases and extends, of one shop go to the database in batches, and
    /// concurrent sweeps as one (docs/design.md, "Request coalescing").
    pub coalesce: bool,
    /// Most requests in one batch.
    pub coalesce_max_batch: u32,
    /// Most batches of one shop (and operation) running at once. One: on a
    /// hot item two batches at once are smaller and meet each other at the
    /// item's pool (BENCHMARKS.md, "One batch of a shop at a time, or two",
    /// and "Refilling ahead of need": still slower than one).
    pub coalesce_in_flight: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { pool_cap: 1_000, max_attempts: 60, coalesce: true, coalesce_max_batch: 64, coalesce_in_flight: 1 }
    }
}

/// Whose requests may share a batch: one shop's, sent under one conn tag
/// (the batch's statements carry the tag, so a batch never mixes callers).
type BatchKey = (ShopId, Option<holdfast_core::ConnTag>);

#[derive(Debug)]
struct Coalescers {
    /// `None`: not settled by the batch, goes on alone.
    reserves: Coalescer<BatchKey, ReserveRequest, Option<Result<Reserved, Error>>>,
    settles: Coalescer<BatchKey, (ReservationId, Settle), Result<Reservation, Error>>,
    sweeps: Coalescer<Option<holdfast_core::ConnTag>, u32, Result<u64, Error>>,
}

/// Why one attempt of an operation did not finish.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The database said no; [`Dialect::fault`] tells whether to retry.
    Db(sqlx::Error),
    /// Something the operation needs is in another transaction's hands, so
    /// its answer is not final yet (not "sold out"): retry after a pause,
    /// or, for [`Contention::Expiring`], once that hold has expired.
    Contended(Contention),
    /// A final answer for the caller.
    Domain(Error),
    /// A ledger row the slow path needs is locked by a refill in progress.
    LedgerBusy,
    /// Waited for another transaction's refill: start over at once (no
    /// backoff; not counted as a retry, since the other one made progress).
    Again,
}

/// What stood in the way of an attempt that failed with [`Fail::Contended`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contention {
    /// Units in flight in other transactions: pool rows locked by ones that
    /// may roll back, expired holds in a sweeper's or a claim's hands,
    /// released units not yet folded into the ledger row.
    InFlight,
    /// All that was in flight were holds about to expire: how long until the
    /// first of them has.
    Expiring(Duration),
    /// The request's idempotency key was taken by a transaction that rolled
    /// back before the replay could read it.
    KeyRace,
    /// A reserve that had to commit before holds about to expire did (its
    /// answer would have changed) was not ready in time, and rolled back.
    LateCommit,
}

impl Fail {
    /// The name of a retried failure in the `slow store operation` log line.
    fn label<D: Dialect>(&self) -> &'static str {
        match self {
            Fail::Contended(Contention::InFlight) => "in_flight",
            Fail::Contended(Contention::Expiring(_)) => "expiring",
            Fail::Contended(Contention::KeyRace) => "key_race",
            Fail::Contended(Contention::LateCommit) => "late_commit",
            Fail::LedgerBusy => "ledger_busy",
            Fail::Again => "refill_wait",
            Fail::Domain(_) => "answered",
            Fail::Db(e) => match D::fault(e) {
                Fault::Deadlock => "deadlock",
                Fault::Busy => "busy",
                Fault::Connection => "connection",
                Fault::Other => "error",
            },
        }
    }
}

/// The tries of one operation so far, for the `slow store operation` line.
struct Tries {
    start: std::time::Instant,
    /// Attempts made; a start-over after another transaction's refill is
    /// not one ([`Fail::Again`]).
    attempts: u32,
    refill_waits: u32,
    /// Why the failed attempts failed, by [`Fail::label`], in first-seen order.
    failed: Vec<(&'static str, u32)>,
    /// Time spent in pauses between attempts.
    slept: Duration,
}

impl Tries {
    fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
            attempts: 0,
            refill_waits: 0,
            failed: Vec::new(),
            slept: Duration::ZERO,
        }
    }

    fn failed(&mut self, label: &'static str) {
        match self.failed.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += 1,
            None => self.failed.push((label, 1)),
        }
    }

    /// `failed` as the log line shows it: `in_flight=3,expiring=1`.
    fn failed_counts(&self) -> String {
        self.failed.iter().map(|(l, n)| format!("{l}={n}")).collect::<Vec<_>>().join(",")
    }

    /// Logs the operation at `WARN` when it took [`SLOW`] or longer.
    fn log_if_slow(&self, outcome: &str) {
        let took = self.start.elapsed();
        if took >= SLOW {
            tracing::warn!(
                attempts = self.attempts,
                refill_waits = self.refill_waits,
                failed = self.failed_counts(),
                slept_ms = self.slept.as_millis() as u64,
                ms = took.as_millis() as u64,
                "slow store operation: {outcome}"
            );
        }
    }
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
    reserves_batched: AtomicU64,
    reserve_batches: AtomicU64,
}

/// A [`holdfast_core::Store`] over one SQL database.
#[derive(Debug)]
pub(crate) struct SqlStore<D: Dialect> {
    pub(crate) pool: Pool<D::Db>,
    cfg: StoreConfig,
    counters: Counters,
    /// At most one slow path per (shop, item) of this process at the ledger.
    gates: gate::Gates,
    /// One reserve per (shop, idempotency key) of this process at a time.
    keys: gate::KeyGates,
    /// Per pool: the units this process's batches took from it since it
    /// was last refilled, and whether a refill ahead of need is running for
    /// it (stock.rs, [`SqlStore::refill_ahead`]).
    refilling: stock::Refilling,
    /// `None` when coalescing is off.
    coalesce: Option<Coalescers>,
    /// Who wants which events (webhooks.rs).
    pub(crate) outbox: crate::webhooks::Outbox,
    /// The `Arc` this store lives in, to run operations on tasks of their
    /// own ([`Detached::detached`]).
    me: Weak<Self>,
}

impl<D: Dialect> Detached for SqlStore<D> {
    fn weak_self(&self) -> &Weak<Self> {
        &self.me
    }
}

impl<D: Dialect> SqlStore<D> {
    pub(crate) fn new(pool: Pool<D::Db>, cfg: StoreConfig) -> Arc<Self> {
        Arc::new_cyclic(|me| Self::with(pool, cfg, me.clone()))
    }

    fn with(pool: Pool<D::Db>, cfg: StoreConfig, me: Weak<Self>) -> Self {
        let coalesce = cfg.coalesce.then(|| {
            let (batch, in_flight) = (cfg.coalesce_max_batch as usize, cfg.coalesce_in_flight as usize);
            Coalescers {
                reserves: Coalescer::new("reserve", batch, in_flight),
                settles: Coalescer::new("settle", batch, in_flight),
                sweeps: Coalescer::new("expire", batch, 1),
            }
        });
        let (counters, gates, keys, refilling, outbox) = Default::default();
        Self { pool, cfg, counters, gates, keys, refilling, coalesce, outbox, me }
    }

    /// A claim, release or extend: in a batch of its shop's, or alone.
    async fn settle(&self, shop: &ShopId, id: ReservationId, op: Settle) -> Result<Reservation, Error> {
        let Some(c) = &self.coalesce else {
            return self.op(op.name(), true, || self.settle_once(shop, id, op)).await;
        };
        let key = (shop.clone(), tag::caller());
        tag::op(op.name(), c.settles.submit(key, (id, op), |ops| self.settle_batch(shop, ops), left)).await
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
        let mut tries = Tries::new();
        loop {
            if detach::gone() {
                // Nothing of this attempt has started; the ones before it
                // failed, or were cut short (a lost connection).
                return Err(Error::Unavailable("the caller went away before the operation finished".into()));
            }
            tries.attempts += 1;
            let fail = match attempt().await {
                Ok(v) => {
                    tries.log_if_slow("done");
                    return Ok(v);
                }
                Err(Fail::Domain(e)) => {
                    tries.log_if_slow("answered");
                    return Err(e);
                }
                // Bounded too, in case refills never end.
                Err(Fail::Again) if tries.refill_waits < self.cfg.max_attempts * 20 => {
                    tries.refill_waits += 1;
                    tries.attempts -= 1;
                    continue;
                }
                Err(fail) => fail,
            };
            tries.failed(fail.label::<D>());
            let n = tries.attempts;
            let retry = match &fail {
                Fail::Contended(_) | Fail::Again | Fail::LedgerBusy => true,
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
                tries.log_if_slow("gave up");
                return Err(match fail {
                    Fail::Contended(_) | Fail::Again | Fail::LedgerBusy => Error::RetriesExhausted(n),
                    Fail::Db(e) => match D::fault(&e) {
                        Fault::Deadlock | Fault::Busy => Error::RetriesExhausted(n),
                        Fault::Connection => Error::Unavailable(e.to_string()),
                        Fault::Other => Error::Internal(e.to_string()),
                    },
                    Fail::Domain(e) => e,
                });
            }
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            let until = match fail {
                Fail::Contended(Contention::Expiring(expiry)) => expiry,
                _ => Duration::ZERO,
            };
            let pause = backoff(n).max(until);
            tries.slept += pause;
            tokio::time::sleep(pause).await;
        }
    }

    /// Runs `attempt` as operation `tag`, retried as [`Self::retrying`] says.
    pub(crate) async fn op<T, F, Fut>(&self, tag: &'static str, idempotent: bool, attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>> + Send,
    {
        tag::op(tag, self.retrying(idempotent, attempt)).await
    }
}

#[async_trait]
impl<D: Dialect> Store for SqlStore<D> {
    fn backend(&self) -> Backend {
        D::BACKEND
    }

    async fn migrate(&self) -> Result<(), Error> {
        tag::op("migrate", crate::migrate::run::<D>(&self.pool)).await.map_err(|e| match D::fault(&e) {
            // A server that cannot be reached is an outage, not a failed migration.
            Fault::Connection => Error::Unavailable(e.to_string()),
            _ => Error::Internal(format!("migration failed: {e}")),
        })
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        let req = req.clone();
        self.detached(|me| async move { me.reserve_here(req).await }).await
    }

    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let shop = shop.clone();
        self.detached(|me| async move { me.settle(&shop, id, Settle::Claim).await }).await
    }

    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let shop = shop.clone();
        self.detached(|me| async move { me.settle(&shop, id, Settle::Release).await }).await
    }

    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation, Error> {
        let shop = shop.clone();
        self.detached(|me| async move { me.settle(&shop, id, Settle::Extend(ttl)).await }).await
    }

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let shop = shop.clone();
        self.detached(|me| async move { me.op("get", true, || me.get_once(&shop, id)).await }).await
    }

    async fn expire(&self, limit: u32) -> Result<u64, Error> {
        self.detached(|me| async move { me.expire_here(limit).await }).await
    }

    async fn unswept(&self) -> Result<Option<holdfast_core::Unswept>, Error> {
        crate::sweeper::unswept(self).await.map(Some)
    }

    /// First folds what the oldest finished reservations still have
    /// unfolded (a refill of each such (item, location), taking its ledger
    /// row only when no one else holds it), so an item that stopped selling
    /// does not keep its last reservations for ever; then deletes.
    async fn purge(&self, older_than: Duration, limit: u32) -> Result<u64, Error> {
        self.detached(|me| async move {
            let stale = me.op("purge", true, || me.stale_folds(older_than, limit)).await?;
            for (shop, item, location) in stale {
                let spec = [(item, Some(location))];
                me.op("purge", true, || me.refill(&shop, &spec)).await?;
            }
            me.op("purge", true, || me.purge_once(older_than, limit)).await
        })
        .await
    }

    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        let req = req.clone();
        self.detached(|me| async move { me.change_stock_here(&req).await }).await
    }

    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        let (shop, item) = (shop.clone(), item.clone());
        self.detached(|me| async move { me.op("levels", true, || me.levels_once(&shop, &item)).await }).await
    }

    async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        let shop = shop.cloned();
        self.detached(|me| async move { me.op("audit", true, || me.audit_once(shop.as_ref())).await }).await
    }

    fn stats(&self) -> StoreStats {
        let c = &self.counters;
        StoreStats {
            retries: c.retries.load(Ordering::Relaxed),
            deadlocks: c.deadlocks.load(Ordering::Relaxed),
            replenishments: c.replenishments.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            reserves_batched: c.reserves_batched.load(Ordering::Relaxed),
            reserve_batches: c.reserve_batches.load(Ordering::Relaxed),
        }
    }
}

/// The operations of the [`Store`] impl, run on their own tasks.
impl<D: Dialect> SqlStore<D> {
    async fn reserve_here(&self, req: ReserveRequest) -> Result<Reserved, Error> {
        // A retry waits for its key's attempt under way (gate.rs).
        let _key = self.keys.enter(req.shop(), [req.key()], true).await;
        // The uncoalesced path is boxed: its future (retries, the slow path)
        // is large and most coalesced requests never take it.
        let Some(c) = &self.coalesce else {
            return Box::pin(self.reserve_alone(&req)).await;
        };
        let key = (req.shop().clone(), tag::caller());
        tag::op("reserve", async {
            // What the batch could not settle goes on alone, here, outside
            // the lane: the next batch need not wait for a slow path.
            match c.reserves.submit(key, req.clone(), |reqs| self.reserve_batch(reqs), || Some(left())).await {
                Some(answer) => answer,
                None => Box::pin(self.reserve_alone(&req)).await,
            }
        })
        .await
    }

    async fn expire_here(&self, limit: u32) -> Result<u64, Error> {
        let n = match &self.coalesce {
            None => self.op("expire", true, || self.sweep_once(limit)).await?,
            // Concurrent sweeps of this process go as one, of their limits
            // together; each is told its share of what was released.
            Some(c) => {
                let sweep = |limits: Vec<u32>| async move {
                    let total = limits.iter().sum::<u32>().min(10_000);
                    match self.retrying(true, || self.sweep_once(total)).await {
                        Ok(mut left) => limits
                            .iter()
                            .map(|&l| {
                                let mine = left.min(l as u64);
                                left -= mine;
                                Ok(mine)
                            })
                            .collect(),
                        Err(e) => limits.iter().map(|_| Err(e.clone())).collect(),
                    }
                };
                tag::op("expire", c.sweeps.submit(tag::caller(), limit, sweep, left)).await?
            }
        };
        self.counters.expired.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }

    async fn change_stock_here(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        // Setting an absolute value may be repeated safely; a delta may not.
        let idempotent = matches!(req.change(), StockChange::Set(_));
        self.op("stock", idempotent, || self.change_stock_once(req)).await?;
        self.op("stock", true, || self.level_at(req.shop(), req.item(), req.location())).await
    }
}

/// The answer of a coalesced request whose caller went away before its
/// batch started: nothing was done.
fn left<T>() -> Result<T, Error> {
    Err(Error::Unavailable("the caller went away before the operation started".into()))
}

/// An operation that takes this long, retries included, is logged with its
/// attempts.
const SLOW: Duration = Duration::from_secs(1);

/// Full jitter, growing from 1 ms to at most 32 ms.
fn backoff(attempt: u32) -> Duration {
    let cap_us = 1_000u64 << attempt.min(5);
    Duration::from_micros(rand::thread_rng().gen_range(200..=cap_us))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_tries_are_counted_by_what_stood_in_the_way_in_first_seen_order() {
        let mut tries = Tries::new();
        assert_eq!(tries.failed_counts(), "");
        for fail in [
            Fail::Contended(Contention::Expiring(Duration::from_millis(40))),
            Fail::Contended(Contention::InFlight),
            Fail::Contended(Contention::Expiring(Duration::from_millis(3))),
            Fail::LedgerBusy,
            Fail::Contended(Contention::KeyRace),
        ] {
            tries.failed(fail.label::<crate::sqlite::Lite>());
        }
        assert_eq!(tries.failed_counts(), "expiring=2,in_flight=1,ledger_busy=1,key_race=1");
    }
}
