//! The shadow-mode comparison, and the Redis writes of sql-primary.
//!
//! In `shadow`, Redis answers the buyer; the same operation is then queued
//! for SQL on a bounded queue. A full queue skips the mirror and counts it
//! (the buyer never waits for SQL). Workers apply each operation to SQL and
//! compare the two decisions; every mismatch is counted
//! (`holdfast_shadow_mismatches_total`) and logged with both answers.
//!
//! Operations of one shop go to one worker, in the order they were queued,
//! so a claim is never mirrored before its reserve. That order is the order
//! the answers came back from Redis, which under concurrency is not always
//! the order Redis decided in: at sell-out, two buyers racing for the last
//! unit may reach SQL the other way round, and SQL gives the unit to the
//! other buyer. That is the expected source of mismatches under load. When
//! SQL holds units for a buyer Redis refused, the mirror releases them at
//! once, so SQL converges back to Redis instead of drifting.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use holdfast_core::{
    Allocation, Error, ReservationId, ReservationStatus, ReserveRequest, Reserved, Settle, ShopId, Store,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::store::RedisStore;
use holdfast_core::bucket;

/// The bounded queue of the shadow mirror.
#[derive(Debug, Clone, Copy)]
pub struct ShadowConfig {
    /// Operations waiting for SQL, over all workers. Beyond it mirroring is
    /// skipped and counted.
    pub capacity: usize,
    /// Workers; each shop is mirrored by one of them, in order.
    pub workers: usize,
}

impl Default for ShadowConfig {
    fn default() -> Self {
        Self { capacity: 10_000, workers: 4 }
    }
}

/// What a store decided, in terms that can be compared across stores
/// (reservation ids differ by construction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Held(Vec<Allocation>),
    Refused,
    Status(ReservationStatus),
    Failed(&'static str),
}

impl Decision {
    pub fn of_reserve(answer: &Result<Reserved, Error>) -> Self {
        match answer {
            Ok(r) => {
                let mut lines = r.reservation.lines.clone();
                lines.sort();
                Decision::Held(lines)
            }
            Err(Error::InsufficientStock(_)) => Decision::Refused,
            Err(e) => Decision::Failed(e.code()),
        }
    }

    pub fn of(answer: &Result<ReservationStatus, &Error>) -> Self {
        match answer {
            Ok(s) => Decision::Status(*s),
            Err(e) => Decision::Failed(e.code()),
        }
    }
}

/// One operation for the mirror.
#[derive(Debug)]
pub enum MirrorOp {
    Reserve { req: ReserveRequest, redis: Decision, redis_id: Option<ReservationId> },
    Settle { shop: ShopId, redis_id: ReservationId, op: Settle, redis: Decision },
}

impl MirrorOp {
    fn shop(&self) -> &ShopId {
        match self {
            MirrorOp::Reserve { req, .. } => req.shop(),
            MirrorOp::Settle { shop, .. } => shop,
        }
    }
}

/// The counters, as `/admin/modes` and the tests read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowCounts {
    /// Operations applied to SQL by the mirror.
    pub mirrored: u64,
    /// Of those, how many decided as Redis did.
    pub matched: u64,
    /// And how many did not (each one is logged with both answers).
    pub mismatches: u64,
    /// Mirrors skipped because the queue was full.
    pub skipped_queue_full: u64,
    /// Failures of the secondary side (SQL in shadow, Redis in sql-primary):
    /// counted, never returned to the buyer.
    pub mirror_errors: u64,
    /// Settlements with no twin on the other side (its reserve was refused
    /// there, skipped, or made before the shop changed mode).
    pub unmapped: u64,
    /// sql-primary: Redis counters that went below zero when a SQL hold was
    /// written to them (Redis had drifted; reconcile).
    pub redis_drift: u64,
}

