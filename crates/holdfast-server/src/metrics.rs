//! Prometheus metrics. The recorder is process-wide (the `metrics` macros
//! write to one global recorder), installed once; `/metrics` renders it after
//! copying in the gauges read at scrape time (store counters, pool).
//!
//! Names (deploy/grafana/holdfast.json charts them and
//! deploy/prometheus/holdfast-rules.yml alerts on them; a test checks that
//! every name those files use is one listed here and exported):
//! - `holdfast_http_requests_total{method, route, status}`
//! - `holdfast_http_request_duration_seconds{method, route}` (histogram)
//! - `holdfast_reservations_total{outcome}`: held, replayed, insufficient,
//!   conflict, error
//! - `holdfast_sweeper_released_total`, `holdfast_sweeper_errors_total`
//!   (failed sweeps, backlog readings and retention passes)
//! - `holdfast_expired_holds_unswept{pod}`, `holdfast_oldest_unswept_hold_seconds{pod}`:
//!   gauges the sweeper reads from the database after each sweep: holds
//!   still `held` past their expiry (counted up to 10,000) and how long ago
//!   the oldest expired. The same reading from every replica (take `max`);
//!   `pod` only when serving pods
//! - `holdfast_retention_purged_total`
//! - `holdfast_store_retries_total`, `holdfast_store_deadlocks_total`,
//!   `holdfast_store_replenishments_total`, `holdfast_store_expired_total`
//! - `holdfast_store_reserve_batches_total`, `holdfast_store_reserves_batched_total`:
//!   coalesced reserve batches, and the reserves in them (their ratio is the
//!   mean batch size)
//! - `holdfast_coalesce_batch_size{op}` (histogram), `holdfast_coalesce_batches_total{op}`,
//!   `holdfast_coalesce_batch_failures_total{op}`: batches of `reserve`,
//!   `settle` (claims, releases, extends) and `expire`
//! - `holdfast_db_pool_connections{state="idle"|"in_use", pod}`, `holdfast_db_pool_max{pod}`
//! - `holdfast_db_unavailable_total`: requests answered 503 because no
//!   connection came within the acquire timeout (the pool's waits that failed)
//! - `holdfast_db_connection_hold_seconds{tag, pod}` (histogram),
//!   `holdfast_db_statements_total{tag, pod}`, `holdfast_db_transactions_total{tag, pod}`:
//!   per connection tag (holdfast_sql::tag)
//! - webhooks: `holdfast_webhook_events_total`, `holdfast_webhook_deliveries_total{outcome}`,
//!   `holdfast_webhook_leases_reclaimed_total`, and the gauges
//!   `holdfast_webhook_queue_depth{pod}`, `holdfast_webhook_dead{pod}`,
//!   `holdfast_webhook_oldest_pending_seconds{pod}`
//! - the Redis migration (`--redis-url`): `holdfast_shadow_mismatches_total{op}`,
//!   `holdfast_shadow_skipped_total`, `holdfast_mirror_errors_total{op}`,
//!   `holdfast_redis_drift_total`, `holdfast_redis_errors_total{op}`,
//!   `holdfast_mode_poll_errors_total`

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::console::Activity;
use crate::state::AppState;

/// Latency buckets (seconds): sub-millisecond SQLite answers up to the
/// request timeout.
const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The process's recorder, installed on first use.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("buckets are non-empty")
                .install_recorder()
                .expect("no other metrics recorder is installed")
        })
        .clone()
}

/// Middleware: counts and times every request by its route template (not the
/// raw path, which would make a series per reservation id).
/// Also counts the reservation answers the console charts.
pub async fn track(State(activity): State<Arc<Activity>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let route = route.unwrap_or_else(|| "unmatched".into());
    let method = req.method().clone();
    let started = Instant::now();
    let res = next.run(req).await;
    activity.count(&method, &route, res.status());
    let status = res.status().as_u16().to_string();
    histogram!("holdfast_http_request_duration_seconds", "method" => method.as_str().to_owned(), "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    counter!("holdfast_http_requests_total", "method" => method.as_str().to_owned(), "route" => route, "status" => status).increment(1);
    res
}

pub fn reservation_outcome(outcome: &'static str) {
    counter!("holdfast_reservations_total", "outcome" => outcome).increment(1);
}

/// Counters of failures the alerting rules watch, at zero until the first
/// one: a series that first appears at 1 shows no `increase()`, so without
/// this an alert would miss the first failure of a process. Registered at
/// each scrape (a lookup once they exist), for what this process runs.
fn failures_at_zero(state: &AppState) {
    counter!("holdfast_db_unavailable_total").increment(0);
    if state.settings.sweep_interval().is_some() {
        counter!("holdfast_sweeper_errors_total").increment(0);
    }
    if state.settings.webhook_workers > 0 {
        counter!("holdfast_webhook_deliveries_total", "outcome" => "dead").increment(0);
        counter!("holdfast_webhook_leases_reclaimed_total").increment(0);
    }
    if state.migration.is_some() {
        counter!("holdfast_mode_poll_errors_total").increment(0);
        for op in ["reserve", "claim", "release", "extend"] {
            counter!("holdfast_shadow_mismatches_total", "op" => op).increment(0);
            counter!("holdfast_mirror_errors_total", "op" => op).increment(0);
        }
        counter!("holdfast_mirror_errors_total", "op" => "change_stock").increment(0);
        counter!("holdfast_shadow_skipped_total").increment(0);
        counter!("holdfast_redis_drift_total").increment(0);
    }
}

/// The scrape: copies the store's counters and the pool's state in, renders.
pub async fn render(State(state): State<AppState>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    failures_at_zero(&state);
    let stats = state.store.stats();
    counter!("holdfast_store_retries_total").absolute(stats.retries);
    counter!("holdfast_store_deadlocks_total").absolute(stats.deadlocks);
    counter!("holdfast_store_replenishments_total").absolute(stats.replenishments);
    counter!("holdfast_store_expired_total").absolute(stats.expired);
    counter!("holdfast_store_reserves_batched_total").absolute(stats.reserves_batched);
    counter!("holdfast_store_reserve_batches_total").absolute(stats.reserve_batches);
    if state.db.has_pods() {
        for pod in state.db.pods() {
            let pool = pod.db.pool_status();
            let name = pod.name;
            gauge!("holdfast_db_pool_connections", "state" => "idle", "pod" => name.clone()).set(pool.idle as f64);
            gauge!("holdfast_db_pool_connections", "state" => "in_use", "pod" => name.clone())
                .set(pool.size.saturating_sub(pool.idle) as f64);
            gauge!("holdfast_db_pool_max", "pod" => name).set(pool.max as f64);
        }
    } else {
        let pool = state.db.pool_status();
        gauge!("holdfast_db_pool_connections", "state" => "idle").set(pool.idle as f64);
        gauge!("holdfast_db_pool_connections", "state" => "in_use").set(pool.size.saturating_sub(pool.idle) as f64);
        gauge!("holdfast_db_pool_max").set(pool.max as f64);
    }
    state.metrics.run_upkeep();
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}
