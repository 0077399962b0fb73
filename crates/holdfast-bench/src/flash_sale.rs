//! A flash sale: many buyers, one hot item, a fixed stock. Each buyer reserves
//! a cart, then pays (claim) or gives up (release). What the buyers were told
//! is counted here, independently of the store, and checked against the final
//! ledger: `oversold` and `undersold` must both be 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use holdfast_core::{
    Error, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReserveRequest, ShopId, StockChange, Store, Ttl,
};
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use serde::Serialize;
use tokio::sync::Mutex;

#[derive(Debug, Clone)]
pub struct FlashSale {
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    pub stock: u32,
    pub buyers: u32,
    pub concurrency: u32,
    /// Units in each buyer's cart.
    pub cart_size: u32,
    /// Share of holds that pay; the others release.
    pub claim_ratio: f64,
    pub progress: bool,
}

/// What happened, as counted from the buyers' answers and the final ledger.
#[derive(Debug, Clone, Serialize)]
pub struct FlashSaleReport {
    pub stock: u32,
    pub buyers: u32,
    pub concurrency: u32,
    pub cart_size: u32,
    /// Units in claimed reservations, as the buyers were told.
    pub sold: u64,
    /// Buyers that got a hold.
    pub held: u64,
    /// Buyers told `insufficient_stock`.
    pub turned_away: u64,
    /// Holds released (payment failed).
    pub released: u64,
    /// Units sold beyond the stock, or claimed but missing from the ledger.
    pub oversold: u64,
    /// Units left unsold although a buyer was turned away while they were
    /// free, or committed on the ledger without a buyer.
    pub undersold: u64,
    /// Requests that failed with anything but `insufficient_stock`.
    pub errors: u64,
    /// Units still available on the ledger after the sale.
    pub left: i64,
    pub seconds: f64,
    /// Reserve calls answered per second (held or turned away).
    pub throughput: f64,
    /// Holds per second.
    pub holds_per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub retries: u64,
    pub deadlocks: u64,
    pub audit_ok: bool,
}

impl FlashSaleReport {
    /// Every unit sold exactly once and the invariant holds.
    pub fn ok(&self) -> bool {
        self.oversold == 0 && self.undersold == 0 && self.errors == 0 && self.audit_ok
    }
}

#[derive(Default)]
struct Tally {
    sold: AtomicU64,
    held: AtomicU64,
    turned_away: AtomicU64,
    released: AtomicU64,
    errors: AtomicU64,
}

/// When the last release finished, and the refusals that started after it
/// (with how many units they asked for): a refusal that began once every
/// returned unit was back is an undersell if units are left at the end.
#[derive(Default)]
struct Timeline {
    last_release_done: Option<Instant>,
    refusals: Vec<(Instant, u32)>,
}

pub async fn run(store: Arc<dyn Store>, sale: &FlashSale) -> Result<FlashSaleReport, Error> {
    store.change_stock(&sale.shop, &sale.item, &sale.location, StockChange::Set(sale.stock as i64)).await?;
    let stats_before = store.stats();
    let quantity = Quantity::new(sale.cart_size as i64)?;
    let next = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::default());
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let bar = if sale.progress {
        let bar = ProgressBar::new(sale.buyers as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} buyers {per_sec} eta {eta}")
                .expect("valid template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..sale.concurrency.max(1) {
        let (store, next, tally, timeline, bar, sale) =
            (store.clone(), next.clone(), tally.clone(), timeline.clone(), bar.clone(), sale.clone());
        workers.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= sale.buyers as u64 {
                    return hist;
                }
                let key = IdempotencyKey::new(format!("flash-{n}")).expect("valid key");
                let line = Line { item: sale.item.clone(), quantity, locations: Some(vec![sale.location.clone()]) };
                let req = ReserveRequest::new(sale.shop.clone(), key, vec![line], Ttl::DEFAULT, false, false)
                    .expect("valid request");
                let t0 = Instant::now();
                let answer = store.reserve(&req).await;
                hist.saturating_record(t0.elapsed().as_micros() as u64);
                match answer {
                    Ok(r) => {
                        tally.held.fetch_add(1, Ordering::Relaxed);
                        let pays = rand::thread_rng().gen_bool(sale.claim_ratio.clamp(0.0, 1.0));
                        if pays {
                            match store.claim(&sale.shop, r.reservation.id).await {
                                Ok(c) => {
                                    tally.sold.fetch_add(c.units(), Ordering::Relaxed);
                                }
                                Err(_) => {
                                    tally.errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        } else {
                            match store.release(&sale.shop, r.reservation.id).await {
                                Ok(_) => {
                                    tally.released.fetch_add(1, Ordering::Relaxed);
                                    let mut t = timeline.lock().await;
                                    let now = Instant::now();
                                    if t.last_release_done.is_none_or(|l| l < now) {
                                        t.last_release_done = Some(now);
                                    }
                                }
                                Err(_) => {
                                    tally.errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    Err(Error::InsufficientStock(_)) => {
                        tally.turned_away.fetch_add(1, Ordering::Relaxed);
                        timeline.lock().await.refusals.push((t0, sale.cart_size));
                    }
                    Err(_) => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                bar.inc(1);
            }
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds");
    for w in workers {
        let h = w.await.map_err(|e| Error::Internal(format!("buyer task failed: {e}")))?;
        hist.add(h).expect("same bounds");
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let levels = store.levels(&sale.shop, &sale.item).await?;
    let q = levels
        .locations
        .iter()
        .find(|l| l.location == sale.location)
        .map(|l| l.quantities)
        .ok_or_else(|| Error::Internal("the sale's location vanished".into()))?;
    let audit = store.audit(Some(&sale.shop)).await?;
    let stats = store.stats();

    let sold = tally.sold.load(Ordering::Relaxed);
    let committed = q.committed.max(0) as u64;
    // Told more than exists, or told sold but missing on the ledger.
    let oversold = sold.saturating_sub(sale.stock as u64) + sold.saturating_sub(committed);
    // Committed on the ledger with no buyer told, or left while a buyer was
    // refused after the last unit came back.
    let t = timeline.lock().await;
    let left = q.available;
    let refused_while_free =
        t.refusals.iter().any(|(at, want)| t.last_release_done.is_none_or(|l| *at > l) && left >= *want as i64);
    let undersold = committed.saturating_sub(sold) + if refused_while_free { left.max(0) as u64 } else { 0 };
    let held = tally.held.load(Ordering::Relaxed);
    let turned_away = tally.turned_away.load(Ordering::Relaxed);
    let ms = |v: u64| v as f64 / 1000.0;
    Ok(FlashSaleReport {
        stock: sale.stock,
        buyers: sale.buyers,
        concurrency: sale.concurrency,
        cart_size: sale.cart_size,
        sold,
        held,
        turned_away,
        released: tally.released.load(Ordering::Relaxed),
        oversold,
        undersold,
        errors: tally.errors.load(Ordering::Relaxed),
        left,
        seconds,
        throughput: (held + turned_away) as f64 / seconds,
        holds_per_second: held as f64 / seconds,
        p50_ms: ms(hist.value_at_quantile(0.50)),
        p95_ms: ms(hist.value_at_quantile(0.95)),
        p99_ms: ms(hist.value_at_quantile(0.99)),
        max_ms: ms(hist.max()),
        retries: stats.retries - stats_before.retries,
        deadlocks: stats.deadlocks - stats_before.deadlocks,
        audit_ok: audit.ok(),
    })
}
