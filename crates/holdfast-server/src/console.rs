//! The operators' console: `/admin/ui` serves a page built into the binary
//! (HTML, CSS and script, no CDN, nothing fetched from elsewhere), which
//! asks `GET /admin/overview` for everything it shows with the admin token
//! the operator typed. The page itself holds no data and needs no token;
//! the token stays in the tab's `sessionStorage` and goes only into the
//! `Authorization` header of those requests.
//!
//! What this process adds of its own is [`Activity`]: counts of the
//! reservation answers it gave, sampled every [`SAMPLE_EVERY`] with the
//! connection report, over the last [`KEEP`] — the rates and the
//! connection-hold chart. The hot items come from the database, so they
//! show every replica's work.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use holdfast_core::{ConnHold, ShopId};
use holdfast_sql::HotItem;
use serde::Serialize;
use tokio::sync::watch;
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::state::AppState;

/// How often the process samples its counts and its connection report.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How much history it keeps (and the rate chart spans).
pub const KEEP: Duration = Duration::from_secs(600);
/// "Sold recently": the window of the hot items' sales.
pub const SOLD_WINDOW: Duration = Duration::from_secs(60);
/// Hot items shown.
pub const HOT_ITEMS: u32 = 20;
/// How long one read of the hot items serves every console: the read scans
/// the last [`SOLD_WINDOW`]'s finished reservations, so during a big sale it
/// is the console's one real cost to the database.
pub const HOT_ITEMS_FRESH: Duration = Duration::from_secs(2);
/// Conn tags kept per sample (the longest holds); the rest are summed as
/// `other`.
const TAGS_PER_SAMPLE: usize = 8;

/// Reservation answers this process gave, and its samples of them.
#[derive(Debug, Default)]
pub struct Activity {
    held: AtomicU64,
    claimed: AtomicU64,
    released: AtomicU64,
    refused: AtomicU64,
    samples: Mutex<VecDeque<Sample>>,
    /// The last hot items read and when: every console open on this
    /// process shares one read per [`HOT_ITEMS_FRESH`].
    hot: tokio::sync::Mutex<Option<(Instant, HotRead)>>,
}

#[derive(Debug, Clone)]
struct Sample {
    at: DateTime<Utc>,
    held: u64,
    claimed: u64,
    released: u64,
    refused: u64,
    /// Tag → seconds connections were held, since the process started.
    hold_seconds: BTreeMap<String, f64>,
}

impl Activity {
    /// Counts one answered request by its route template, method and
    /// status (called by the metrics middleware, which knows all three).
    pub fn count(&self, method: &Method, route: &str, status: StatusCode) {
        if *method != Method::POST || !route.starts_with("/v1/shops/") {
            return;
        }
        let counter = match (route.rsplit('/').next(), status.as_u16()) {
            (Some("reservations"), 201) => &self.held,
            (Some("reservations"), 409) => &self.refused,
            (Some("claim"), 200) => &self.claimed,
            (Some("release"), 200) => &self.released,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a sample now, dropping those older than [`KEEP`].
    pub fn sample(&self) {
        let mut hold_seconds = BTreeMap::new();
        for row in holdfast_sql::connection_report() {
            *hold_seconds.entry(row.tag).or_insert(0.0) += row.hold_seconds_total;
        }
        let s = Sample {
            at: Utc::now(),
            held: self.held.load(Ordering::Relaxed),
            claimed: self.claimed.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            hold_seconds,
        };
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let keep_from = s.at - chrono::Duration::from_std(KEEP).unwrap_or_default();
        while samples.front().is_some_and(|old| old.at < keep_from) {
            samples.pop_front();
        }
        samples.push_back(s);
    }

    /// Samples every [`SAMPLE_EVERY`] until `stop` turns true.
    pub async fn run(self: std::sync::Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(),
                _ = stop.changed() => return,
            }
        }
    }

    /// The hot items, read again only when the last read (or its failure)
    /// is older than [`HOT_ITEMS_FRESH`]; callers at the same moment wait
    /// for one read, so an open console costs the database one read per
    /// interval whatever happens.
    async fn hot_items(&self, db: &holdfast_sql::Database) -> HotRead {
        let mut hot = self.hot.lock().await;
        if let Some((at, read)) = hot.as_ref()
            && at.elapsed() < HOT_ITEMS_FRESH
        {
            return read.clone();
        }
        let read = db.housekeeping.hot_items(SOLD_WINDOW, HOT_ITEMS).await.map_err(|e| {
            tracing::warn!(error = %e, "console: could not read the hot items");
            e.code()
        });
        *hot = Some((Instant::now(), read.clone()));
        read
    }

