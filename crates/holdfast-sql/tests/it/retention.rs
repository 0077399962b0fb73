//! Retention on every dialect: finished reservations older than the period
//! go, with their lines, while buyers keep reserving and claiming and four
//! purgers run at once; live holds, recent finished ones, the quantities and
//! the audit are untouched; a removed reservation's key is free again.

use std::collections::BTreeMap;
use std::time::Duration;

use holdfast_core::{Backend, Error, ReservationStatus, ReserveRequest, StockChange, Store, Ttl};
use holdfast_sql::StoreConfig;
use holdfast_testkit::per_backend;
use holdfast_testkit::*;

fn with_ttl(k: &str, qty: i64, ttl_secs: i64) -> ReserveRequest {
    let lines = vec![line("a", qty, None)];
    ReserveRequest::new(shop("s1"), key(k), lines, Ttl::from_secs(ttl_secs).unwrap(), false, false).unwrap()
}

/// Every (item, location) of s1 as (on_hand, available, reserved, committed).
async fn books(store: &dyn Store) -> BTreeMap<String, (i64, i64, i64, i64)> {
    let mut out = BTreeMap::new();
    for i in ["a", "b"] {
        for l in store.levels(&shop("s1"), &item(i)).await.unwrap().locations {
            let q = l.quantities;
            out.insert(format!("{i}@{}", l.location), (q.on_hand, q.available, q.reserved, q.committed));
        }
    }
    out
}

