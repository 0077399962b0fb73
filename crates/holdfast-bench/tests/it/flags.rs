//! Options the bench refuses before it connects to anything: each is an
//! `invalid_request` naming the flag, with a message that says what to do.

use holdfast_bench::bench::{self, BenchBackend, BenchOptions};
use holdfast_bench::http::HttpOptions;
use holdfast_core::Error;

use crate::common::{options, sale};

/// The message of the run's refusal, which must name `field`.
async fn refused(opts: BenchOptions, field: &str) -> String {
    match bench::run(&opts).await {
        Err(Error::Invalid(i)) => {
            assert_eq!(i.field, field, "{}", i.message);
            i.message
        }
        other => panic!("expected invalid_request, got {other:?}"),
    }
}

fn http(url: &str) -> BenchOptions {
    let mut o = options(BenchBackend::Postgres, sale(10, 10, 1));
    o.http = Some(HttpOptions { url: url.into(), token: None, shop: None });
    o
}

#[tokio::test]
async fn a_target_that_is_not_http_or_https_is_refused() {
    for url in ["ftp://127.0.0.1:7878", "127.0.0.1:7878", "http://127.0.0.1:7878/v1/shops", "http://", "https://a@b:1"]
    {
        let msg = refused(http(url), "target").await;
        assert!(msg.contains("http://HOST:PORT"), "{url}: {msg}");
    }
    assert_eq!(holdfast_bench::http::base_url("https://127.0.0.1:7878/").unwrap(), "https://127.0.0.1:7878");
}

#[tokio::test]
async fn a_rate_of_zero_or_less_is_refused() {
    for rate in [0.0, -5.0, f64::INFINITY, f64::NAN] {
        let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
        o.sale.rate = Some(rate);
        let msg = refused(o, "rate").await;
        assert!(msg.contains("positive"), "{msg}");
    }
}

#[tokio::test]
async fn out_of_range_sale_figures_are_refused() {
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.sale.claim_ratio = 1.5;
    refused(o, "claim_ratio").await;
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.db_latency_ms = 5000.0;
    refused(o, "db_latency").await;
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.sale.concurrency = 0;
    refused(o, "sale").await;
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.sale.duration = Some(std::time::Duration::ZERO);
    refused(o, "duration").await;
}

#[tokio::test]
async fn db_latency_with_a_target_is_refused() {
    let mut o = http("http://127.0.0.1:7878");
    o.db_latency_ms = 0.5;
    let msg = refused(o, "db_latency").await;
    assert!(msg.contains("--target"), "{msg}");
}

#[tokio::test]
async fn a_redis_url_that_is_not_redis_is_refused() {
    let mut o = options(BenchBackend::Redis, sale(10, 10, 1));
    o.redis_url = "http://127.0.0.1:6379".into();
    let msg = refused(o, "redis_url").await;
    assert!(msg.contains("redis://"), "{msg}");
}

#[tokio::test]
async fn a_backend_on_the_wrong_database_is_refused() {
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.database_url = Some("postgres://postgres:secret@127.0.0.1:5432/x".into());
    let msg = refused(o, "database_url").await;
    assert!(msg.contains("backend sqlite cannot run on") && !msg.contains("secret"), "{msg}");
    // The latency proxy needs a network database.
    let mut o = options(BenchBackend::Sqlite, sale(10, 10, 1));
    o.db_latency_ms = 0.5;
    refused(o, "db_latency").await;
}
