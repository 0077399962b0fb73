//! A coalesced batch that leaves a pool about half empty starts its refill
//! on a task of its own, so the batches after it find the pool filled
//! instead of one of them refilling it inline while the shop's buyers wait
//! (docs/design.md, "The pool and its refill"). A batch that takes less than
//! that leaves the pool alone. Every dialect; the books balance throughout.

use std::time::{Duration, Instant};

use holdfast_core::Backend;
use holdfast_sql::StoreConfig;
use holdfast_testkit::per_backend;
use holdfast_testkit::*;

const CAP: u32 = 20;

/// The pool rows of `s1`'s `hot` item once they have settled at `want`, or
/// what they are after two seconds.
async fn pool_rows_settle(db: &TestDb, want: i64) -> i64 {
    let start = Instant::now();
    loop {
        let items = db.db.housekeeping.hot_items(Duration::from_secs(600), 10).await.unwrap();
        let rows = items.iter().find(|h| h.item.as_str() == "hot").map_or(0, |h| h.pool_rows);
        if rows == want || start.elapsed() > Duration::from_secs(2) {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn batch_of(db: &TestDb, tag: &str, n: usize) {
    let reqs = (0..n).map(|i| request("s1", &format!("{tag}-{i}"), vec![line("hot", 1, None)])).collect();
    for answer in db.db.batches.reserve_batch(reqs).await {
        assert!(answer.unwrap().created);
    }
}

async fn a_half_empty_pool_is_refilled_ahead_of_need(b: Backend) {
    let db = TestDb::with_config(b, StoreConfig { pool_cap: CAP, ..StoreConfig::default() }).await;
    stock(&*db.store, "s1", "hot", "wh", 200).await;

    // The first batch finds the pool empty and refills it inline (20 rows),
    // then takes 12: more than half of the pool since that refill.
    batch_of(&db, "a", 12).await;
    assert_eq!(pool_rows_settle(&db, CAP as i64).await, CAP as i64, "refilled to the cap without another reserve");

    // 4 units since that refill: the pool is left as it is.
    batch_of(&db, "b", 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pool_rows_settle(&db, 16).await, 16, "a batch that takes less than half starts no refill");

    // 8 more make 12 since the last refill.
    batch_of(&db, "c", 8).await;
    assert_eq!(pool_rows_settle(&db, CAP as i64).await, CAP as i64);

    let levels = db.store.levels(&shop("s1"), &item("hot")).await.unwrap();
    let q = &levels.locations[0].quantities;
    assert_eq!((q.reserved, q.available), (24, 176));
    db.assert_audit_clean().await;
}

per_backend!(a_half_empty_pool_is_refilled_ahead_of_need: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