/// Runs `n` purgers at once until they find nothing; the total they removed.
async fn purge_all(store: &std::sync::Arc<dyn Store>, older_than: Duration, n: usize) -> u64 {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut total = 0;
                loop {
                    let got = store.purge(older_than, 7).await.expect("purge");
                    total += got;
                    if got == 0 {
                        return total;
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}

async fn retention_removes_finished_reservations_only(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let store = db.store.clone();
        stock(&*store, "s1", "a", "wh", 200).await;
        stock(&*store, "s1", "a", "east", 100).await;
        stock(&*store, "s1", "b", "wh", 50).await;

        // 60 buyers at once: a third claim, a third release, a third keep
        // their hold; 10 more holds lapse (1 s) and are swept.
        let mut tasks = Vec::new();
        for n in 0..70u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let ttl = if n >= 60 { 1 } else { 600 };
                let r = store.reserve(&with_ttl(&format!("old-{n}"), 1 + (n % 3) as i64, ttl)).await.unwrap();
                let id = r.reservation.id;
                match n % 3 {
                    _ if n >= 60 => {}
                    0 => assert_eq!(store.claim(&shop("s1"), id).await.unwrap().status, ReservationStatus::Claimed),
                    1 => assert_eq!(store.release(&shop("s1"), id).await.unwrap().status, ReservationStatus::Released),
                    _ => {}
                }
                (n, id)
            }));
        }
        let mut old = BTreeMap::new();
        for t in tasks {
            let (n, id) = t.await.unwrap();
            old.insert(n, id);
        }
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        while store.expire(100).await.unwrap() > 0 {}

        // Refills during the sale folded some of the claimed and returned
        // units into the ledger, not all: a purge folds the rest first (a
        // refill of each such location), then removes. No quantity may move
        // (deleting an unfolded line would).
        let retention = Duration::from_secs(1);
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let before = books(&*store).await;
        let early = store.purge(retention, 1_000).await.unwrap();
        assert_eq!(books(&*store).await, before, "retention moves no quantity");
        db.assert_audit_clean().await;

        // A stock change folds each location's claimed and returned units
        // (none are left) and moves nothing.
        for (i, l, n) in [("a", "wh", 200), ("a", "east", 100), ("b", "wh", 50)] {
            let q = qty(&*store, "s1", i, l).await;
            change(&*store, "s1", i, l, StockChange::Set(q.on_hand)).await.unwrap();
            assert_eq!(q.on_hand, n);
        }
        let folded = books(&*store).await;
        assert_eq!(folded, before, "folding moves no quantity");
        tokio::time::sleep(Duration::from_millis(1_100)).await;

        // New business while four purgers run: fresh finished reservations,
        // younger than the retention period, must stay.
        let fresh = {
            let store = store.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for n in 0..20u32 {
                    let r = store.reserve(&with_ttl(&format!("new-{n}"), 1, 600)).await.unwrap().reservation;
                    if n % 2 == 0 {
                        store.claim(&shop("s1"), r.id).await.unwrap();
                    } else {
                        store.release(&shop("s1"), r.id).await.unwrap();
                    }
                    ids.push(r.id);
                }
                ids
            })
        };
        let purged = purge_all(&store, retention, 4).await;
        let fresh = fresh.await.unwrap();
        let finished: Vec<u32> = old.keys().copied().filter(|&n| n >= 60 || n % 3 != 2).collect();
        assert_eq!(early + purged, finished.len() as u64, "each old finished reservation removed exactly once");

        for (&n, &id) in &old {
            let got = store.get(&shop("s1"), id).await;
            if finished.contains(&n) {
                assert!(matches!(got, Err(Error::NotFound)), "old-{n} should be gone: {got:?}");
            } else {
                assert_eq!(got.unwrap().status, ReservationStatus::Held, "old-{n} is live");
                // Its idempotency is untouched: a replay is the same hold.
                let again = store.reserve(&with_ttl(&format!("old-{n}"), 1 + (n % 3) as i64, 600)).await.unwrap();
                assert!(!again.created && again.reservation.id == id, "old-{n} replay");
            }
        }
        // Folded, finished, but younger than the period: they stay.
        for (i, l) in [("a", "wh"), ("a", "east")] {
            let q = qty(&*store, "s1", i, l).await;
            change(&*store, "s1", i, l, StockChange::Set(q.on_hand)).await.unwrap();
        }
        assert_eq!(store.purge(Duration::from_secs(60), 1_000).await.unwrap(), 0);
        for id in &fresh {
            assert!(store.get(&shop("s1"), *id).await.is_ok(), "a reservation younger than the period stays");
        }
        // A key whose reservation was removed is free: the same request is a
        // new reservation, with a new id.
        let again = store.reserve(&with_ttl("old-0", 1, 600)).await.unwrap();
        assert!(again.created, "a removed reservation's key makes a new one");
        assert!(again.reservation.id.get() > fresh.iter().map(|i| i.get()).max().unwrap(), "ids are never reused");
        store.release(&shop("s1"), again.reservation.id).await.unwrap();

        // The books: the fresh sales moved 10 units to committed; nothing else changed.
        let mut expected = folded.clone();
        let after = books(&*store).await;
        let sold_now: i64 = after.values().map(|q| q.3).sum::<i64>() - folded.values().map(|q| q.3).sum::<i64>();
        assert_eq!(sold_now, 10, "{after:?}");
        for (k, q) in &after {
            let e = expected.remove(k).unwrap();
            assert_eq!((q.0, q.2), (e.0, e.2), "{k}: on_hand and reserved unchanged by retention");
        }
        db.assert_audit_clean().await;
    })
    .await;
}

per_backend!(retention_removes_finished_reservations_only: postgres => Postgres, mysql => MySql, sqlite => Sqlite);

/// What a long run reads besides the books: the four tables by size, and
/// the server's clean-up where it has one.
async fn table_sizes_and_server_state(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "a", "wh", 50).await;
        db.store.reserve(&request("s1", "k", vec![line("a", 3, None)])).await.unwrap();
        let sizes = db.db.housekeeping.table_sizes().await.unwrap();
        let names: Vec<&str> = sizes.iter().map(|t| t.table.as_str()).collect();
        assert_eq!(names, ["inventory_levels", "reservation_units", "reservations", "reserved_quantities"]);
        assert!(sizes.iter().all(|t| t.bytes > 0), "{sizes:?}");
        let state = db.db.housekeeping.server_state().await.unwrap();
        match b {
            Backend::Postgres => assert!(state.autovacuum.is_some() && state.history_list_length.is_none()),
            Backend::MySql => assert!(state.autovacuum.is_none() && state.history_list_length.is_some()),
            Backend::Sqlite => assert_eq!((state.autovacuum, state.history_list_length), (None, None)),
        }
    })
    .await;
}

per_backend!(table_sizes_and_server_state: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
