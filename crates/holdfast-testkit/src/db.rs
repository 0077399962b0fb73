//! A database of its own for every test, created on a real server and
//! dropped when the [`TestDb`] is dropped (also when the test panics).

use std::future::Future;
use std::sync::Arc;

use holdfast_core::{Backend, Store};
use holdfast_sql::{ConnectOptions, Database, StoreConfig};
use sqlx::Connection;

use crate::{block_on_aside, unique_name};

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

/// PgBouncer in transaction mode in front of the PostgreSQL server
/// (`HOLDFAST_TEST_PGBOUNCER_URL`, as `scripts/test` starts it), any database
/// path, with `?pooler=transaction`.
pub fn pgbouncer_url() -> String {
    std::env::var("HOLDFAST_TEST_PGBOUNCER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/postgres?pooler=transaction".into())
}

/// How a test's store reaches its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Direct,
    /// Over TLS only (`crate::over_tls`).
    Tls,
    /// Through PgBouncer in transaction mode.
    Pooler,
}

/// `url` with its database path replaced by `db`; its `?query` is kept.
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

/// A database created for one test, migrated, and dropped with this value.
pub struct TestDb {
    pub backend: Backend,
    /// The store, tokens, mode rules and legacy ledger on the test database.
    pub db: Database,
    pub store: Arc<dyn Store>,
    /// The test database's own URL, for tests that inspect the server or
    /// start a second process on it.
    pub url: String,
    /// Last: the pools above close before the database is dropped.
    _drop: DropDatabase,
}

impl std::fmt::Debug for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDb").field("backend", &self.backend).field("url", &self.url).finish()
    }
}

impl TestDb {
    pub async fn new(backend: Backend) -> Self {
        Self::with_config(backend, StoreConfig::default()).await
    }

    pub async fn with_config(backend: Backend, cfg: StoreConfig) -> Self {
        Self::create(backend, cfg, Reach::Direct).await
    }

    /// A PostgreSQL database reached through PgBouncer in transaction mode
    /// ([`pgbouncer_url`]): created on the server, migrated and used through
    /// the pooler. `url` is the pooler's.
    pub async fn through_pooler(cfg: StoreConfig) -> Self {
        Self::create(Backend::Postgres, cfg, Reach::Pooler).await
    }

    /// Like [`TestDb::with_config`], the store connecting over TLS only
    /// (`crate::over_tls`): every connection of its pool verifies the
    /// server against the test CA. `url` is that TLS URL.
    pub async fn over_tls(backend: Backend, cfg: StoreConfig) -> Self {
        Self::create(backend, cfg, Reach::Tls).await
    }

    async fn create(backend: Backend, cfg: StoreConfig, reach: Reach) -> Self {
        let name = unique_name("hf_test");
        let url = match backend {
            Backend::Postgres | Backend::MySql => {
                let server = server_url(backend);
                admin_exec(backend, &server, &format!("CREATE DATABASE {name}")).await;
                with_database(&server, &name)
            }
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                std::fs::create_dir_all(&dir).expect("create the test's directory");
                format!("sqlite://{}", dir.join("holdfast.db").display())
            }
        };
        let url = match reach {
            Reach::Direct => url,
            Reach::Tls => crate::over_tls(backend, &url, "ca.pem"),
            Reach::Pooler => with_database(&pgbouncer_url(), &name),
        };
        // From here on, the database is dropped however this ends.
        let drop = DropDatabase { backend, name };
        let mut opts = ConnectOptions::new(&url);
        opts.store = cfg;
        opts.max_connections = 24;
        let db = holdfast_sql::open(&opts).await.unwrap_or_else(|e| panic!("{}: {e}", backend.name()));
        db.store.migrate().await.expect("migrate");
        TestDb { backend, store: db.store.clone(), db, url, _drop: drop }
    }

    /// The test database's name on its server (for SQLite, its directory's).
    pub fn name(&self) -> &str {
        &self._drop.name
    }

    /// Runs statements on the test database directly, as an operator (or a
    /// bug) outside holdfast would: each as a script, so it may hold several.
    pub async fn exec(&self, statements: &[&str]) {
        macro_rules! run_on {
            ($conn:ty) => {{
                let mut c = <$conn>::connect(&self.url).await.unwrap();
                for s in statements {
                    sqlx::Executor::execute(&mut c, *s).await.unwrap_or_else(|e| panic!("{s}: {e}"));
                }
            }};
        }
        match self.backend {
            Backend::Postgres => run_on!(sqlx::PgConnection),
            Backend::MySql => run_on!(sqlx::MySqlConnection),
            Backend::Sqlite => run_on!(sqlx::SqliteConnection),
        }
    }

    /// Asserts the accounting invariant for every (shop, item, location).
    pub async fn assert_audit_clean(&self) {
        let report = self.store.audit(None).await.expect("audit");
        assert!(report.ok(), "audit found breaches: {report:#?}");
        assert!(report.checked > 0, "audit checked nothing");
    }
}

/// Drops a test's database (or removes its SQLite directory) when dropped.
struct DropDatabase {
    backend: Backend,
    name: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let (backend, name) = (self.backend, self.name.clone());
        block_on_aside(async move {
            match backend {
                Backend::Postgres => {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    admin_exec(backend, &server_url(backend), &sql).await;
                }
                Backend::MySql => {
                    let sql = format!("DROP DATABASE IF EXISTS {name}");
                    admin_exec(backend, &server_url(backend), &sql).await;
                }
                Backend::Sqlite => {
                    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&name));
                }
            }
        });
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

/// Runs a test body against a fresh database; the database is dropped
/// afterwards whether the body passed or panicked.
pub async fn with_db<F, Fut>(backend: Backend, cfg: StoreConfig, body: F)
where
    F: FnOnce(Arc<TestDb>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    isolated(TestDb::with_config(backend, cfg).await, body).await
}

/// Runs `body` on its own task with `fixture`, then drops the fixture (and
/// what it created) before passing on the body's panic, if any.
pub(crate) async fn isolated<T, F, Fut>(fixture: T, body: F)
where
    T: Send + Sync + 'static,
    F: FnOnce(Arc<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let fixture = Arc::new(fixture);
    let outcome = tokio::spawn(body(fixture.clone())).await;
    drop(fixture);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
