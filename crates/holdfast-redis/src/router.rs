//! [`ModeRouter`]: one `Store` over holdfast's SQL store and the legacy Redis
//! store that serves each shop in its mode.
//!
//! * New holds go where the shop's mode says: `redis` and `shadow` to Redis,
//!   `sql-primary` and `sql` to SQL.
//! * Claim, release, extend and get go to the store that *made* the hold,
//!   told by the id (Redis ids start at [`REDIS_ID_BASE`]), whatever the mode
//!   is now. So a hold made before a mode change or a kill switch is settled
//!   where its units are, and no unit is lost across the switch.
//! * `shadow`: after Redis answers, the operation is queued for the
//!   [`shadow`](crate::shadow) mirror; the buyer never waits for SQL.
//! * `sql-primary`: after SQL commits, the same hold is written to Redis
//!   (synchronously but best effort: a Redis failure is counted, never
//!   returned), so that Redis is current the moment the kill switch sends
//!   the shop back. The Redis half never decides anything.

use std::sync::Arc;

use async_trait::async_trait;
use holdfast_core::{
    AuditReport, Backend, Error, ItemId, ItemLevels, LocationLevel, Mode, Reservation, ReservationId, ReserveRequest,
    Reserved, Settle, ShopId, StockRequest, Store, StoreStats, Ttl,
};

use crate::modes::ModeControl;
use crate::shadow::{Decision, MirrorOp, Shadow, ShadowConfig, ShadowCounts};
use crate::store::{RedisStore, is_redis_id};

#[cfg(doc)]
use crate::store::REDIS_ID_BASE;

/// Serves each shop in its mode.
#[derive(Debug)]
pub struct ModeRouter {
    sql: Arc<dyn Store>,
    redis: Arc<RedisStore>,
    control: Arc<ModeControl>,
    shadow: Shadow,
}

impl ModeRouter {
    /// Starts the shadow mirror's workers (they stop with the router).
    pub fn new(sql: Arc<dyn Store>, redis: Arc<RedisStore>, control: Arc<ModeControl>, config: ShadowConfig) -> Self {
        let shadow = Shadow::start(sql.clone(), redis.clone(), config);
        Self { sql, redis, control, shadow }
    }

    pub fn control(&self) -> &Arc<ModeControl> {
        &self.control
    }

    pub fn redis(&self) -> &Arc<RedisStore> {
        &self.redis
    }

    pub fn sql(&self) -> &Arc<dyn Store> {
        &self.sql
    }

    /// Shadow and mirroring counters (`/admin/modes` shows them too).
    pub fn shadow_counts(&self) -> ShadowCounts {
        self.shadow.counts()
    }

    /// Waits until the shadow queue is empty and its last operation applied
    /// (tests, and `holdfast mode compare`-style reports).
    pub async fn drain_shadow(&self) {
        self.shadow.drain().await
    }

    pub fn mode_of(&self, shop: &ShopId) -> Mode {
        self.control.mode_of(shop)
    }

    fn primary(&self, mode: Mode) -> &dyn Store {
        match mode {
            Mode::Redis | Mode::Shadow => &*self.redis,
            Mode::SqlPrimary | Mode::Sql => &*self.sql,
        }
    }

    /// Claim, release or extend, routed by the hold's origin.
    async fn settle(&self, shop: &ShopId, id: ReservationId, op: Settle) -> Result<Reservation, Error> {
        let mode = self.mode_of(shop);
        if is_redis_id(id) {
            let answer = op.on(&*self.redis, shop, id).await;
            // A Redis hold has a SQL twin only if it was made in shadow; in
            // `redis` mode there is nothing to mirror.
            if mode != Mode::Redis && !matches!(answer, Err(Error::Unavailable(_))) {
                self.shadow.enqueue(MirrorOp::Settle {
                    shop: shop.clone(),
                    redis_id: id,
                    op,
                    redis: Decision::of(&answer.as_ref().map(|r| r.status)),
                });
            }
            return answer;
        }
        let answer = op.on(&*self.sql, shop, id).await?;
        // In `sql` mode Redis is out of the picture (and may be down).
        if mode != Mode::Sql {
            self.shadow.redis_after_commit(shop, id, op, &answer).await;
        }
        Ok(answer)
    }
}

