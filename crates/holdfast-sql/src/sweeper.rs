//! The expiry sweeper (inside `serve`, and beside `bench flash-sale
//! --retention`): every interval it releases holds past
//! their expiry until none is left, then removes finished reservations older
//! than the retention period. The store takes both with `FOR UPDATE SKIP
//! LOCKED`, so any number of `serve` processes sweep one database at once
//! without doing the same work twice.

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{Error, Store};
use metrics::counter;
use tokio::sync::watch;

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
        let Some(older_than) = self.retention else { return Ok(0) };
        let mut total = 0;
        for _ in 0..PURGES_PER_INTERVAL {
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
            match self.purge().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "retention removed finished reservations"),
                Err(e) => failed(&e, "retention"),
            }
        }
    }
}

/// A failed pass (`sweep` or `retention`): counted and logged; the next
/// interval tries again.
fn failed(e: &Error, pass: &str) {
    counter!("holdfast_sweeper_errors_total").increment(1);
    tracing::warn!(error = %e, code = e.code(), "{pass} failed; next interval retries");
}