    /// Per-second rates and connections held, between consecutive samples.
    fn history(&self) -> (Vec<RatePoint>, Vec<HoldPoint>) {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut rates = Vec::with_capacity(samples.len());
        let mut holds = Vec::with_capacity(samples.len());
        for (a, b) in samples.iter().zip(samples.iter().skip(1)) {
            let secs = (b.at - a.at).num_milliseconds() as f64 / 1000.0;
            if secs <= 0.0 {
                continue;
            }
            let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
            rates.push(RatePoint {
                at: b.at,
                holds: per_s(a.held, b.held),
                sales: per_s(a.claimed, b.claimed),
                releases: per_s(a.released, b.released),
                refused: per_s(a.refused, b.refused),
            });
            let mut tags: Vec<(String, f64)> = b
                .hold_seconds
                .iter()
                .map(|(tag, total)| (tag.clone(), (total - a.hold_seconds.get(tag).copied().unwrap_or(0.0)) / secs))
                .filter(|(_, held)| *held > 0.0)
                .collect();
            tags.sort_by(|x, y| y.1.total_cmp(&x.1));
            let other: f64 = tags.iter().skip(TAGS_PER_SAMPLE).map(|(_, held)| held).sum();
            tags.truncate(TAGS_PER_SAMPLE);
            let mut tags: BTreeMap<String, f64> = tags.into_iter().collect();
            if other > 0.0 {
                tags.insert("other".into(), other);
            }
            holds.push(HoldPoint { at: b.at, connections: tags });
        }
        (rates, holds)
    }
}

/// Requests per second this process answered, over one sample interval.
#[derive(Debug, Serialize, ToSchema)]
pub struct RatePoint {
    /// The end of the interval.
    pub at: DateTime<Utc>,
    /// Reservations created (`201`).
    pub holds: f64,
    /// Claims answered `200`.
    pub sales: f64,
    /// Releases answered `200`.
    pub releases: f64,
    /// Reserves turned away (`409`: insufficient stock or a key reused).
    pub refused: f64,
}

/// Connections held per conn tag over one sample interval: seconds held
/// per second, i.e. the mean number of connections that tag kept busy.
#[derive(Debug, Serialize, ToSchema)]
pub struct HoldPoint {
    pub at: DateTime<Utc>,
    /// Tag → mean connections held (the busiest tags; the rest as `other`).
    pub connections: BTreeMap<String, f64>,
}

/// One read of the hot items: the items, or the code of the error that
/// stopped it (the detail goes to the log, as for every error).
type HotRead = Result<Vec<HotItem>, &'static str>;

/// A shop the console lists in its modes view.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShopMode {
    pub shop: String,
    /// The pod it lives on, when serving pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The mode it is served in now (kill switch applied).
    pub mode: String,
}

/// The Redis migration as the console shows it (serving with `--redis-url`).
#[derive(Debug, Serialize, ToSchema)]
pub struct MigrationPanel {
    pub kill_switch: bool,
    /// The mode rules in force (shop pins, rollout percentages, per pod).
    pub rules: holdfast_core::Rules,
    /// Shops pinned by the rules and the shops of the hot items.
    pub shops: Vec<ShopMode>,
    /// The shadow comparison's counters in this process.
    pub shadow: holdfast_redis::ShadowCounts,
}

/// Webhook deliveries waiting in the database (every pod).
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveriesPanel {
    pub pending: u64,
    pub dead: u64,
    pub oldest_pending_seconds: Option<f64>,
}

/// One pod (or the one database) and whether it answered.
#[derive(Debug, Serialize, ToSchema)]
pub struct PodPanel {
    pub name: String,
    pub backend: String,
    pub ready: bool,
}

/// `GET /admin/overview`: what the console shows, in one answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct OverviewBody {
    pub at: DateTime<Utc>,
    pub backend: String,
    pub pods: Vec<PodPanel>,
    /// The busiest items (from the database: every replica's work).
    pub items: Vec<HotItem>,
    /// The error code (`unavailable`, `timeout`, …) when the database did
    /// not answer; `items` is then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_error: Option<String>,
    /// The window of each item's `sold_recently`, in seconds.
    pub sold_window_seconds: u64,
    /// This process's answers per second, oldest first.
    pub rates: Vec<RatePoint>,
    /// This process's connection use per conn tag since it started.
    pub connections: Vec<ConnHold>,
    /// Mean connections held per tag, oldest first.
    pub connection_history: Vec<HoldPoint>,
    /// `null` when serving without `--redis-url`.
    pub migration: Option<MigrationPanel>,
    /// `null` when the database did not answer.
    pub deliveries: Option<DeliveriesPanel>,
}

