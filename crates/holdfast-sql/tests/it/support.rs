//! Test fixtures: a fresh database of its own for every test, on a real
//! server. A server that cannot be reached fails the test loudly; nothing is
//! ever skipped.

use std::future::Future;
use std::sync::Arc;

use holdfast_core::{
    Backend, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReserveRequest, ShopId, StockChange, Store, Ttl,
};
use holdfast_sql::{ConnectOptions, StoreConfig, connect};
use rand::Rng;
use sqlx::Connection;

/// The server URL (any database path) for a backend, from the environment or
/// the local default.
pub fn server_url(backend: Backend) -> String {
    match backend {
        Backend::Postgres => std::env::var("HOLDFAST_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        Backend::MySql => {
            std::env::var("HOLDFAST_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/mysql".into())
        }
        Backend::Sqlite => String::new(),
    }
}

/// `url` with its database path replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = base[after_scheme..].find('/').map(|i| i + after_scheme).unwrap_or(base.len());
    let mut out = format!("{}/{}", &base[..host_end], db);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// A database created for one test and dropped after it.
pub struct TestDb {
    pub backend: Backend,
    pub store: Arc<dyn Store>,
    /// The test database's own URL, for tests that inspect the server.
    #[allow(dead_code)]
    pub url: String,
    name: String,
    _dir: Option<TempDir>,
}

/// A directory removed on drop (SQLite files).
pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TestDb {
    pub async fn with_config(backend: Backend, cfg: StoreConfig) -> Self {
        let name = format!("hf_test_{:016x}", rand::thread_rng().r#gen::<u64>());
        let (url, dir) = match backend {
            Backend::Postgres | Backend::MySql => {
                let server = server_url(backend);
                admin_exec(backend, &server, &format!("CREATE DATABASE {name}")).await;
                (with_database(&server, &name), None)
            }
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).unwrap();
                (format!("sqlite://{}", dir.join("holdfast.db").display()), Some(TempDir(dir)))
            }
        };
        let mut opts = ConnectOptions::new(&url);
        opts.store = cfg;
        opts.max_connections = 24;
        let store = connect(&opts).await.unwrap_or_else(|e| panic!("{}: {e}", backend.name()));
        store.migrate().await.expect("migrate");
        TestDb { backend, store, url, name, _dir: dir }
    }

    async fn drop_database(&self) {
        if matches!(self.backend, Backend::Postgres | Backend::MySql) {
            let server = server_url(self.backend);
            let sql = match self.backend {
                Backend::Postgres => format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
                _ => format!("DROP DATABASE IF EXISTS {}", self.name),
            };
            admin_exec(self.backend, &server, &sql).await;
        }
    }

    /// Asserts the accounting invariant for every (shop, item, location).
    pub async fn assert_audit_clean(&self) {
        let report = self.store.audit(None).await.expect("audit");
        assert!(report.ok(), "audit found breaches: {report:#?}");
        assert!(report.checked > 0, "audit checked nothing");
    }
}

async fn admin_exec(backend: Backend, server: &str, sql: &str) {
    let hint = "is the server running? scripts/test starts it; set HOLDFAST_TEST_POSTGRES_URL / HOLDFAST_TEST_MYSQL_URL to use another";
    match backend {
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(server)
                .await
                .unwrap_or_else(|e| panic!("PostgreSQL at {server} unreachable ({e}); {hint}"));
            sqlx::query(sql).execute(&mut c).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        Backend::MySql => {
            let mut c = sqlx::MySqlConnection::connect(server)
                .await
                .unwrap_or_else(|e| panic!("MySQL/MariaDB at {server} unreachable ({e}); {hint}"));
            sqlx::query(sql).execute(&mut c).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        Backend::Sqlite => {}
    }
}

/// Runs a test body against a fresh database, and drops the database
/// afterwards whether the body passed or panicked.
pub async fn with_db<F, Fut>(backend: Backend, cfg: StoreConfig, body: F)
where
    F: FnOnce(Arc<TestDb>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let db = Arc::new(TestDb::with_config(backend, cfg).await);
    let outcome = tokio::spawn(body(db.clone())).await;
    db.drop_database().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

pub fn shop(s: &str) -> ShopId {
    ShopId::new(s).unwrap()
}
pub fn item(s: &str) -> ItemId {
    ItemId::new(s).unwrap()
}
pub fn loc(s: &str) -> LocationId {
    LocationId::new(s).unwrap()
}
pub fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::new(s).unwrap()
}

pub fn line(i: &str, qty: i64, locations: Option<&[&str]>) -> Line {
    Line {
        item: item(i),
        quantity: Quantity::new(qty).unwrap(),
        locations: locations.map(|v| v.iter().map(|l| loc(l)).collect()),
    }
}

pub fn request(s: &str, k: &str, lines: Vec<Line>) -> ReserveRequest {
    ReserveRequest::new(shop(s), key(k), lines, Ttl::DEFAULT, false, false).unwrap()
}

pub async fn stock(store: &dyn Store, s: &str, i: &str, l: &str, on_hand: i64) {
    store.change_stock(&shop(s), &item(i), &loc(l), StockChange::Set(on_hand)).await.expect("stock set");
}
