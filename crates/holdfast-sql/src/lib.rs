//! holdfast's SQL stores: every statement holdfast sends to PostgreSQL,
//! MySQL/MariaDB or SQLite. The reservation algorithm lives once in `engine`;
//! each dialect module (`postgres`, `mysql`, `sqlite`) supplies its SQL text
//! (`queries/`, `migrations/`) and its dialect-shaped steps behind the
//! `Dialect` trait. The same pool also carries the API tokens (`tokens`) and
//! the tables of the migration off Redis (`control`).

#[macro_use]
mod dialect;
mod coalesce;
mod control;
mod detach;
mod driver;
mod engine;
mod housekeeping;
mod migrate;
mod mysql;
mod pods;
mod postgres;
mod run;
mod sqlite;
mod sweeper;
mod tag;
mod tokens;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{Error, LegacyLedger, ModeStore, Store, TokenStore, WebhookStore};

pub use crate::detach::{Detached, detach};
use crate::dialect::Dialect;
use crate::engine::SqlStore;
pub use crate::engine::StoreConfig;
pub use crate::housekeeping::{HotItem, Housekeeping, ServerState, TableSize};
pub use crate::pods::{Pod, PodConfig, PodsFile, open_pods};
pub use crate::sweeper::Sweeper;
pub use crate::tag::{connection_report, in_pod, with_conn_tag};
pub use crate::webhooks::{REFRESH as WEBHOOK_REFRESH, subscription_id};

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub url: String,
    /// Most connections in the pool.
    pub max_connections: u32,
    /// How long a caller waits for a free connection before `unavailable`.
    pub acquire_timeout: Duration,
    /// A connection older than this is closed when it is next returned to
    /// the pool, so a primary that moved behind a DNS name (a failover) is
    /// reached by the connections opened after it; `None`: kept for ever.
    pub max_lifetime: Option<Duration>,
    /// An idle connection is closed after this long; `None`: never.
    pub idle_timeout: Option<Duration>,
    pub store: StoreConfig,
    /// Open no connection until one is needed (pods: a pod that is down at
    /// start must not stop the others); otherwise the first connection is
    /// made at once, so a wrong URL fails at start.
    pub lazy: bool,
    /// Shops spread over the databases of a pods file: `url` is then not
    /// used, and each pod is opened with these options and its own URL.
    pub pods: Option<PodsFile>,
}

/// How long a connection lives by default: sqlx's default, 30 minutes.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// How long an idle connection is kept by default: sqlx's default, 10 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 32,
            acquire_timeout: Duration::from_secs(5),
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            store: StoreConfig::default(),
            lazy: false,
            pods: None,
        }
    }
}

/// Opens a store for `opts.url`: `postgres://…` or `postgresql://…`,
/// `mysql://…` or `mariadb://…`, or `sqlite://path`, `sqlite:path` or
/// `sqlite::memory:` (the file and its directory are created when missing;
/// see [`default_database_url`]).
pub async fn connect(opts: &ConnectOptions) -> Result<Arc<dyn Store>, Error> {
    Ok(open(opts).await?.store)
}

/// For tests that must control what the engine sends together or when:
/// requests sent to the database as one coalesced batch, as they are, and
/// level reads sharing one snapshot.
#[cfg(feature = "testing")]
#[async_trait::async_trait]
pub trait BatchReserve: Send + Sync {
    /// The answers, in order, that a batch of reserves gives each request.
    async fn reserve_batch(
        &self,
        reqs: Vec<holdfast_core::ReserveRequest>,
    ) -> Vec<Result<holdfast_core::Reserved, Error>>;

    /// The answers, in order, that a batch of claims, releases and extends
    /// of one shop gives each request.
    async fn settle_batch(
        &self,
        shop: &holdfast_core::ShopId,
        ops: Vec<(holdfast_core::ReservationId, holdfast_core::Settle)>,
    ) -> Vec<Result<holdfast_core::Reservation, Error>>;

    /// Two reads of an item's levels in one snapshot, `between` apart, each
    /// with whether it is unsettled (a hold of the item expired between a
    /// time before the snapshot and the read, so the read cannot say
    /// whether it had expired at the snapshot's moment).
    async fn levels_twice(
        &self,
        shop: &holdfast_core::ShopId,
        item: &holdfast_core::ItemId,
        between: std::time::Duration,
    ) -> Result<[(Vec<holdfast_core::LocationLevel>, bool); 2], Error>;

    /// What a reserve that came up short at (item, location) reads there
    /// (`in_flight.sql`), looking `lookahead` ahead: the units in flight
    /// now, and how long until holds expiring within the look-ahead bring
    /// them to `matters` units (`None`: not within it).
    async fn in_flight(
        &self,
        shop: &holdfast_core::ShopId,
        place: (&holdfast_core::ItemId, &holdfast_core::LocationId),
        lookahead: std::time::Duration,
        matters: u32,
    ) -> Result<(i64, Option<std::time::Duration>), Error>;
}