#[async_trait]
impl Store for ModeRouter {
    fn backend(&self) -> Backend {
        self.sql.backend()
    }

    async fn migrate(&self) -> Result<(), Error> {
        self.sql.migrate().await
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        match self.mode_of(req.shop()) {
            Mode::Sql => self.sql.reserve(req).await,
            Mode::Redis => self.redis.reserve(req).await,
            Mode::Shadow => {
                let answer = self.redis.reserve(req).await;
                if !matches!(answer, Err(Error::Unavailable(_))) {
                    self.shadow.enqueue(MirrorOp::Reserve {
                        req: req.clone(),
                        redis: Decision::of_reserve(&answer),
                        redis_id: answer.as_ref().ok().filter(|r| r.created).map(|r| r.reservation.id),
                    });
                }
                answer
            }
            Mode::SqlPrimary => {
                let answer = self.sql.reserve(req).await?;
                if answer.created {
                    self.shadow.hold_after_commit(req, &answer.reservation).await;
                }
                Ok(answer)
            }
        }
    }

    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        self.settle(shop, id, Settle::Claim).await
    }

    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        self.settle(shop, id, Settle::Release).await
    }

    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation, Error> {
        self.settle(shop, id, Settle::Extend(ttl)).await
    }

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        if is_redis_id(id) { self.redis.get(shop, id).await } else { self.sql.get(shop, id).await }
    }

    /// Retention runs on the SQL store; the legacy store keeps its records
    /// as the design it stands for does (see `RedisStore::purge`).
    async fn purge(&self, older_than: std::time::Duration, limit: u32) -> Result<u64, Error> {
        self.sql.purge(older_than, limit).await
    }

    /// The SQL store's: holds that are SQL's to sweep. (The Redis side
    /// expires by its own clock and keeps no such table.)
    async fn unswept(&self) -> Result<Option<holdfast_core::Unswept>, Error> {
        self.sql.unswept().await
    }

    /// Sweeps both stores. Each side expires its own holds by its own clock;
    /// a Redis outage does not stop the SQL sweep.
    async fn expire(&self, limit: u32) -> Result<u64, Error> {
        let n = self.sql.expire(limit).await?;
        match self.redis.expire(limit).await {
            Ok(m) => Ok(n + m),
            Err(e) => {
                metrics::counter!("holdfast_redis_errors_total", "op" => "expire").increment(1);
                tracing::debug!(error = %e, "redis sweep failed");
                Ok(n)
            }
        }
    }

    /// Stock changes go to the primary and then to the other side,
    /// synchronously (they are rare and must not be dropped like a mirrored
    /// reserve may be); a failure on the other side is counted and logged.
    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        let mode = self.mode_of(req.shop());
        let level = self.primary(mode).change_stock(req).await?;
        let other: Option<&dyn Store> = match mode {
            Mode::Shadow => Some(&*self.sql),
            Mode::SqlPrimary => Some(&*self.redis),
            Mode::Redis | Mode::Sql => None,
        };
        if let Some(other) = other
            && let Err(e) = other.change_stock(req).await
        {
            self.shadow.count_mirror_error("change_stock", &e);
        }
        Ok(level)
    }

    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        self.primary(self.mode_of(shop)).levels(shop, item).await
    }

    /// One shop: its primary's books. All shops: both stores' books.
    async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        if let Some(shop) = shop {
            return self.primary(self.mode_of(shop)).audit(Some(shop)).await;
        }
        let mut report = self.sql.audit(None).await?;
        let legacy = self.redis.audit(None).await?;
        report.checked += legacy.checked;
        report.breaches.extend(legacy.breaches);
        Ok(report)
    }

    fn stats(&self) -> StoreStats {
        let s = self.sql.stats();
        StoreStats { expired: s.expired + self.redis.stats().expired, ..s }
    }
}
