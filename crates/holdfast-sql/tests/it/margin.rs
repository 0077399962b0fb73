//! A reserve that would pass over a candidate location whose only hold
//! expires within the commit margin (250 ms) waits for that expiry, holding
//! nothing, and then takes the freed unit in candidate order: on every
//! dialect.

use std::time::{Duration, Instant};

use holdfast_core::{Backend, Ttl};
use holdfast_testkit::*;

async fn a_reserve_waits_for_a_hold_about_to_expire_at_its_first_candidate(b: Backend) {
    let db = TestDb::new(b).await;
    stock(&*db.store, "s1", "a", "wh", 1).await;
    stock(&*db.store, "s1", "a", "far", 5).await;
    let first = request("s1", "first", vec![line("a", 1, Some(&["wh"]))]).with_ttl(Ttl::from_secs(2).unwrap());
    let expires_at = db.store.reserve(&first).await.unwrap().reservation.expires_at;

    // 150 ms before the hold at `wh` expires.
    let until = (expires_at - chrono::Utc::now() - chrono::Duration::milliseconds(150)).to_std().unwrap_or_default();
    tokio::time::sleep(until).await;
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
