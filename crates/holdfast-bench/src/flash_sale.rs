//! A flash sale: many buyers, one hot item, a fixed stock. Each buyer reserves
//! a cart, then pays (claim), gives up (release), or — with `settle: false` —
//! leaves the hold open. What the buyers were told is counted here,
//! independently of the target, and checked against the target's books at the
//! end: `oversold` and `undersold` must both be 0 for a run to count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use holdfast_core::Error;
use indicatif::{ProgressBar, ProgressStyle};
use rand::Rng;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::latency::{Latency, ms};
use crate::target::{Tables, Target};
use holdfast_core::ConnHold;

/// Rows a run's connection report keeps: the tags where connection time went.
pub const CONN_TAGS: usize = 8;

#[derive(Debug, Clone)]
pub struct FlashSale {
    pub stock: u32,
    /// Most buyers; the sale also ends at `duration` when one is given.
    pub buyers: u64,
    pub duration: Option<Duration>,
    /// Buyers in flight at once.
    pub concurrency: u32,
    /// Units in each buyer's cart.
    pub cart_size: u32,
    /// Share of holds that pay; the others release.
    pub claim_ratio: f64,
    /// `false`: holds are neither claimed nor released (a pure reserve load).
    pub settle: bool,
    /// Open loop: buyers arrive at this rate (per second) and latency counts
    /// from the intended arrival; `None`: closed loop.
    pub rate: Option<f64>,
    /// Prefix of the idempotency keys, unique per run.
    pub key_prefix: String,
    pub progress: bool,
    /// Report throughput, p99 and the tables' size per interval of this length.
    pub interval: Option<Duration>,
}

/// What happened, as counted from the buyers' answers and the final books.
#[derive(Debug, Clone, Serialize)]
pub struct FlashSaleReport {
    pub stock: u32,
    pub concurrency: u32,
    pub cart_size: u32,
    /// Buyers that came.
    pub buyers: u64,
    /// Units in claimed reservations, as the buyers were told.
    pub sold: u64,
    /// Buyers that got a hold.
    pub held: u64,
    /// Units of holds left open (`settle: false`).
    pub open: u64,
    /// Buyers told there was not enough stock.
    pub turned_away: u64,
    /// Holds released (payment failed).
    pub released: u64,
    /// Units buyers were told they got beyond the stock or beyond the books.
    pub oversold: u64,
    /// Units the books gave out that no buyer was told of, or left unsold
    /// although a buyer was turned away while they were free.
    pub undersold: u64,
    /// Requests that failed with anything but "not enough stock".
    pub errors: u64,
    /// Units still available on the books after the sale.
    pub left: i64,
    pub seconds: f64,
    /// Completed reserve calls per second (held or turned away).
    pub throughput: f64,
    /// Holds per second.
    pub holds_per_second: f64,
    /// Reserve latency, coordinated-omission corrected (closed loop) or from
    /// the intended arrival (open loop).
    #[serde(flatten)]
    pub latency: Latency,
    pub retries: u64,
    pub deadlocks: u64,
    /// Reserves per coalesced batch over the sale; `null` when no reserve
    /// went in a batch (coalescing off, or a target without it).
    pub mean_batch: Option<f64>,
    /// The target's own invariant check; `null` when the target could not
    /// run it (an HTTP target without an admin token). Oversold and
    /// undersold do not depend on it.
    pub audit_ok: Option<bool>,
    /// The reserve latency distribution (coordinated-omission corrected, like
    /// the p50…p99 above), from p0 to p99.99.
    pub latency_percentiles: Vec<Percentile>,
    /// Connection hold per conn tag during the sale, longest total first (at
    /// most [`CONN_TAGS`] tags); `null` when the target does not report it.
    pub connections: Option<Vec<ConnHold>>,
    /// holdfast's tables and the server's clean-up before the sale and after
    /// it; `null` where the target cannot tell.
    pub tables_start: Option<Tables>,
    pub tables_end: Option<Tables>,
    /// With `--interval`: each interval's figures, in order.
    pub intervals: Option<Vec<IntervalStat>>,
}

/// One interval of a sale (`--interval`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalStat {
    /// Seconds from the start of the sale to the end of the interval.
    pub t: f64,
    /// Reserve calls completed in the interval, per second.
    pub throughput: f64,
    /// Reserve latency of the calls completed in the interval (as measured,
    /// without the closed-loop correction of the whole run's figures).
    pub p99_ms: f64,
    /// holdfast's tables with their indexes at the end of the interval.
    pub tables_bytes: Option<u64>,
    /// MySQL/MariaDB: InnoDB's purge backlog at the end of the interval.
    pub history_list_length: Option<u64>,
}