/// One database as the server uses it: the store, the token table, the mode
/// rules and the legacy ledger, and a look at the connection pool they all
/// share.
#[derive(Clone)]
pub struct Database {
    pub store: Arc<dyn Store>,
    pub tokens: Arc<dyn TokenStore>,
    pub modes: Arc<dyn ModeStore>,
    pub legacy: Arc<dyn LegacyLedger>,
    /// Webhook subscriptions and the outbox's deliveries.
    pub webhooks: Arc<dyn WebhookStore>,
    /// Table sizes and the server's clean-up, for long runs.
    pub housekeeping: Arc<dyn Housekeeping>,
    #[cfg(feature = "testing")]
    pub batches: Arc<dyn BatchReserve>,
    pool: Arc<dyn Fn() -> PoolStatus + Send + Sync>,
    /// Opened from a pods file: its pods.
    pods: Option<Arc<pods::PodSet>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("store", &self.store).field("pool", &self.pool_status()).finish()
    }
}

/// Connections of the pool right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Open connections, idle or in use.
    pub size: u32,
    pub idle: u32,
    pub max: u32,
}

impl Database {
    pub fn pool_status(&self) -> PoolStatus {
        (self.pool)()
    }

    /// Its pods: those of the pods file it was opened from, or itself as
    /// the one pod `default`.
    pub fn pods(&self) -> Vec<Pod> {
        match &self.pods {
            Some(set) => set.pods().to_vec(),
            None => vec![Pod { name: "default".into(), url: String::new(), db: self.clone(), shops: Vec::new() }],
        }
    }

    /// Opened from a pods file.
    pub fn has_pods(&self) -> bool {
        self.pods.is_some()
    }

    /// The pod `shop` lives in, when opened from a pods file.
    pub fn pod_of(&self, shop: &holdfast_core::ShopId) -> Option<Pod> {
        self.pods.as_ref().map(|set| set.of(shop).clone())
    }

    fn new<D: Dialect>(pool: sqlx::Pool<D::Db>, cfg: StoreConfig) -> Self {
        let look = pool.clone();
        let status = move || PoolStatus {
            size: look.size(),
            idle: look.num_idle() as u32,
            max: look.options().get_max_connections(),
        };
        let store = SqlStore::<D>::new(pool, cfg);
        Database {
            store: store.clone(),
            tokens: store.clone(),
            modes: store.clone(),
            housekeeping: store.clone(),
            webhooks: store.clone(),
            #[cfg(feature = "testing")]
            batches: store.clone(),
            legacy: store,
            pool: Arc::new(status),
            pods: None,
        }
    }
}

/// Like [`connect`], with the token store and pool status of the same pool.
pub async fn open(opts: &ConnectOptions) -> Result<Database, Error> {
    match &opts.pods {
        Some(file) => open_pods(file, opts).await,
        None => open_one(opts).await,
    }
}

/// One database: `opts.url`.
pub(crate) async fn open_one(opts: &ConnectOptions) -> Result<Database, Error> {
    let scheme = opts.url.split(':').next().unwrap_or_default();
    match scheme {
        "postgres" | "postgresql" => {
            let (url, pooled) = pooler_param(&opts.url)?;
            let connect = url
                .parse::<sqlx::postgres::PgConnectOptions>()
                .map_err(|e| Error::Invalid(holdfast_core::Invalid::new("database_url", e.to_string())))?;
            if pooled {
                // Behind a pooler in transaction mode: no startup option
                // (PgBouncer before 1.20 refuses the connection), no
                // statement kept prepared (each transaction may run on
                // another server connection); plan_cache_mode does not
                // matter for statements planned once each.
                let pool = network_pool(opts, connect.statement_cache_capacity(0), "PostgreSQL").await?;
                return Ok(Database::new::<postgres::Pg<true>>(pool, opts.store.clone()));
            }
            // holdfast's statements are few, prepared once per connection,
            // and their best plan does not depend on the values bound:
            // planning them again on every execution (what `auto` keeps
            // doing for the array-driven ones) cost more than running them
            // — 616 vs 1,426 reserves/s for one buyer in `holdfast bench
            // flash-sale`.
            let connect = connect.options([("plan_cache_mode", "force_generic_plan")]);
            let pool = network_pool(opts, connect, "PostgreSQL").await?;
            Ok(Database::new::<postgres::Pg>(pool, opts.store.clone()))
        }
        "mysql" | "mariadb" => {
            // sqlx knows only mysql://; MariaDB speaks the same protocol.
            if pooler_param(&opts.url)?.1 {
                let msg = "pooler=transaction is for PostgreSQL behind PgBouncer; MySQL/MariaDB needs none";
                return Err(Error::Invalid(holdfast_core::Invalid::new("database_url", msg)));
            }
            let url = match opts.url.strip_prefix("mariadb:") {
                Some(rest) => format!("mysql:{rest}"),
                None => opts.url.clone(),
            };
            let connect = url
                .parse::<sqlx::mysql::MySqlConnectOptions>()
                .map_err(|e| Error::Invalid(holdfast_core::Invalid::new("database_url", e.to_string())))?;
            let pool = network_pool(opts, connect, "MySQL/MariaDB").await?;
            Ok(Database::new::<mysql::My>(pool, opts.store.clone()))
        }
        "sqlite" => {
            let pool = sqlite::pool(opts).await?;
            Ok(Database::new::<sqlite::Lite>(pool, opts.store.clone()))
        }
        other => Err(Error::Invalid(holdfast_core::Invalid::new(
            "database_url",
            format!("unsupported scheme {other:?}; use postgres://, mysql://, mariadb:// or sqlite://"),
        ))),
    }
}

