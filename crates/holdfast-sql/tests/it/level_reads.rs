//! A level read answers for one moment. A hold is judged expired by the
//! database's clock, and the clock is read a little apart from the
//! statement's snapshot; a hold that expires in between would be counted
//! expired while changes committed after its expiry are missing, an answer
//! no single moment gives. The read says so (`unsettled`), and the store
//! reads again: on every dialect.

use std::time::Duration;

use holdfast_core::{Backend, ItemLevels, Ttl};
use holdfast_testkit::*;

fn at<'a>(levels: &'a [holdfast_core::LocationLevel], loc: &str) -> &'a holdfast_core::Quantities {
    &levels.iter().find(|l| l.location.as_str() == loc).expect("the location is read").quantities
}

async fn a_hold_expiring_around_the_snapshot_unsettles_the_read(b: Backend) {
    let db = TestDb::new(b).await;
    let (s, a) = (shop("s1"), item("a"));
    stock(&*db.store, "s1", "a", "wh", 10).await;
    stock(&*db.store, "s1", "a", "far", 5).await;
    let req = request("s1", "short", vec![line("a", 2, Some(&["wh"]))]).with_ttl(Ttl::from_secs(3).unwrap());
    let expires_at = db.store.reserve(&req).await.unwrap().reservation.expires_at;

    // Nothing expires while the snapshot is open: both reads are settled.
    let [first, second] = db.db.batches.levels_twice(&s, &a, Duration::from_millis(50)).await.unwrap();
    assert!(!first.1 && !second.1, "no hold expired around the snapshot: {first:?} {second:?}");
    assert_eq!(first.0, second.0);
    assert_eq!(at(&first.0, "wh").reserved, 2);

    // The hold expires while a snapshot is open, and a stock change commits
    // after that. The snapshot's second read, made after the expiry, cannot
    // see the change.
    let batches = db.db.batches.clone();
    let (s2, a2) = (s.clone(), a.clone());
    let left = (expires_at - chrono::Utc::now()).to_std().unwrap_or_default();
    let open = tokio::spawn(async move { batches.levels_twice(&s2, &a2, left + Duration::from_millis(800)).await });
    tokio::time::sleep(left + Duration::from_millis(300)).await;
    stock(&*db.store, "s1", "a", "far", 7).await;
    let [first, second] = open.await.unwrap().unwrap();
    assert!(!first.1, "the first read came before the expiry: {first:?}");
    assert_eq!(at(&first.0, "wh").reserved, 2);
    assert_eq!(at(&second.0, "far").on_hand, 5, "one snapshot: the change is not seen");
    assert!(second.1, "the hold expired after the snapshot was taken: the read is unsettled: {second:?}");

    // A read made now is settled: the hold has expired and the change is in.
    let ItemLevels { locations, .. } = db.store.levels(&s, &a).await.unwrap();
    assert_eq!((at(&locations, "wh").reserved, at(&locations, "wh").available), (0, 10));
    assert_eq!(at(&locations, "far").on_hand, 7);
    db.assert_audit_clean().await;
}

per_backend!(a_hold_expiring_around_the_snapshot_unsettles_the_read:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);
