//! `holdfast bench flash-sale`: one flash sale against one backend — holdfast
//! on SQLite, PostgreSQL or MySQL, the legacy Redis store, or a baseline —
//! optionally through the latency proxy, or against a running `holdfast
//! serve` over HTTP; reported with throughput, latency percentiles,
//! oversold and undersold units, retries and connection hold per tag.

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{Error, Invalid, ShopId, Ttl};
use holdfast_redis::{RedisOptions, RedisStore};
use holdfast_sql::{ConnectOptions, StoreConfig, redact};
use serde::Serialize;
use sqlx::Connection;

use crate::baseline::{Baseline, Kind};
use crate::flash_sale::{self, FlashSale, FlashSaleReport};
use crate::http::{HttpOptions, HttpTarget};
use crate::proxy::{LatencyProxy, upstream_of};
use crate::target::{StoreTarget, Target};

/// What a flash sale runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BenchBackend {
    /// holdfast on the embedded SQLite.
    Sqlite,
    /// holdfast on PostgreSQL.
    Postgres,
    /// holdfast on MySQL/MariaDB.
    Mysql,
    /// The single-row counter baseline (PostgreSQL or MySQL, by URL).
    Counter,
    /// One durable INSERT per request (PostgreSQL or MySQL, by URL).
    Ceiling,
    /// The legacy Redis counter store (holdfast-redis), its SQL ledger on
    /// the database URL (default: a throw-away SQLite file).
    Redis,
}

impl BenchBackend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Counter => "counter",
            Self::Ceiling => "ceiling",
            Self::Redis => "redis",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub backend: BenchBackend,
    /// Defaults: a `holdfast_bench` database on the local server (created
    /// when missing); for SQLite a throw-away file.
    pub database_url: Option<String>,
    pub sale: FlashSale,
    /// Added to every read in each direction between client and database.
    pub db_latency_ms: f64,
    /// holdfast's store: pool cap, request coalescing.
    pub store: StoreConfig,
    pub max_connections: u32,
    /// Redis of the `redis` backend (its keys get a prefix of the run's own).
    pub redis_url: String,
    /// Drive a running `holdfast serve` instead of a library target
    /// (`backend`, `database_url` and `db_latency_ms` do not apply).
    pub http: Option<HttpOptions>,
    /// holdfast's library targets: run the sweeper beside the sale, removing
    /// finished reservations older than this many seconds (0: keeping them),
    /// as `serve` does; `None`: no sweeper.
    pub retention: Option<u64>,
    /// holdfast's library targets: subscribe the run's shop to every event
    /// at a receiver in this process and deliver with this many workers
    /// beside the sale; `None`: no subscription.
    pub webhooks: Option<u32>,
    /// With `webhooks`: the topics subscribed to (`None`: every topic).
    pub webhook_topics: Option<holdfast_core::Topics>,
}

/// One run's figures, with what was run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// sqlite, postgres, mysql, redis, counter, ceiling, or http (`--target`).
    pub backend: String,
    /// Which database the baseline or holdfast ran on (a URL scheme); `redis`
    /// for the legacy store; the server's URL for `http`.
    pub database: String,
    /// The legacy store's SQL ledger (a URL scheme); `null` for the others.
    pub ledger: Option<String>,
    pub db_latency_ms: f64,
    /// holdfast coalesced concurrent requests (`--no-coalesce` turns it off;
    /// the baselines and the legacy store never do; over HTTP, when the
    /// server's batches held more than one reserve).
    pub coalesce: bool,
    /// The run's id: its shop (library targets), idempotency-key and Redis
    /// key prefix, and the baselines' rows.
    pub run: String,
    /// What the figures do and do not cover for this target.
    pub notes: Vec<String>,
    #[serde(flatten)]
    pub sale: FlashSaleReport,
    /// With `--webhooks`: what delivery did; `null` without.
    pub webhooks: Option<crate::webhooks::WebhookRun>,
}

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/holdfast_bench";
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/holdfast_bench";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Creates the database a server URL names, when it does not exist.
pub(crate) async fn ensure_database(url: &str) -> Result<(), Error> {
    let name = url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(());
    }
    let unavailable = |e: sqlx::Error| Error::Unavailable(format!("{}: {e}", redact(url)));
    if url.starts_with("postgres") {
        let admin = url.replacen(&format!("/{name}"), "/postgres", 1);
        let mut c = sqlx::PgConnection::connect(&admin).await.map_err(unavailable)?;
        // The simple protocol (`name` is checked above): no statement is
        // prepared, which a pooler in transaction mode could not carry.
        let found = format!("SELECT 1 FROM pg_database WHERE datname = '{name}'");
        // A plain text with no arguments goes over the simple protocol.
        let exists = !sqlx::Executor::fetch_all(&mut c, found.as_str()).await.map_err(unavailable)?.is_empty();
        if !exists {
            let create = format!("CREATE DATABASE {name}");
            sqlx::Executor::execute(&mut c, create.as_str()).await.map_err(unavailable)?;
        }
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        let admin = url.replacen("mariadb://", "mysql://", 1).replacen(&format!("/{name}"), "/mysql", 1);
        let mut c = sqlx::MySqlConnection::connect(&admin).await.map_err(unavailable)?;
        sqlx::query(&format!("CREATE DATABASE IF NOT EXISTS {name}")).execute(&mut c).await.map_err(unavailable)?;
    }
    Ok(())
}

