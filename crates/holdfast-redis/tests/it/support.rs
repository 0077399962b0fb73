//! This crate's worlds on top of the shared test kit: a SQL database of the
//! test's own (holdfast's store, the mode rules, the legacy ledger), a Redis
//! key prefix of its own (or a redis-server of its own, for tests that stop
//! Redis), and the router over both. Everything is removed when the world is
//! dropped, also when the test panics.

use std::future::Future;
use std::sync::Arc;

use holdfast_core::{Backend, Store};
pub use holdfast_redis::{ModeControl, ModeRouter, RedisOptions, RedisStore, ShadowConfig};
use holdfast_sql::{ConnectOptions, Database};
pub use holdfast_testkit::*;

pub const SQL_BACKENDS: [Backend; 2] = [Backend::Postgres, Backend::MySql];

/// One test's world: its own SQL database, its own Redis key prefix, and the
/// router over both.
pub struct World {
    pub backend: Backend,
    pub url: String,
    pub sql: Arc<dyn Store>,
    pub db: Database,
    pub redis: Arc<RedisStore>,
    pub control: Arc<ModeControl>,
    pub router: Arc<ModeRouter>,
    _prefix: RedisPrefix,
    _db: TestDb,
}

impl World {
    /// The world's SQL database.
    pub fn test_db(&self) -> &TestDb {
        &self._db
    }

    /// Another process on the same database and Redis: its own pools, its
    /// own poller, its own shadow mirror.
    pub async fn second_process(&self) -> (Arc<ModeControl>, Arc<ModeRouter>) {
        let db = holdfast_sql::open(&ConnectOptions::new(&self.url)).await.expect("second process's pool");
        let control = ModeControl::load(db.modes.clone()).await.expect("rules");
        control.spawn_poller();
        let redis = RedisStore::new(self.redis.options().clone(), db.legacy.clone()).expect("redis");
        let router = Arc::new(ModeRouter::new(db.store.clone(), redis, control.clone(), ShadowConfig::default()));
        (control, router)
    }
}

pub async fn world(backend: Backend, redis_url: &str) -> World {
    world_with(backend, redis_url, ShadowConfig::default()).await
}

pub async fn world_with(backend: Backend, redis_url: &str, shadow: ShadowConfig) -> World {
    let test_db = TestDb::new(backend).await;
    let prefix = RedisPrefix::new(redis_url);
    let db = test_db.db.clone();
    let control = ModeControl::load(db.modes.clone()).await.expect("rules");
    control.spawn_poller();
    let mut opts = RedisOptions::new(redis_url);
    opts.prefix = prefix.prefix.clone();
    let redis = RedisStore::new(opts, db.legacy.clone()).expect("redis");
    redis.ping().await.expect("Redis must be running");
    let router = Arc::new(ModeRouter::new(db.store.clone(), redis.clone(), control.clone(), shadow));
    World {
        backend,
        url: test_db.url.clone(),
        sql: db.store.clone(),
        db,
        redis,
        control,
        router,
        _prefix: prefix,
        _db: test_db,
    }
}

/// Runs `f` on a fresh world for each SQL backend, on the shared Redis.
pub async fn each_backend<F, Fut>(f: F)
where
    F: Fn(World) -> Fut,
    Fut: Future<Output = World>,
{
    for b in SQL_BACKENDS {
        let w = world(b, &shared_redis_url()).await;
        drop(f(w).await);
    }
}
