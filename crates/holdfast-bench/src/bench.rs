//! `holdfast bench flash-sale`: one flash sale against one backend — holdfast
//! on SQLite, PostgreSQL or MySQL, or a baseline — optionally through the
//! latency proxy, reported with the figures of SPEC §11.

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{Error, Invalid, ShopId, Ttl};
use holdfast_sql::{ConnectOptions, StoreConfig};
use serde::Serialize;
use sqlx::Connection;

use crate::baseline::{Baseline, Kind};
use crate::flash_sale::{self, FlashSale, FlashSaleReport};
use crate::proxy::{LatencyProxy, upstream_of};
use crate::target::{StoreTarget, Target};

/// What a flash sale runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
}

impl BenchBackend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Counter => "counter",
            Self::Ceiling => "ceiling",
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
    pub pool_cap: u32,
    pub max_connections: u32,
}

/// One run's figures, with what was run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub backend: String,
    /// Which database the baseline or holdfast ran on.
    pub database: String,
    pub db_latency_ms: f64,
    #[serde(flatten)]
    pub sale: FlashSaleReport,
}

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/holdfast_bench";
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/holdfast_bench";

/// Creates the database a server URL names, when it does not exist.
async fn ensure_database(url: &str) -> Result<(), Error> {
    let name = url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(());
    }
    let unavailable = |e: sqlx::Error| Error::Unavailable(format!("{}: {e}", redact(url)));
    if url.starts_with("postgres") {
        let admin = url.replacen(&format!("/{name}"), "/postgres", 1);
        let mut c = sqlx::PgConnection::connect(&admin).await.map_err(unavailable)?;
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut c)
            .await
            .map_err(unavailable)?;
        if !exists {
            sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut c).await.map_err(unavailable)?;
        }
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        let admin = url.replacen("mariadb://", "mysql://", 1).replacen(&format!("/{name}"), "/mysql", 1);
        let mut c = sqlx::MySqlConnection::connect(&admin).await.map_err(unavailable)?;
        sqlx::query(&format!("CREATE DATABASE IF NOT EXISTS {name}")).execute(&mut c).await.map_err(unavailable)?;
    }
    Ok(())
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

pub async fn run(opts: &BenchOptions) -> Result<BenchReport, Error> {
    let tmp = std::env::temp_dir().join(format!("holdfast-bench-{}", std::process::id()));
    let url = match (&opts.database_url, opts.backend) {
        (Some(u), _) => u.clone(),
        (None, BenchBackend::Sqlite) => {
            std::fs::create_dir_all(&tmp).map_err(|e| Error::Unavailable(format!("{}: {e}", tmp.display())))?;
            format!("sqlite://{}", tmp.join("bench.db").display())
        }
        (None, BenchBackend::Mysql) => DEFAULT_MYSQL_URL.into(),
        (None, _) => DEFAULT_POSTGRES_URL.into(),
    };
    let result = run_on(opts, &url).await;
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

async fn run_on(opts: &BenchOptions, url: &str) -> Result<BenchReport, Error> {
    let scheme_ok = match opts.backend {
        BenchBackend::Sqlite => url.starts_with("sqlite:"),
        BenchBackend::Postgres => url.starts_with("postgres"),
        BenchBackend::Mysql => url.starts_with("mysql") || url.starts_with("mariadb"),
        BenchBackend::Counter | BenchBackend::Ceiling => !url.starts_with("sqlite:"),
    };
    if !scheme_ok {
        return Err(Invalid::new(
            "database_url",
            format!("backend {} cannot run on {}", opts.backend.name(), redact(url)),
        )
        .into());
    }
    ensure_database(url).await?;
    // The proxy must outlive the run: it carries every connection.
    let mut _proxy = None;
    let mut url = url.to_string();
    if opts.db_latency_ms > 0.0 {
        let upstream = upstream_of(&url)
            .ok_or_else(|| Invalid::new("db_latency", "the latency proxy needs a network database URL"))?;
        let proxy = LatencyProxy::start(upstream, Duration::from_secs_f64(opts.db_latency_ms / 1000.0))
            .map_err(|e| Error::Unavailable(format!("latency proxy: {e}")))?;
        url = proxy.rewrite(&url);
        _proxy = Some(proxy);
    }
    let run_id = format!("b{}x{}", std::process::id(), chrono_free_stamp());
    let database = url.split(':').next().unwrap_or_default().to_string();
    let target: Arc<dyn Target> = match opts.backend {
        BenchBackend::Counter | BenchBackend::Ceiling => {
            let kind = if opts.backend == BenchBackend::Counter { Kind::Counter } else { Kind::Ceiling };
            Arc::new(Baseline::connect(kind, &url, opts.max_connections, &run_id).await?)
        }
        _ => {
            let mut c = ConnectOptions::new(&url);
            c.max_connections = opts.max_connections;
            c.acquire_timeout = Duration::from_secs(60);
            c.store = StoreConfig { pool_cap: opts.pool_cap, ..StoreConfig::default() };
            let store = holdfast_sql::connect(&c).await?;
            store.migrate().await?;
            let mut t = StoreTarget::new(store, ShopId::new(run_id.clone())?);
            t.ttl = Ttl::from_secs(Ttl::MAX_SECS as i64)?;
            Arc::new(t)
        }
    };
    let mut sale = opts.sale.clone();
    sale.key_prefix = run_id;
    if opts.backend == BenchBackend::Ceiling {
        // The ceiling's "hold" is its one durable record; nothing to settle.
        sale.settle = false;
    }
    let report = flash_sale::run(target, &sale).await?;
    Ok(BenchReport { backend: opts.backend.name().into(), database, db_latency_ms: opts.db_latency_ms, sale: report })
}

/// A run id part that differs between runs of one process.
fn chrono_free_stamp() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0)
}