/// Checks the options before anything connects: each problem is an
/// `invalid_request` naming the flag.
pub fn validate(opts: &BenchOptions) -> Result<(), Invalid> {
    let sale = &opts.sale;
    if !(0.0..=1.0).contains(&sale.claim_ratio) {
        return Err(Invalid::new("claim_ratio", "must be between 0 and 1"));
    }
    if !(0.0..=1000.0).contains(&opts.db_latency_ms) {
        return Err(Invalid::new("db_latency", "must be between 0 and 1000 ms"));
    }
    if sale.interval.is_some_and(|i| i < Duration::from_millis(100)) {
        return Err(Invalid::new("interval", "must be at least 0.1 seconds"));
    }
    if opts.retention.is_some()
        && (opts.http.is_some()
            || !matches!(opts.backend, BenchBackend::Sqlite | BenchBackend::Postgres | BenchBackend::Mysql))
    {
        return Err(Invalid::new(
            "retention",
            "runs holdfast's sweeper: for --backend sqlite, postgres or mysql (a serve applies its own --retention)",
        ));
    }
    if opts.webhooks.is_some()
        && (opts.http.is_some()
            || !matches!(opts.backend, BenchBackend::Sqlite | BenchBackend::Postgres | BenchBackend::Mysql))
    {
        return Err(Invalid::new("webhooks", "delivers holdfast's events: for --backend sqlite, postgres or mysql"));
    }
    if opts.webhooks.is_some_and(|n| n > 64) {
        return Err(Invalid::new("webhooks", "workers must be 0 to 64"));
    }
    if sale.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err(Invalid::new("rate", "must be a positive number of buyers per second"));
    }
    if sale.duration.is_some_and(|d| d.is_zero()) {
        return Err(Invalid::new("duration", "must be more than 0 seconds"));
    }
    if sale.stock == 0 || sale.concurrency == 0 || sale.cart_size == 0 || sale.buyers == 0 {
        return Err(Invalid::new("sale", "stock, buyers, concurrency and cart size must each be at least 1"));
    }
    if let Some(h) = &opts.http {
        crate::http::base_url(&h.url)?;
        if opts.db_latency_ms > 0.0 {
            return Err(Invalid::new(
                "db_latency",
                "--db-latency delays the bench's own database connections; with --target the server holds them \
                 (run the server's database behind a delay instead)",
            ));
        }
    } else if opts.backend == BenchBackend::Redis
        && !["redis://", "rediss://", "redis+unix://"].iter().any(|s| opts.redis_url.starts_with(s))
    {
        return Err(Invalid::new("redis_url", "expected redis://HOST:PORT, rediss://HOST:PORT or redis+unix://PATH"));
    }
    Ok(())
}

