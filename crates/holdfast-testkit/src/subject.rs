//! The store under test: one SQL dialect, the legacy Redis store (its ledger
//! on a SQL database), or the mode router serving every shop in one mode.

use std::future::Future;
use std::sync::Arc;

use holdfast_core::{Backend, Mode, Store};
use holdfast_redis::{ModeChange, ModeControl, ModeRouter, RedisOptions, RedisStore, ShadowConfig};
use holdfast_sql::StoreConfig;

use crate::{RedisPrefix, TestDb, shared_redis_url};

/// What a conformance test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// holdfast on one SQL dialect, coalescing concurrent requests.
    Sql(Backend),
    /// holdfast on one SQL dialect, every request alone (coalescing off).
    SqlAlone(Backend),
    /// The legacy Redis counter store, its ledger on this SQL backend.
    Legacy(Backend),
    /// The mode router over holdfast on this backend and the legacy store,
    /// every shop in this mode.
    Router(Mode, Backend),
    /// holdfast on one SQL dialect, every connection over TLS verified
    /// against the test CA (as a user the server lets in over TLS only).
    SqlTls(Backend),
    /// The legacy store on the TLS Redis (`rediss://`), its ledger over TLS.
    LegacyTls(Backend),
    /// holdfast on PostgreSQL through PgBouncer in transaction mode.
    SqlPooled,
}

impl Subject {
    pub fn name(self) -> String {
        match self {
            Subject::Sql(b) => b.name().to_string(),
            Subject::SqlAlone(b) => format!("{} (not coalescing)", b.name()),
            Subject::Legacy(b) => format!("legacy redis ({} ledger)", b.name()),
            Subject::Router(m, b) => format!("router {m} ({})", b.name()),
            Subject::SqlTls(b) => format!("{} over TLS", b.name()),
            Subject::SqlPooled => "postgres through PgBouncer".to_string(),
            Subject::LegacyTls(b) => format!("legacy rediss ({} ledger over TLS)", b.name()),
        }
    }

    /// Whose books decide: holdfast's pool, or the legacy counters.
    pub fn decider(self) -> Decider {
        match self {
            Subject::Sql(_)
            | Subject::SqlAlone(_)
            | Subject::SqlTls(_)
            | Subject::SqlPooled
            | Subject::Router(Mode::SqlPrimary | Mode::Sql, _) => Decider::Holdfast,
            Subject::Legacy(_) | Subject::LegacyTls(_) | Subject::Router(Mode::Redis | Mode::Shadow, _) => {
                Decider::Legacy
            }
        }
    }
}

/// Which model answers a subject's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// One row per unit in a bounded pool, refilled from the ledger, in one
    /// ACID database.
    Holdfast,
    /// A Redis counter beside a SQL ledger, with no transaction over both:
    /// it cannot promise a stock change racing a claim (a read, a Redis move
    /// and a SQL swap), and has no pool to refill.
    Legacy,
}

/// A subject, opened on a database (and Redis prefix) of the test's own.
pub struct TestStore {
    pub subject: Subject,
    pub store: Arc<dyn Store>,
    /// The router, for the router subjects.
    pub router: Option<Arc<ModeRouter>>,
    /// Last: the store's pools close before its database goes.
    _redis: Option<RedisPrefix>,
    pub db: TestDb,
}

impl std::fmt::Debug for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestStore").field("subject", &self.subject).finish()
    }
}

impl TestStore {
    /// Opens `subject`; `cfg` configures holdfast's SQL store.
    pub async fn open(subject: Subject, cfg: StoreConfig) -> Self {
        let (backend, cfg) = match subject {
            Subject::SqlAlone(b) => (b, StoreConfig { coalesce: false, ..cfg }),
            Subject::Sql(b) | Subject::Legacy(b) | Subject::Router(_, b) => (b, cfg),
            Subject::SqlTls(b) | Subject::LegacyTls(b) => (b, cfg),
            Subject::SqlPooled => (Backend::Postgres, cfg),
        };
        let tls = matches!(subject, Subject::SqlTls(_) | Subject::LegacyTls(_));
        let db = match subject {
            Subject::SqlPooled => TestDb::through_pooler(cfg).await,
            _ if tls => TestDb::over_tls(backend, cfg).await,
            _ => TestDb::with_config(backend, cfg).await,
        };
        if let Subject::Sql(_) | Subject::SqlAlone(_) | Subject::SqlTls(_) | Subject::SqlPooled = subject {
            return TestStore { subject, store: db.store.clone(), router: None, _redis: None, db };
        }
        let prefix = RedisPrefix::new(&if tls { crate::redis_tls_url() } else { shared_redis_url() });
        let mut opts = RedisOptions::new(&prefix.url);
        opts.prefix = prefix.prefix.clone();
        let legacy = RedisStore::new(opts, db.db.legacy.clone()).expect("redis store");
        legacy.ping().await.expect("Redis must be running (scripts/test starts it)");
        let (store, router): (Arc<dyn Store>, _) = match subject {
            Subject::Router(mode, _) => {
                let control = ModeControl::load(db.db.modes.clone()).await.expect("mode rules");
                if mode != Mode::Redis {
                    // Every shop, by the rollout: the shops a test makes up
                    // need no pin of their own.
                    control.apply(&ModeChange::Rollout { mode, percent: 100, pod: None }).await.expect("rollout");
                }
                let router = Arc::new(ModeRouter::new(db.store.clone(), legacy, control, ShadowConfig::default()));
                (router.clone(), Some(router))
            }
            _ => (legacy, None),
        };
        TestStore { subject, store, router, _redis: Some(prefix), db }
    }

    pub fn decider(&self) -> Decider {
        self.subject.decider()
    }

    /// Waits until the router's shadow mirror has applied every operation
    /// so far (nothing to wait for elsewhere).
    pub async fn mirrored(&self) {
        if let Some(router) = &self.router {
            router.drain_shadow().await;
        }
    }

    /// Asserts the accounting invariant of every (shop, item, location) in
    /// the books of every store the subject writes (for the router in
    /// shadow mode, after the mirror caught up).
    pub async fn assert_audit_clean(&self) {
        self.mirrored().await;
        let report = self.store.audit(None).await.expect("audit");
        assert!(report.ok(), "{}: audit found breaches: {report:#?}", self.subject.name());
        assert!(report.checked > 0, "{}: audit checked nothing", self.subject.name());
    }
}

/// Runs a test body against a fresh `subject`; its database and Redis keys
/// are removed afterwards whether the body passed or panicked.
pub async fn with_subject<F, Fut>(subject: Subject, cfg: StoreConfig, body: F)
where
    F: FnOnce(Arc<TestStore>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    crate::db::isolated(TestStore::open(subject, cfg).await, body).await
}
