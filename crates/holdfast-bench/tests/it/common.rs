//! What the tests share: a small sale, options around it, the report checks.

use holdfast_bench::bench::{BenchBackend, BenchOptions, BenchReport};
use holdfast_bench::flash_sale::FlashSale;

pub fn redis_url() -> String {
    std::env::var("HOLDFAST_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// `buyers` buyers, `concurrency` at a time, for `stock` 1-unit carts; 70 %
/// pay, the rest release (so units come back while others are refused).
pub fn sale(stock: u32, buyers: u64, concurrency: u32) -> FlashSale {
    FlashSale {
        stock,
        buyers,
        duration: None,
        concurrency,
        cart_size: 1,
        claim_ratio: 0.7,
        settle: true,
        rate: None,
        key_prefix: String::new(),
        progress: false,
        interval: None,
    }
}

pub fn options(backend: BenchBackend, sale: FlashSale) -> BenchOptions {
    BenchOptions {
        backend,
        database_url: None,
        sale,
        db_latency_ms: 0.0,
        store: holdfast_sql::StoreConfig::default(),
        max_connections: 16,
        redis_url: redis_url(),
        http: None,
        retention: None,
        webhooks: None,
        webhook_topics: None,
    }
}

/// Every unit sold once, nothing failed, and what the buyers were told adds
/// up with what is left.
pub fn assert_clean(r: &BenchReport) {
    let s = &r.sale;
    assert_eq!((s.oversold, s.undersold, s.errors), (0, 0, 0), "{r:#?}");
    assert!(s.ok(), "{r:#?}");
    assert!(s.sold > 0 && s.held > 0, "nothing sold: {r:#?}");
    assert_eq!(s.sold as i64 + s.left, s.stock as i64, "sold + left must be the stock: {r:#?}");
    assert_eq!(s.latency_percentiles.len(), holdfast_bench::flash_sale::PERCENTILES.len());
    assert!(s.latency_percentiles.windows(2).all(|w| w[0].ms <= w[1].ms), "percentiles must not fall: {r:#?}");
    let l = &s.latency;
    assert!(l.p50_ms <= l.p95_ms && l.p95_ms <= l.p99_ms && l.p99_ms <= l.max_ms, "latency must not fall: {r:#?}");
}