pub async fn run(opts: &BenchOptions) -> Result<BenchReport, Error> {
    validate(opts)?;
    let run_id = run_id();
    if let Some(h) = &opts.http {
        return run_http(opts, h, &run_id).await;
    }
    let tmp = std::env::temp_dir().join(format!("holdfast-bench-{run_id}"));
    let url = match (&opts.database_url, opts.backend) {
        (Some(u), _) => u.clone(),
        (None, BenchBackend::Sqlite | BenchBackend::Redis) => {
            std::fs::create_dir_all(&tmp).map_err(|e| Error::Unavailable(format!("{}: {e}", tmp.display())))?;
            format!("sqlite://{}", tmp.join("bench.db").display())
        }
        (None, BenchBackend::Mysql) => DEFAULT_MYSQL_URL.into(),
        (None, _) => DEFAULT_POSTGRES_URL.into(),
    };
    let result = run_on(opts, &url, &run_id).await;
    if opts.backend == BenchBackend::Redis {
        // The run's keys only (its own prefix); a failure here leaves them
        // behind but does not change what the sale measured.
        if let Err(e) = drop_redis_keys(&opts.redis_url, &redis_prefix(&run_id)).await
            && result.is_ok()
        {
            eprintln!("warning: could not delete the run's Redis keys ({}*): {e}", redis_prefix(&run_id));
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// The Redis key prefix of a run: its keys never meet another run's.
pub fn redis_prefix(run_id: &str) -> String {
    format!("hfbench:{run_id}:")
}

/// Deletes every key under `prefix` (SCAN, then UNLINK in batches).
async fn drop_redis_keys(url: &str, prefix: &str) -> Result<u64, Error> {
    let unavailable = |e: redis::RedisError| Error::Unavailable(format!("redis: {e}"));
    let client = holdfast_redis::client(url)?;
    let mut c = client.get_multiplexed_async_connection().await.map_err(unavailable)?;
    let mut cursor: u64 = 0;
    let mut n = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await
            .map_err(unavailable)?;
        if !keys.is_empty() {
            n += redis::cmd("UNLINK").arg(&keys).query_async::<u64>(&mut c).await.map_err(unavailable)?;
        }
        if next == 0 {
            return Ok(n);
        }
        cursor = next;
    }
}

/// Starts a latency proxy to `url`'s server and answers `url` through it.
fn through_proxy(url: &str, delay_ms: f64, proxies: &mut Vec<LatencyProxy>) -> Result<String, Error> {
    let upstream =
        upstream_of(url).ok_or_else(|| Invalid::new("db_latency", "the latency proxy needs a network URL"))?;
    let proxy = LatencyProxy::start(upstream, Duration::from_secs_f64(delay_ms / 1000.0))
        .map_err(|e| Error::Unavailable(format!("latency proxy: {e}")))?;
    let url = proxy.rewrite(url);
    proxies.push(proxy);
    Ok(url)
}

async fn run_on(opts: &BenchOptions, url: &str, run_id: &str) -> Result<BenchReport, Error> {
    let scheme_ok = match opts.backend {
        BenchBackend::Sqlite => url.starts_with("sqlite:"),
        BenchBackend::Postgres => url.starts_with("postgres"),
        BenchBackend::Mysql => url.starts_with("mysql") || url.starts_with("mariadb"),
        BenchBackend::Counter | BenchBackend::Ceiling => !url.starts_with("sqlite:"),
        BenchBackend::Redis => true,
    };
    if !scheme_ok {
        return Err(Invalid::new(
            "database_url",
            format!("backend {} cannot run on {}", opts.backend.name(), redact(url)),
        )
        .into());
    }
    ensure_database(url).await?;
    let scheme = url.split(':').next().unwrap_or_default().to_string();
    // The proxies must outlive the run: they carry every connection.
    let mut proxies = Vec::new();
    let mut url = url.to_string();
    let mut redis_url = opts.redis_url.clone();
    if opts.db_latency_ms > 0.0 {
        let local_ledger = opts.backend == BenchBackend::Redis && upstream_of(&url).is_none();
        if !local_ledger {
            url = through_proxy(&url, opts.db_latency_ms, &mut proxies)?;
        }
        if opts.backend == BenchBackend::Redis {
            redis_url = through_proxy(&redis_url, opts.db_latency_ms, &mut proxies)?;
        }
    }
    let mut notes = Vec::new();
    let mut sweeper = None;
    let mut delivery = None;
    let (target, database, ledger): (Arc<dyn Target>, String, Option<String>) = match opts.backend {
        BenchBackend::Counter | BenchBackend::Ceiling => {
            let kind = if opts.backend == BenchBackend::Counter { Kind::Counter } else { Kind::Ceiling };
            notes.push("connection hold per tag: not reported (the baselines send untagged SQL)".into());
            (Arc::new(Baseline::connect(kind, &url, opts.max_connections, run_id).await?), scheme, None)
        }
        BenchBackend::Redis => {
            // The ledger's tables (legacy_ledger) come with holdfast's migrations.
            let mut c = ConnectOptions::new(&url);
            c.max_connections = opts.max_connections;
            c.acquire_timeout = Duration::from_secs(60);
            let db = holdfast_sql::open(&c).await?;
            db.store.migrate().await?;
            let mut r = RedisOptions::new(redis_url);
            r.prefix = redis_prefix(run_id);
            // Generous: a reply slower than this opens the store's breaker and
            // fails every call for 500 ms, which a loaded bench must not trip.
            r.timeout = Duration::from_secs(10) + Duration::from_secs_f64(opts.db_latency_ms * 4.0 / 1000.0);
            let store = RedisStore::new(r, db.legacy.clone())?;
            store.ping().await?;
            if opts.db_latency_ms > 0.0 && upstream_of(&url).is_none() {
                notes.push("--db-latency delays Redis only: the SQL ledger is a local SQLite file".into());
            }
            let mut t = StoreTarget::new(store, ShopId::new(run_id)?);
            t.ttl = Ttl::from_secs(Ttl::MAX_SECS as i64)?;
            t.conn_report = true;
            (Arc::new(t), "redis".into(), Some(scheme))
        }
        _ => {
            let mut c = ConnectOptions::new(&url);
            c.max_connections = opts.max_connections;
            c.acquire_timeout = Duration::from_secs(60);
            c.store = opts.store.clone();
            let db = holdfast_sql::open(&c).await?;
            db.store.migrate().await?;
            if db.housekeeping.server_state().await?.autovacuum == Some(false) {
                let warning = "warning: autovacuum is off on this PostgreSQL server: dead rows pile up as they \
                               never would in production, and the figures are not what a production server gives \
                               (ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf())";
                eprintln!("{warning}");
                notes.push(warning.into());
            }
            sweeper = opts.retention.map(|secs| {
                let retention = (secs > 0).then(|| Duration::from_secs(secs));
                notes.push(match retention {
                    Some(_) => format!("the sweeper ran beside the sale: retention {secs} s"),
                    None => "the sweeper ran beside the sale: retention off".into(),
                });
                holdfast_sql::Sweeper::new(db.store.clone(), 500).with_retention(retention)
            });
            if let Some(workers) = opts.webhooks {
                let topics = opts.webhook_topics.unwrap_or_else(holdfast_core::Topics::all);
                let which =
                    if topics == holdfast_core::Topics::all() { "every event".to_string() } else { topics.to_list() };
                notes.push(format!(
                    "the run's shop was subscribed to {which}, delivered by {workers} worker(s) to a receiver in this \
                     process"
                ));
                let shop = ShopId::new(run_id)?;
                delivery = Some(crate::webhooks::Delivery::start(db.webhooks.clone(), &shop, workers, topics).await?);
            }
            let mut t = StoreTarget::new(db.store.clone(), ShopId::new(run_id)?);
            t.ttl = Ttl::from_secs(Ttl::MAX_SECS as i64)?;
            t.conn_report = true;
            t.housekeeping = Some(db.housekeeping.clone());
            (Arc::new(t), scheme, None)
        }
    };
    let mut sale = opts.sale.clone();
    sale.key_prefix = run_id.to_string();
    if opts.backend == BenchBackend::Ceiling {
        // The ceiling's "hold" is its one durable record; nothing to settle.
        sale.settle = false;
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let sweeping = sweeper.map(|s| tokio::spawn(s.run(Duration::from_secs(1), stopped)));
    let report = flash_sale::run(target, &sale).await;
    let _ = stop.send(true);
    if let Some(task) = sweeping {
        let _ = task.await;
    }
    let webhooks = match delivery {
        Some(d) => Some(d.finish(Duration::from_secs(120)).await?),
        None => None,
    };
    let report = report?;
    drop(proxies);
    let holdfast = matches!(opts.backend, BenchBackend::Sqlite | BenchBackend::Postgres | BenchBackend::Mysql);
    Ok(BenchReport {
        backend: opts.backend.name().into(),
        database,
        ledger,
        db_latency_ms: opts.db_latency_ms,
        coalesce: holdfast && opts.store.coalesce,
        run: run_id.to_string(),
        notes,
        sale: report,
        webhooks,
    })
}

/// The sale against a running `holdfast serve`.
async fn run_http(opts: &BenchOptions, h: &HttpOptions, run_id: &str) -> Result<BenchReport, Error> {
    let target = HttpTarget::connect(h, run_id, opts.sale.concurrency).await?;
    let mut notes = vec![format!("sold in shop {}, item {}", target.shop, target.item)];
    if !target.admin {
        notes.push(
            "audit and connection hold per tag: unavailable (the token is not an admin token; \
             the books are the item's levels only)"
                .into(),
        );
    }
    notes.push(
        "retries and deadlocks: the server's over the run (every shop it serves) plus this client's resent requests"
            .into(),
    );
    let database = crate::http::base_url(&h.url)?;
    let mut sale = opts.sale.clone();
    sale.key_prefix = run_id.to_string();
    let report = flash_sale::run(Arc::new(target), &sale).await?;
    Ok(BenchReport {
        backend: "http".into(),
        database,
        ledger: None,
        db_latency_ms: 0.0,
        coalesce: report.mean_batch.is_some_and(|m| m > 1.0),
        run: run_id.to_string(),
        notes,
        sale: report,
        webhooks: None,
    })
}

/// What ran, in words: "holdfast on postgres", "the counter baseline on mysql", …
pub fn describe(r: &BenchReport) -> String {
    match r.backend.as_str() {
        "http" => format!("holdfast serve at {}", r.database),
        "redis" => format!("the legacy Redis store (ledger on {})", r.ledger.as_deref().unwrap_or("?")),
        "counter" | "ceiling" => format!("the {} baseline on {}", r.backend, r.database),
        _ if r.coalesce => format!("holdfast on {}", r.database),
        _ => format!("holdfast on {} (uncoalesced)", r.database),
    }
}

/// `--plot`: one SVG for one run, the reserve latency distribution from p0
/// to p99.99 (log-log: 1 / (1 − p) across, milliseconds up) with the
/// headline figures under the title.
pub fn plot(r: &BenchReport) -> String {
    use crate::svg::{Axis, Chart, Series, chart};
    let x = |p: f64| 1.0 / (1.0 - p / 100.0);
    let ticks = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99].iter().map(|&p| (x(p), format!("p{p}"))).collect();
    let s = &r.sale;
    let mut title = format!("flash sale: {}, {} buyers at a time", describe(r), s.concurrency);
    if r.db_latency_ms > 0.0 {
        title.push_str(&format!(", {} ms added latency", r.db_latency_ms));
    }
    let subtitle = format!(
        "{:.0} reserves/s, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms; sold {}, oversold {}, undersold {}, errors {}",
        s.throughput, s.latency.p50_ms, s.latency.p99_ms, s.latency.max_ms, s.sold, s.oversold, s.undersold, s.errors
    );
    chart(&Chart {
        title,
        subtitle: Some(subtitle),
        x: Axis::log("percentile (log scale of 1 / (1 - p))").with_ticks(ticks),
        y: Axis::log("reserve latency, ms (log scale)"),
        series: vec![Series {
            name: "reserve (CO-corrected)".into(),
            points: s.latency_percentiles.iter().map(|p| (x(p.percentile), p.ms)).collect(),
        }],
    })
}

/// `--plot` with `--interval`: a run over time, one chart per figure —
/// `(file suffix, SVG)` for throughput, p99 and (where measured) the size of
/// holdfast's tables.
pub fn plot_intervals(r: &BenchReport) -> Vec<(&'static str, String)> {
    use crate::svg::{Axis, Chart, Series, chart};
    let Some(intervals) = &r.sale.intervals else { return Vec::new() };
    let draw = |what: &str, y: &str, f: &dyn Fn(&crate::flash_sale::IntervalStat) -> Option<f64>| {
        chart(&Chart {
            title: format!("{what}: {}, {} buyers at a time", describe(r), r.sale.concurrency),
            subtitle: Some(
                r.notes.iter().filter(|n| n.starts_with("the sweeper")).cloned().collect::<Vec<_>>().join("; "),
            ),
            x: Axis::linear("seconds into the sale"),
            y: Axis::linear(y),
            series: vec![Series {
                name: y.into(),
                points: intervals.iter().filter_map(|i| f(i).map(|v| (i.t, v))).collect(),
            }],
        })
    };
    let mut out = vec![
        ("-throughput.svg", draw("throughput per interval", "reserves/s", &|i| Some(i.throughput))),
        ("-p99.svg", draw("reserve p99 per interval", "p99, ms", &|i| Some(i.p99_ms))),
    ];
    if intervals.iter().any(|i| i.tables_bytes.is_some()) {
        let mb = |b: u64| b as f64 / 1e6;
        out.push(("-tables.svg", draw("holdfast's tables with indexes", "MB", &|i| i.tables_bytes.map(mb))));
    }
    out
}

/// A run id, unique across runs and processes: it names the run's shop (or
/// item), idempotency keys, Redis prefix and rows.
fn run_id() -> String {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("b{}x{}n{n}", std::process::id(), chrono_free_stamp())
}

/// A run id part that differs between runs of one process.
fn chrono_free_stamp() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0)
}