#[derive(Debug, Default)]
struct Counters {
    mirrored: AtomicU64,
    matched: AtomicU64,
    mismatches: AtomicU64,
    skipped: AtomicU64,
    errors: AtomicU64,
    unmapped: AtomicU64,
    drift: AtomicU64,
    pending: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Shadow {
    queues: Vec<mpsc::Sender<MirrorOp>>,
    counters: Arc<Counters>,
    redis: Arc<RedisStore>,
}

struct Worker {
    sql: Arc<dyn Store>,
    redis: Arc<RedisStore>,
    counters: Arc<Counters>,
}

impl Shadow {
    pub(crate) fn start(sql: Arc<dyn Store>, redis: Arc<RedisStore>, config: ShadowConfig) -> Self {
        let counters = Arc::new(Counters::default());
        let workers = config.workers.max(1);
        let per = (config.capacity / workers).max(1);
        let queues = (0..workers)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<MirrorOp>(per);
                let w = Worker { sql: sql.clone(), redis: redis.clone(), counters: counters.clone() };
                tokio::spawn(async move {
                    while let Some(op) = rx.recv().await {
                        w.apply(op).await;
                        w.counters.pending.fetch_sub(1, Ordering::AcqRel);
                    }
                });
                tx
            })
            .collect();
        Self { queues, counters, redis }
    }

    /// Queues `op` without waiting; a full queue drops it and counts.
    pub(crate) fn enqueue(&self, op: MirrorOp) {
        let q = &self.queues[bucket(op.shop()) as usize % self.queues.len()];
        self.counters.pending.fetch_add(1, Ordering::AcqRel);
        if q.try_send(op).is_err() {
            self.counters.pending.fetch_sub(1, Ordering::AcqRel);
            self.counters.skipped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("holdfast_shadow_skipped_total").increment(1);
        }
    }

    pub(crate) async fn drain(&self) {
        while self.counters.pending.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub(crate) fn counts(&self) -> ShadowCounts {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ShadowCounts {
            mirrored: g(&c.mirrored),
            matched: g(&c.matched),
            mismatches: g(&c.mismatches),
            skipped_queue_full: g(&c.skipped),
            mirror_errors: g(&c.errors),
            unmapped: g(&c.unmapped),
            redis_drift: g(&c.drift),
        }
    }

    pub(crate) fn count_mirror_error(&self, op: &'static str, e: &Error) {
        count_error(&self.counters, op, e);
    }

    /// sql-primary: writes a committed SQL hold to Redis.
    pub(crate) async fn hold_after_commit(&self, req: &ReserveRequest, r: &holdfast_core::Reservation) {
        match self.redis.mirror_hold(req.shop(), r, &req.fingerprint()).await {
            Ok(Some(0)) | Ok(None) => {}
            // SQL released expired holds inline that Redis still counts as
            // held (its sweeper lags): release Redis's due holds now, which
            // gives their units back to the counters that went below zero.
            Ok(Some(_)) if matches!(self.redis.expire(MIRROR_SWEEP).await, Ok(n) if n > 0) => {}
            Ok(Some(n)) => {
                self.counters.drift.fetch_add(n as u64, Ordering::Relaxed);
                metrics::counter!("holdfast_redis_drift_total").increment(n as u64);
                tracing::warn!(shop = %req.shop(), id = %r.id, "redis counter below zero after a sql-primary hold");
            }
            Err(e) => self.count_mirror_error("reserve", &e),
        }
    }

    /// sql-primary (and SQL holds settled after a kill switch): applies a
    /// committed claim, release or extend to the Redis copy of the hold.
    pub(crate) async fn redis_after_commit(
        &self,
        shop: &ShopId,
        id: ReservationId,
        op: Settle,
        sql: &holdfast_core::Reservation,
    ) {
        let ttl = match op {
            Settle::Extend(t) => Some(t),
            _ => None,
        };
        let redis = self.redis.mirror_settle(shop, id, op.name(), ttl).await;
        match redis {
            Ok(r) if r.status == sql.status => {}
            Err(Error::NotFound) => {
                self.counters.unmapped.fetch_add(1, Ordering::Relaxed);
            }
            Err(Error::Unavailable(m)) => self.count_mirror_error(op.name(), &Error::Unavailable(m)),
            other => {
                let redis = Decision::of(&other.as_ref().map(|r| r.status));
                mismatch(&self.counters, shop, op.name(), &redis, &Decision::Status(sql.status));
            }
        }
    }
}

/// Most due Redis holds a sql-primary hold releases when its mirror finds
/// the counters short.
const MIRROR_SWEEP: u32 = 1_000;

fn count_error(counters: &Counters, op: &'static str, e: &Error) {
    counters.errors.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("holdfast_mirror_errors_total", "op" => op).increment(1);
    tracing::debug!(op, error = %e, "mirror failed");
}

fn mismatch(counters: &Counters, shop: &ShopId, op: &'static str, redis: &Decision, sql: &Decision) {
    counters.mismatches.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("holdfast_shadow_mismatches_total", "op" => op).increment(1);
    tracing::warn!(%shop, op, ?redis, ?sql, "shadow mismatch: redis and sql decided differently");
}

impl Worker {
    async fn apply(&self, op: MirrorOp) {
        match op {
            MirrorOp::Reserve { req, redis, redis_id } => self.reserve(req, redis, redis_id).await,
            MirrorOp::Settle { shop, redis_id, op, redis } => self.settle(shop, redis_id, op, redis).await,
        }
    }

    fn compared(&self, shop: &ShopId, op: &'static str, redis: &Decision, sql: &Decision) {
        self.counters.mirrored.fetch_add(1, Ordering::Relaxed);
        if redis == sql {
            self.counters.matched.fetch_add(1, Ordering::Relaxed);
        } else {
            mismatch(&self.counters, shop, op, redis, sql);
        }
    }

    async fn reserve(&self, req: ReserveRequest, redis: Decision, redis_id: Option<ReservationId>) {
        let answer = self.sql.reserve(&req).await;
        if let Err(e @ (Error::Unavailable(_) | Error::RetriesExhausted(_) | Error::Internal(_))) = &answer {
            count_error(&self.counters, "reserve", e);
            return;
        }
        let sql = Decision::of_reserve(&answer);
        self.compared(req.shop(), "reserve", &redis, &sql);
        match (&redis, answer) {
            (Decision::Held(_), Ok(r)) => {
                if let Some(rid) = redis_id
                    && let Err(e) = self.redis.set_mirror_id(req.shop(), rid, Some(r.reservation.id)).await
                {
                    count_error(&self.counters, "reserve", &e);
                }
            }
            // SQL holds units for a buyer Redis turned away: give them back
            // now, or SQL would sell less than Redis from here on.
            (_, Ok(r)) if r.created => {
                if let Err(e) = self.sql.release(req.shop(), r.reservation.id).await {
                    count_error(&self.counters, "reserve", &e);
                }
            }
            _ => {}
        }
    }

    async fn settle(&self, shop: ShopId, redis_id: ReservationId, op: Settle, redis: Decision) {
        let sql_id = match self.redis.mirror_id(&shop, redis_id).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                self.counters.unmapped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(e) => return count_error(&self.counters, op.name(), &e),
        };
        let answer = op.on(&*self.sql, &shop, sql_id).await;
        if let Err(e @ (Error::Unavailable(_) | Error::RetriesExhausted(_) | Error::Internal(_))) = &answer {
            return count_error(&self.counters, op.name(), e);
        }
        self.compared(&shop, op.name(), &redis, &Decision::of(&answer.as_ref().map(|r| r.status)));
    }
}
