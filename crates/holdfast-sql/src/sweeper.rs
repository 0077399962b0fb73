//! The expiry sweeper (inside `serve`, and beside `bench flash-sale
//! --retention`): every interval it releases holds past
//! their expiry until none is left, reads what is left past expiry from the
//! database (its backlog gauges), then removes finished reservations older
//! than the retention period. The store takes both with `FOR UPDATE SKIP
//! LOCKED`, so any number of `serve` processes sweep one database at once
//! without doing the same work twice.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_core::{Error, Store, Unswept};
use metrics::{counter, gauge};
use tokio::sync::watch;

use crate::dialect::{Dialect, Stmt};
use crate::driver::Driver;
use crate::engine::SqlStore;
use crate::run::{self, plain};

#[derive(Debug, Clone)]
pub struct Sweeper {
    store: Arc<dyn Store>,
    batch: u32,
    /// Finished reservations older than this are removed; `None`: kept.
    retention: Option<Duration>,
}

/// Most retention transactions per interval: a backlog (retention switched
/// on over years of history) is worked off over several intervals instead
/// of delaying the next expiry sweep.
const PURGES_PER_INTERVAL: u32 = 20;

impl Sweeper {
    pub fn new(store: Arc<dyn Store>, batch: u32) -> Self {
        Self { store, batch, retention: None }
    }

    /// Removes finished reservations older than `retention` after each sweep.
    pub fn with_retention(mut self, retention: Option<Duration>) -> Self {
        self.retention = retention;
        self
    }

    /// Retention: up to [`PURGES_PER_INTERVAL`] transactions of one batch
    /// each, until one finds less than a batch; returns how many were removed.
    pub async fn purge(&self) -> Result<u64, Error> {
        self.purge_passes(Some(PURGES_PER_INTERVAL)).await
    }

    /// Retention until nothing is left to remove, one batch per transaction
    /// (`holdfast expire --retention`); returns how many were removed.
    pub async fn purge_all(&self) -> Result<u64, Error> {
        self.purge_passes(None).await
    }

    /// Batches of retention until one finds less than a batch, at most
    /// `passes` of them (`None`: no bound).
    async fn purge_passes(&self, passes: Option<u32>) -> Result<u64, Error> {
        let Some(older_than) = self.retention else { return Ok(0) };
        let mut total = 0;
        let mut pass = 0;
        while passes.is_none_or(|most| pass < most) {
            pass += 1;
            let n = self.store.purge(older_than, self.batch).await?;
            counter!("holdfast_retention_purged_total").increment(n);
            total += n;
            if n < self.batch as u64 {
                break;
            }
        }
        Ok(total)
    }

    /// One unit of work: releases up to one batch of expired holds and
    /// returns how many. Tests call this to drain without sleeping.
    pub async fn sweep_once(&self) -> Result<u64, Error> {
        let n = self.store.expire(self.batch).await?;
        counter!("holdfast_sweeper_released_total").increment(n);
        Ok(n)
    }

    /// Reads the holds still `held` past their expiry from the database
    /// into `holdfast_expired_holds_unswept` and
    /// `holdfast_oldest_unswept_hold_seconds` (with a `pod` label when run
    /// in a pod). Right after a drain both are about zero; the same reading
    /// from every replica, so they hold across replicas. `None` (and no
    /// gauge) for a store without a reservations table.
    pub async fn measure(&self) -> Result<Option<Unswept>, Error> {
        let Some(u) = self.store.unswept().await? else { return Ok(None) };
        let labels: Vec<metrics::Label> =
            crate::tag::pod().map(|p| metrics::Label::new("pod", p.to_string())).into_iter().collect();
        gauge!("holdfast_expired_holds_unswept", labels.clone()).set(u.holds as f64);
        gauge!("holdfast_oldest_unswept_hold_seconds", labels).set(u.oldest.as_secs_f64());
        Ok(Some(u))
    }

    /// Sweeps until nothing expired is left (or an error).
    pub async fn drain(&self) -> Result<u64, Error> {
        let mut total = 0;
        loop {
            let n = self.sweep_once().await?;
            total += n;
            if n < self.batch as u64 {
                return Ok(total);
            }
        }
    }

    /// Drains every `interval` until `stop` turns true.
    pub async fn run(self, interval: Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            match self.drain().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(released = n, "sweeper released expired holds"),
                Err(e) => failed(&e, "sweep"),
            }
            if let Err(e) = self.measure().await {
                failed(&e, "backlog reading");
            }
            match self.purge().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "retention removed finished reservations"),
                Err(e) => failed(&e, "retention"),
            }
        }
    }
}

/// A failed pass (`sweep`, `backlog reading` or `retention`): counted and
/// logged; the next interval tries again.
fn failed(e: &Error, pass: &str) {
    counter!("holdfast_sweeper_errors_total").increment(1);
    tracing::warn!(error = %e, code = e.code(), "{pass} failed; next interval retries");
}

/// A SQL store's backlog ([`Store::unswept`]): one read of the index the
/// sweep itself takes its holds from (`reservations_due`).
pub(crate) async fn unswept<D: Dialect>(store: &SqlStore<D>) -> Result<Unswept, Error> {
    let rows = plain!(store, "expire", |c| run::all::<D, _>(c, Stmt::Unswept, &[], |r| {
        Ok((D::Db::int(r, "holds")?, D::Db::maybe_time(r, "oldest")?))
    }))?;
    let now = Utc::now();
    Ok(rows
        .first()
        .map(|&(holds, oldest): &(i64, Option<DateTime<Utc>>)| Unswept {
            holds: holds.max(0) as u64,
            oldest: oldest.and_then(|t| (now - t).to_std().ok()).unwrap_or_default(),
        })
        .unwrap_or_default())
}