/// `url` without holdfast's own `pooler` parameter, and whether it said
/// `pooler=transaction`: a connection pooler in transaction mode (PgBouncer)
/// between holdfast and the server.
fn pooler_param(url: &str) -> Result<(String, bool), Error> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_string(), false)) };
    let mut pooled = false;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("pooler", "transaction")) => pooled = true,
            Some(("pooler", other)) => {
                let msg = format!("pooler={other}: the one value is transaction (a pooler in transaction mode)");
                return Err(Error::Invalid(holdfast_core::Invalid::new("database_url", msg)));
            }
            _ => rest.push(pair),
        }
    }
    Ok(match rest.is_empty() {
        true => (base.to_string(), pooled),
        false => (format!("{base}?{}", rest.join("&")), pooled),
    })
}

/// The pool of a database server reached over the network (PostgreSQL,
/// MySQL/MariaDB), sized and aged as `opts` says; `server` names it in the
/// error when the first connection fails.
async fn network_pool<DB: sqlx::Database>(
    opts: &ConnectOptions,
    connect: <DB::Connection as sqlx::Connection>::Options,
    server: &str,
) -> Result<sqlx::Pool<DB>, Error> {
    let pool = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(opts.max_connections)
        .acquire_timeout(opts.acquire_timeout)
        .max_lifetime(opts.max_lifetime)
        .idle_timeout(opts.idle_timeout);
    if opts.lazy {
        return Ok(pool.connect_lazy_with(connect));
    }
    pool.connect_with(connect).await.map_err(|e| cannot_connect(server, &e))
}

/// A URL kept in a file (`--database-url-file`, `--redis-url-file`): the
/// way container platforms hand a process a secret, so that its password is
/// not on a command line or in the environment. Surrounding whitespace (the
/// file's final newline) is dropped; `field` names the setting in errors.
pub fn read_url_file(path: &std::path::Path, field: &str) -> Result<String, Error> {
    let invalid = |msg: String| Error::Invalid(holdfast_core::Invalid::new(field, msg));
    let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    let url = text.trim();
    if url.is_empty() || url.contains('\n') {
        return Err(invalid(format!("{} must hold one URL on one line", path.display())));
    }
    Ok(url.to_string())
}

/// A database or Redis URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The first connection failed: `unavailable`, with the reason, and for a
/// certificate that did not verify, what to check.
fn cannot_connect(server: &str, e: &sqlx::Error) -> Error {
    let msg = e.to_string();
    let hint = if msg.contains("certificate") || msg.contains("UnknownIssuer") || msg.contains("NotValidForName") {
        " (the server's certificate did not verify: check sslrootcert / ssl-ca names the CA that signed it, \
         and that the URL's host is a name the certificate was issued for)"
    } else if msg.contains("unsupported startup parameter") {
        " (a connection pooler such as PgBouncer: in transaction mode, add ?pooler=transaction to the URL)"
    } else {
        ""
    };
    Error::Unavailable(format!("cannot connect to {server}: {msg}{hint}"))
}

/// The database every command uses when given no URL: the SQLite file
/// `holdfast.db` in the per-user data directory, which is the first of
///
/// 1. `$HOLDFAST_DATA_DIR`,
/// 2. `$XDG_DATA_HOME/holdfast`,
/// 3. `$HOME/.local/share/holdfast`,
/// 4. `.holdfast` under the current directory, when none of these is set
///
/// (an empty variable counts as unset). The directory and the file are created
/// by [`connect`] on first use; the caller migrates.
pub fn default_database_url() -> String {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
    let dir = var("HOLDFAST_DATA_DIR")
        .or_else(|| var("XDG_DATA_HOME").map(|d| d.join("holdfast")))
        .or_else(|| var("HOME").map(|d| d.join(".local/share/holdfast")))
        .unwrap_or_else(|| std::path::PathBuf::from(".holdfast"));
    // sqlx percent-decodes the path and ends it at `?`: escape those.
    let path = dir.join("holdfast.db").to_string_lossy().replace('%', "%25").replace('?', "%3F").replace('#', "%23");
    format!("sqlite://{path}")
}