/// One point of the latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentile {
    /// 0 to 99.99.
    pub percentile: f64,
    pub ms: f64,
}

/// The percentiles reported: 1, 2 and 5 steps per decade of 1 / (1 − q), the
/// spacing of a log-scale percentile plot.
pub const PERCENTILES: [f64; 13] = [0.0, 50.0, 80.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.8, 99.9, 99.95, 99.98, 99.99];

impl FlashSaleReport {
    /// Every unit sold exactly once, no request failed, and the books balance
    /// (where the target could check them).
    pub fn ok(&self) -> bool {
        self.oversold == 0 && self.undersold == 0 && self.errors == 0 && self.audit_ok != Some(false)
    }
}

#[derive(Default)]
struct Tally {
    sold: AtomicU64,
    held: AtomicU64,
    open: AtomicU64,
    turned_away: AtomicU64,
    released: AtomicU64,
    errors: AtomicU64,
}

/// When the last release finished, and when refusals started (with the units
/// they asked for): a refusal that began after every returned unit was back
/// is an undersell if at least that many units are left at the end.
#[derive(Default)]
struct Timeline {
    last_release_done: Option<Instant>,
    refusals: Vec<(Instant, u32)>,
}

const MAX_LATENCY_US: u64 = 600_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("histogram bounds")
}

