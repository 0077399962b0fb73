//! `--backend redis`: the flash sale against the legacy Redis store on a real
//! Redis, its ledger on SQL; the run's keys are its own and gone afterwards.

use holdfast_bench::bench::{self, BenchBackend, BenchReport};
use holdfast_core::Backend;
use holdfast_sql::StoreConfig;

use crate::common::{assert_clean, options, redis_url, sale};
use crate::support::with_db;

/// Keys left under the run's prefix.
async fn keys_left(r: &BenchReport) -> Vec<String> {
    let client = redis::Client::open(redis_url()).expect("redis url");
    let mut c = client.get_multiplexed_async_connection().await.expect("Redis must be running");
    redis::cmd("KEYS").arg(format!("{}*", bench::redis_prefix(&r.run))).query_async(&mut c).await.expect("KEYS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_sale_with_its_ledger_on_sqlite_ends_clean() {
    // No --database-url: the ledger is a throw-away SQLite file.
    let r = bench::run(&options(BenchBackend::Redis, sale(150, 600, 16)))
        .await
        .unwrap_or_else(|e| panic!("Redis must be running at {} (scripts/test starts it): {e}", redis_url()));
    assert_clean(&r);
    assert_eq!((r.backend.as_str(), r.database.as_str(), r.ledger.as_deref()), ("redis", "redis", Some("sqlite")));
    assert_eq!(r.sale.audit_ok, Some(true), "the legacy store audits on_hand = avail + held + committed");
    // The ledger's statements are tagged like every other.
    let tags: Vec<&str> = r.sale.connections.iter().flatten().map(|c| c.tag.as_str()).collect();
    assert!(tags.contains(&"legacy_ledger"), "{tags:?}");
    assert_eq!(keys_left(&r).await, Vec::<String>::new(), "the run deletes its keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_sale_through_the_latency_proxy_with_its_ledger_on_postgres_ends_clean() {
    with_db(Backend::Postgres, StoreConfig::default(), |db| async move {
        let mut o = options(BenchBackend::Redis, sale(60, 200, 8));
        o.database_url = Some(db.url.clone());
        o.db_latency_ms = 0.3;
        let r = bench::run(&o).await.expect("Redis and PostgreSQL must be running");
        assert_clean(&r);
        assert_eq!(r.ledger.as_deref(), Some("postgres"));
        // Each reserve is at least one round trip to Redis through the proxy.
        assert!(r.sale.latency_percentiles[0].ms >= 0.6, "{:?}", r.sale.latency_percentiles);
        assert_eq!(keys_left(&r).await, Vec::<String>::new());
        // The ledger's row is in the test's own database.
        let sold: i64 = {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_scalar("SELECT committed FROM legacy_ledger WHERE shop_id = $1")
                .bind(&r.run)
                .fetch_one(&mut c)
                .await
                .unwrap()
        };
        assert_eq!(sold as u64, r.sale.sold);
    })
    .await;
}
