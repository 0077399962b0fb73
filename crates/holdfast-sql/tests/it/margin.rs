//! A reserve that will commit a hold while it found a candidate location
//! short looks ahead there for holds about to expire (`in_flight.sql`): it
//! counts units, not holds, and only as many as would change its answer; it
//! waits for such holds when they expire within its commit window, holding
//! nothing, and then takes the freed units in candidate order: on every
//! dialect.

use std::time::{Duration, Instant};

use holdfast_core::{Backend, Ttl};
use holdfast_testkit::*;

/// The look-ahead's read, against holds whose expiries are seconds apart, so
/// that how long the test itself takes does not matter.
async fn the_look_ahead_counts_units_and_says_when_enough_of_them_expire(b: Backend) {
    let db = TestDb::new(b).await;
    let (s, a, wh) = (shop("s1"), item("a"), loc("wh"));
    stock(&*db.store, "s1", "a", "wh", 7).await;
    let hold = |key: &str, qty: i64, secs: i64| {
        request("s1", key, vec![line("a", qty, Some(&["wh"]))]).with_ttl(Ttl::from_secs(secs).unwrap())
    };
    // Every unit held: no free pool row is left to count.
    let lapsed = db.store.reserve(&hold("lapsed", 1, 1)).await.unwrap().reservation;
    let released = db.store.reserve(&hold("released", 1, 60)).await.unwrap().reservation;
    let soon = db.store.reserve(&hold("soon", 2, 20)).await.unwrap().reservation;
    db.store.reserve(&hold("later", 3, 40)).await.unwrap();
    db.store.release(&s, released.id).await.unwrap();
    let left = (lapsed.expires_at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(200)).await;

    let look = |lookahead: u64, matters: u32| {
        let (batches, s, a, wh) = (db.db.batches.clone(), s.clone(), a.clone(), wh.clone());
        async move { batches.in_flight(&s, (&a, &wh), Duration::from_secs(lookahead), matters).await.unwrap() }
    };
    // In flight now: the lapsed hold's unit (no sweeper runs here) and the
    // released one (not folded into the ledger row yet).
    let (n, wait) = look(0, 1).await;
    assert_eq!((n, wait), (2, None), "a refusal looks at now only");
    let to_soon = (soon.expires_at - chrono::Utc::now()).to_std().unwrap();
    let near = |w: Option<Duration>, expiry: Duration| {
        let w = w.expect("the holds in the look-ahead are enough");
        assert!(w <= expiry + Duration::from_millis(50) && w + Duration::from_secs(5) > expiry, "{w:?} vs {expiry:?}");
    };
    // 2 in flight + 2 of `soon` reach 3 and 4 at its expiry.
    near(look(60, 3).await.1, to_soon);
    near(look(60, 4).await.1, to_soon);
    // 5 only with `later`, 20 s after `soon`.
    near(look(60, 5).await.1, to_soon + Duration::from_secs(20));
    near(look(60, 7).await.1, to_soon + Duration::from_secs(20));
    // Not within 30 s, and not with every hold.
    assert_eq!(look(30, 5).await, (2, None));
    assert_eq!(look(60, 8).await, (2, None));
    db.assert_audit_clean().await;
}

per_backend!(the_look_ahead_counts_units_and_says_when_enough_of_them_expire:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);

/// One unit at `wh` and five at `far`; the unit at `wh` held for 2 s, and
/// the caller woken 100 ms before that hold expires (its expiry returned).
async fn one_unit_at_wh_held_until_100ms_before_it_expires(b: Backend) -> (TestDb, chrono::DateTime<chrono::Utc>) {
    let db = TestDb::new(b).await;
    stock(&*db.store, "s1", "a", "wh", 1).await;
    stock(&*db.store, "s1", "a", "far", 5).await;
    let first = request("s1", "first", vec![line("a", 1, Some(&["wh"]))]).with_ttl(Ttl::from_secs(2).unwrap());
    let expires_at = db.store.reserve(&first).await.unwrap().reservation.expires_at;
    let until = (expires_at - chrono::Utc::now() - chrono::Duration::milliseconds(100)).to_std().unwrap_or_default();
    tokio::time::sleep(until).await;
    (db, expires_at)
}

async fn a_reserve_waits_for_a_hold_about_to_expire_at_its_first_candidate(b: Backend) {
    let (db, expires_at) = one_unit_at_wh_held_until_100ms_before_it_expires(b).await;
    // Within the commit window, or (on a slow machine) expired by the time
    // the reserve looks: either way the unit at `wh` is the answer.
    let (started, retries) = (Instant::now(), db.store.stats().retries);
    let second = db.store.reserve(&request("s1", "second", vec![line("a", 1, Some(&["wh", "far"]))])).await.unwrap();
    let took = started.elapsed();
    // Once asleep until the expiry, then the unit: not a retry every few
    // milliseconds.
    let retried = db.store.stats().retries - retries;
    assert!(retried <= 2, "{retried} retries while a hold expired");

    let at: Vec<_> = second.reservation.lines.iter().map(|l| l.location.to_string()).collect();
    assert_eq!(at, ["wh"], "the first candidate's unit, free once the hold expired");
    assert!(chrono::Utc::now() >= expires_at, "answered after the expiry");
    assert!(took < Duration::from_secs(2), "it waited for the expiry, not much longer: {took:?}");
    db.assert_audit_clean().await;
}

per_backend!(a_reserve_waits_for_a_hold_about_to_expire_at_its_first_candidate:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);

/// A 1-unit hold about to expire cannot make a 2-unit line fit where it had
/// nothing: the reserve passes over that candidate without waiting for it.
async fn a_hold_too_small_to_fill_the_line_is_not_waited_for(b: Backend) {
    let (db, _) = one_unit_at_wh_held_until_100ms_before_it_expires(b).await;
    let retries = db.store.stats().retries;
    let second = db.store.reserve(&request("s1", "second", vec![line("a", 2, Some(&["wh", "far"]))])).await.unwrap();
    let at: Vec<_> = second.reservation.lines.iter().map(|l| (l.location.to_string(), l.quantity)).collect();
    assert_eq!(at, [("far".to_string(), 2)], "`wh` can never fill the line");
    assert_eq!(db.store.stats().retries - retries, 0, "nothing that matters was in flight");
    db.assert_audit_clean().await;
}

per_backend!(a_hold_too_small_to_fill_the_line_is_not_waited_for:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);