/// Everything the console shows: hot items, rates, connection hold per tag,
/// migration modes and the kill switch, webhook deliveries.
#[utoipa::path(
    get, path = "/admin/overview", tag = "admin", operation_id = "overview",
    responses((status = 200, description = "what the console shows", body = OverviewBody))
)]
pub async fn overview(State(state): State<AppState>, _admin: Admin) -> Json<OverviewBody> {
    let db = &state.db;
    // The three reads of the database at once; each is bounded (the pods'
    // check by 2 s, the others by the pool's acquire timeout).
    let (hot, queue, checked) = tokio::join!(
        state.activity.hot_items(db),
        db.webhooks.queue_stats(),
        crate::routes::health::check_pods(&state)
    );
    let (items, items_error) = match hot {
        Ok(items) => (items, None),
        Err(code) => (Vec::new(), Some(code.to_string())),
    };
    let deliveries = queue.ok().map(|q| DeliveriesPanel {
        pending: q.pending,
        dead: q.dead,
        oldest_pending_seconds: q.oldest_pending.map(|d| d.as_secs_f64()),
    });
    let pods = checked
        .unwrap_or_default()
        .into_iter()
        .map(|(name, error)| {
            let backend = match db.pods().into_iter().find(|p| p.name == name) {
                Some(p) => p.db.store.backend().name().to_string(),
                None => String::new(),
            };
            PodPanel { name, backend, ready: error.is_none() }
        })
        .collect();
    let migration = state.migration.as_ref().map(|m| {
        let mut shops: Vec<ShopId> = items.iter().filter_map(|i| ShopId::new(i.shop.clone()).ok()).collect();
        shops.extend(m.control.rules().shops.keys().cloned());
        shops.sort();
        shops.dedup();
        let view = m.admin_view(&shops);
        let shops = view
            .modes
            .resolved
            .iter()
            .map(|(shop, mode)| ShopMode {
                shop: shop.to_string(),
                pod: db.pod_of(shop).map(|p| p.name),
                mode: mode.as_str().into(),
            })
            .collect();
        MigrationPanel {
            kill_switch: view.modes.rules.kill_switch,
            rules: view.modes.rules,
            shops,
            shadow: view.shadow,
        }
    });
    let (rates, connection_history) = state.activity.history();
    Json(OverviewBody {
        at: Utc::now(),
        backend: state.store.backend().name().into(),
        pods,
        items,
        items_error,
        sold_window_seconds: SOLD_WINDOW.as_secs(),
        rates,
        connections: holdfast_sql::connection_report(),
        connection_history,
        migration,
        deliveries,
    })
}

const INDEX: &str = include_str!("../assets/console/index.html");
const SCRIPT: &str = include_str!("../assets/console/console.js");
const STYLE: &str = include_str!("../assets/console/console.css");

/// The page's own rules for the browser: only its own script, style and
/// requests; never framed; no referrer (the page's URL carries nothing, but
/// nothing else needs it either).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut res = (StatusCode::OK, body).into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

pub async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_answers_by_route() {
        let a = Activity::default();
        let create = "/v1/shops/{shop}/reservations";
        a.count(&Method::POST, create, StatusCode::CREATED);
        a.count(&Method::POST, create, StatusCode::OK); // a replay: no new hold
        a.count(&Method::POST, create, StatusCode::CONFLICT);
        a.count(&Method::POST, "/v1/shops/{shop}/reservations/{id}/claim", StatusCode::OK);
        a.count(&Method::POST, "/v1/shops/{shop}/reservations/{id}/claim", StatusCode::CONFLICT);
        a.count(&Method::POST, "/v1/shops/{shop}/reservations/{id}/release", StatusCode::OK);
        a.count(&Method::GET, "/v1/shops/{shop}/reservations/{id}", StatusCode::OK);
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!((n(&a.held), n(&a.refused), n(&a.claimed), n(&a.released)), (1, 1, 1, 1));
    }

    #[test]
    fn history_is_rates_between_samples() {
        let a = Activity::default();
        let t0 = Utc::now();
        let mk = |secs: i64, held: u64, hold: f64| Sample {
            at: t0 + chrono::Duration::seconds(secs),
            held,
            claimed: 0,
            released: 0,
            refused: 0,
            hold_seconds: BTreeMap::from([("reserve".to_string(), hold)]),
        };
        a.samples.lock().unwrap().extend([mk(0, 10, 1.0), mk(5, 60, 11.0), mk(10, 60, 11.0)]);
        let (rates, holds) = a.history();
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0].holds, 10.0);
        assert_eq!(rates[1].holds, 0.0);
        assert_eq!(holds[0].connections.get("reserve"), Some(&2.0));
        assert!(holds[1].connections.is_empty(), "a tag that held nothing in the interval is left out");
    }
}