pub async fn run(target: Arc<dyn Target>, sale: &FlashSale) -> Result<FlashSaleReport, Error> {
    target.setup(sale.stock).await?;
    let stats_before = target.stats().await;
    let conns_before = target.connections().await?;
    let next = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::default());
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let bar = progress_bar(sale);
    let tables_start = target.tables().await;
    let started = Instant::now();
    let deadline = sale.duration.map(|d| started + d);
    let slices = Arc::new(std::sync::Mutex::new(Vec::<Histogram<u64>>::new()));
    // The tables at the end of each interval, sampled while the sale runs.
    let samples = Arc::new(std::sync::Mutex::new(Vec::<Option<Tables>>::new()));
    let sampler = sale.interval.map(|every| {
        let (target, samples) = (target.clone(), samples.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at((started + every).into(), every);
            loop {
                tick.tick().await;
                let now = target.tables().await;
                samples.lock().expect("table samples").push(now);
            }
        })
    });
    let mut workers = Vec::new();
    for _ in 0..sale.concurrency.max(1) {
        let (target, next, tally, timeline, bar, sale, slices) =
            (target.clone(), next.clone(), tally.clone(), timeline.clone(), bar.clone(), sale.clone(), slices.clone());
        workers.push(tokio::spawn(async move {
            let mut hist = histogram();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= sale.buyers {
                    return hist;
                }
                // Open loop: buyer n arrives at a fixed time whether or not
                // the previous ones were served; its latency counts from then.
                let t0 = match sale.rate {
                    Some(rate) => {
                        let due = started + Duration::from_secs_f64(n as f64 / rate);
                        tokio::time::sleep_until(due.into()).await;
                        due
                    }
                    None => Instant::now(),
                };
                if deadline.is_some_and(|d| t0 >= d) {
                    return hist;
                }
                let key = format!("{}-{n}", sale.key_prefix);
                let answer = target.reserve(&key, sale.cart_size).await;
                let took = t0.elapsed().as_micros() as u64;
                hist.saturating_record(took);
                if let Some(every) = sale.interval {
                    let slot = (started.elapsed().as_secs_f64() / every.as_secs_f64()) as usize;
                    let mut slices = slices.lock().expect("interval histograms");
                    while slices.len() <= slot {
                        slices.push(histogram());
                    }
                    slices[slot].saturating_record(took);
                }
                match answer {
                    Ok(Some(id)) => {
                        tally.held.fetch_add(1, Ordering::Relaxed);
                        if !sale.settle {
                            tally.open.fetch_add(sale.cart_size as u64, Ordering::Relaxed);
                        } else if rand::thread_rng().gen_bool(sale.claim_ratio.clamp(0.0, 1.0)) {
                            match target.claim(id).await {
                                Ok(units) => tally.sold.fetch_add(units, Ordering::Relaxed),
                                Err(_) => tally.errors.fetch_add(1, Ordering::Relaxed),
                            };
                        } else {
                            match target.release(id).await {
                                Ok(()) => {
                                    tally.released.fetch_add(1, Ordering::Relaxed);
                                    let now = Instant::now();
                                    let mut t = timeline.lock().await;
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
                    Ok(None) => {
                        tally.turned_away.fetch_add(1, Ordering::Relaxed);
                        timeline.lock().await.refusals.push((t0, sale.cart_size));
                    }
                    Err(_) => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if deadline.is_none() {
                    bar.inc(1);
                } else {
                    bar.set_position(started.elapsed().as_millis() as u64);
                }
            }
        }));
    }
    let mut hist = histogram();
    for w in workers {
        let h = w.await.map_err(|e| Error::Internal(format!("buyer task failed: {e}")))?;
        hist.add(h).expect("same bounds");
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(task) = sampler {
        task.abort();
    }
    bar.finish_and_clear();
    let intervals = sale.interval.map(|every| {
        let mut slices = slices.lock().expect("interval histograms").clone();
        let samples = samples.lock().expect("table samples");
        let every = every.as_secs_f64();
        // The calls that finished in the last moments after the final
        // boundary (a short tail) count with the interval before them.
        if slices.len() >= 2 && seconds - (slices.len() - 1) as f64 * every < every / 2.0 {
            let tail = slices.pop().expect("two or more");
            slices.last_mut().expect("one or more").add(tail).expect("same bounds");
        }
        let last = slices.len().saturating_sub(1);
        slices
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let end = if i == last { seconds } else { (i + 1) as f64 * every };
                let length = (end - i as f64 * every).max(1e-3);
                let sample = samples.get(i).cloned().flatten();
                IntervalStat {
                    t: end,
                    throughput: h.len() as f64 / length,
                    p99_ms: ms(h.value_at_quantile(0.99)),
                    tables_bytes: sample.as_ref().map(|t| t.total_bytes),
                    history_list_length: sample.and_then(|t| t.server.history_list_length),
                }
            })
            .collect()
    });
    // Before the books are read: their levels and audit are not the sale's.
    let conns_after = target.connections().await?;
    if sale.rate.is_none() && !hist.is_empty() {
        // Closed loop: a stalled request also delays the requests its buyer
        // would have sent meanwhile. Fill those in, taking the median as the
        // expected interval between one buyer's requests.
        let expected = hist.value_at_quantile(0.5).max(1);
        hist = hist.clone_correct(expected);
    }

    let books = target.books().await?;
    let stats = target.stats().await;
    let sold = tally.sold.load(Ordering::Relaxed);
    let open = tally.open.load(Ordering::Relaxed);
    let told_out = sold + open;
    let books_out = (books.committed.max(0) + books.reserved.max(0)) as u64;
    let oversold = told_out.saturating_sub(sale.stock as u64) + told_out.saturating_sub(books_out);
    let t = timeline.lock().await;
    let left = books.available;
    let refused_while_free =
        t.refusals.iter().any(|(at, want)| t.last_release_done.is_none_or(|l| *at > l) && left >= *want as i64);
    let undersold = books_out.saturating_sub(told_out) + if refused_while_free { left.max(0) as u64 } else { 0 };
    let held = tally.held.load(Ordering::Relaxed);
    let turned_away = tally.turned_away.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    Ok(FlashSaleReport {
        stock: sale.stock,
        concurrency: sale.concurrency,
        cart_size: sale.cart_size,
        buyers: held + turned_away + errors,
        sold,
        held,
        open,
        turned_away,
        released: tally.released.load(Ordering::Relaxed),
        oversold,
        undersold,
        errors,
        left,
        seconds,
        throughput: (held + turned_away) as f64 / seconds,
        holds_per_second: held as f64 / seconds,
        latency: Latency::from_micros(&hist),
        retries: stats.retries.saturating_sub(stats_before.retries),
        deadlocks: stats.deadlocks.saturating_sub(stats_before.deadlocks),
        mean_batch: {
            let batches = stats.reserve_batches.saturating_sub(stats_before.reserve_batches);
            let batched = stats.reserves_batched.saturating_sub(stats_before.reserves_batched);
            (batches > 0).then(|| batched as f64 / batches as f64)
        },
        audit_ok: books.audit_ok,
        latency_percentiles: PERCENTILES
            .iter()
            .map(|&p| Percentile { percentile: p, ms: ms(hist.value_at_quantile(p / 100.0)) })
            .collect(),
        connections: match (conns_before, conns_after) {
            (Some(b), Some(a)) => Some(ConnHold::window(&b, &a, CONN_TAGS)),
            _ => None,
        },
        tables_start,
        tables_end: target.tables().await,
        intervals,
    })
}

fn progress_bar(sale: &FlashSale) -> ProgressBar {
    if !sale.progress {
        return ProgressBar::hidden();
    }
    let (len, template) = match sale.duration {
        Some(d) => (d.as_millis() as u64, "{spinner} {bar:40} {elapsed}/{duration} flash sale"),
        None => (sale.buyers, "{spinner} {bar:40} {pos}/{len} buyers {per_sec} eta {eta}"),
    };
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
    bar
}
