//! The sweeper's backlog reading (`holdfast_expired_holds_unswept`,
//! `holdfast_oldest_unswept_hold_seconds`) on every dialect: holds past
//! their expiry that no sweep has released are counted, with how long ago
//! the oldest expired; live, claimed and released holds are not; after a
//! drain nothing is left.

use std::time::Duration;

use holdfast_core::{Backend, ReserveRequest, Ttl, Unswept};
use holdfast_sql::{StoreConfig, Sweeper};
use holdfast_testkit::per_backend;
use holdfast_testkit::*;

fn with_ttl(k: &str, ttl_secs: i64) -> ReserveRequest {
    let lines = vec![line("a", 1, None)];
    ReserveRequest::new(shop("s1"), key(k), lines, Ttl::from_secs(ttl_secs).unwrap(), false, false).unwrap()
}

async fn the_sweeper_reads_holds_past_expiry(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let store = db.store.clone();
        stock(&*store, "s1", "a", "wh", 50).await;
        let sweeper = Sweeper::new(store.clone(), 500);
        assert_eq!(sweeper.measure().await.unwrap(), Some(Unswept::default()), "nothing held yet");

        store.reserve(&with_ttl("live", 600)).await.unwrap();
        let claimed = store.reserve(&with_ttl("claimed", 3)).await.unwrap().reservation.id;
        store.claim(&shop("s1"), claimed).await.unwrap();
        let released = store.reserve(&with_ttl("released", 3)).await.unwrap().reservation.id;
        store.release(&shop("s1"), released).await.unwrap();
        for k in ["x", "y", "z"] {
            store.reserve(&with_ttl(k, 3)).await.unwrap();
        }
        assert_eq!(sweeper.measure().await.unwrap(), Some(Unswept::default()), "none past expiry yet");

        tokio::time::sleep(Duration::from_millis(3_600)).await;
        let u = sweeper.measure().await.unwrap().expect("a SQL store reads its backlog");
        assert_eq!(u.holds, 3, "{u:?}");
        assert!(u.oldest >= Duration::from_millis(300) && u.oldest < Duration::from_secs(30), "{u:?}");

        assert_eq!(sweeper.drain().await.unwrap(), 3);
        assert_eq!(sweeper.measure().await.unwrap(), Some(Unswept::default()), "a drain leaves nothing past expiry");
    })
    .await;
}

per_backend!(the_sweeper_reads_holds_past_expiry: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
