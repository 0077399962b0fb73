//! Why not Redis: the legacy claim writes two systems, and a crash between
//! the two writes breaks the books in one direction or the other. The same
//! crash inside a holdfast claim (one SQL transaction) leaves nothing behind.

use std::time::Duration;

use holdfast_core::{Error, ReservationId, ReservationStatus, ReserveRequest, Store, Ttl};
use holdfast_redis::{ClaimOrder, InjectedFault, RedisStore};
use sqlx::Connection;

use crate::support::*;

fn one_unit(key: &str, ttl: u64) -> ReserveRequest {
    ReserveRequest::new(
        shop("s1"),
        key.parse().unwrap(),
        vec![line("tee", 1, None)],
        Ttl::from_secs(ttl as i64).unwrap(),
        false,
        false,
    )
    .unwrap()
}

/// Stocks 10 tees and holds one, for `ttl` seconds, for the buyer whose
/// claim the test then breaks.
async fn hold_for_the_victim(s: &dyn Store, ttl: u64) -> ReservationId {
    stock(s, "s1", "tee", "wh", 10).await;
    s.reserve(&one_unit("victim", ttl)).await.unwrap().reservation.id
}

/// Claims `id` with the legacy store's two writes in `order`, the process
/// dying between them: the buyer is told the store is unavailable.
async fn crash_between_claim_writes(s: &RedisStore, order: ClaimOrder, id: ReservationId) {
    s.set_claim_order(order);
    s.inject(InjectedFault::CrashBetweenClaimWrites);
    assert!(matches!(s.claim(&shop("s1"), id).await, Err(Error::Unavailable(_))));
}

/// Sells to buyers one by one until the store says sold out; returns how
/// many units were claimed.
async fn sell_until_sold_out(store: &dyn Store, tag: &str) -> u64 {
    let mut sold = 0;
    for n in 0.. {
        match store.reserve(&one_unit(&format!("{tag}-{n}"), 600)).await {
            Ok(r) => {
                store.claim(&shop("s1"), r.reservation.id).await.unwrap();
                sold += 1;
            }
            Err(Error::InsufficientStock(_)) => return sold,
            Err(e) => panic!("{e}"),
        }
    }
    unreachable!()
}

/// Ledger first, then Redis (the legacy order): the process dies after the
/// SQL ledger counted the sale but before Redis let go of the hold. The unit
/// is now counted twice, sold and held: anything that reads stock from the
/// books undersells it. Then the hold expires, the sweeper puts the unit
/// back on sale, and it is sold a second time: oversell.
#[tokio::test]
async fn legacy_claim_crash_after_ledger_write_undersells_then_oversells() {
    each_backend(|w| async move {
        let s = &*w.redis;
        let id = hold_for_the_victim(s, 1).await;
        crash_between_claim_writes(s, ClaimOrder::LedgerFirst, id).await;

        let report = s.audit(None).await.unwrap();
        assert!(!report.ok(), "the books already disagree");
        let row = &report.breaches[0];
        // on_hand 10, but available 9 + held 1 + committed 1 = 11.
        assert_eq!((row.on_hand, row.unpooled, row.reserved, row.committed), (10, 9, 1, 1));
        // 9 units are on the shelf; the books say 10 - 1 sold - 1 held = 8.
        assert_eq!(row.on_hand - row.committed - row.reserved, 8, "undersold by one while the hold lingers");

        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(s.expire(100).await.unwrap(), 1, "the sweeper returns the sold unit");
        let sold_after = sell_until_sold_out(s, "buyer").await;
        let q = qty(s, "s1", "tee", "wh").await;
        // 1 sold before the crash + 10 after = 11 units sold of 10 on hand.
        assert_eq!(sold_after, 10);
        assert_eq!((q.on_hand, q.committed, q.available), (10, 11, 0));
        assert_eq!(q.committed - q.on_hand, 1, "oversold: one unit sold twice");
        w
    })
    .await;
}

/// Redis first, then the ledger: the process dies after Redis dropped the
/// hold but before the ledger counted the sale. Sold, never deducted: the
/// ledger shows a unit in stock that left with the buyer, and the first
/// recount of the counter from the ledger puts it on sale again.
#[tokio::test]
async fn legacy_claim_crash_after_redis_write_loses_the_sale_and_oversells_on_recount() {
    each_backend(|w| async move {
        let s = &*w.redis;
        let id = hold_for_the_victim(s, 600).await;
        crash_between_claim_writes(s, ClaimOrder::RedisFirst, id).await;
        // The buyer retries: Redis says claimed, so the ledger is never fixed.
        assert_eq!(s.claim(&shop("s1"), id).await.unwrap().status, ReservationStatus::Claimed);

        let report = s.audit(None).await.unwrap();
        let row = &report.breaches[0];
        // on_hand 10, but available 9 + held 0 + committed 0 = 9.
        assert_eq!((row.on_hand, row.unpooled, row.reserved, row.committed), (10, 9, 0, 0));

        assert_eq!(sell_until_sold_out(s, "buyer").await, 9);
        let q = qty(s, "s1", "tee", "wh").await;
        // 10 units left with buyers; the books count 9 and one "in stock".
        assert_eq!((q.on_hand, q.committed, q.available, q.reserved), (10, 9, 0, 0));
        // The legacy nightly recount: counter := on_hand - committed - held.
        let client = redis::Client::open(w.redis.options().url.as_str()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let key = format!("{}avail/s1/tee/wh", w.redis.options().prefix);
        let _: () =
            redis::cmd("SET").arg(&key).arg(q.on_hand - q.committed - q.reserved).query_async(&mut c).await.unwrap();
        assert_eq!(sell_until_sold_out(s, "recount").await, 1);
        // Victim + 9 + 1 = 11 units sold of 10.
        assert_eq!(1 + 9 + 1 - q.on_hand, 1, "oversold: one unit sold twice");
        w
    })
    .await;
}

/// The same crash inside a holdfast claim: an error raised by the database
/// after the claim's first write aborts its one transaction, so nothing of
/// it is left; the hold is still held and claims cleanly afterwards.
#[tokio::test]
async fn sql_claim_failing_mid_transaction_leaves_everything_consistent() {
    each_backend(|w| async move {
        let s = &*w.sql;
        let id = hold_for_the_victim(s, 600).await;
        // The claim flips `reservations` and then `reserved_quantities` in
        // one transaction: fail on the second write.
        let crash_on: &[&str] = match w.backend {
            holdfast_core::Backend::Postgres => &[
                "CREATE FUNCTION hf_crash() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN RAISE EXCEPTION 'injected crash mid-claim'; END $$",
                "CREATE TRIGGER hf_crash AFTER UPDATE ON reserved_quantities FOR EACH ROW
                 WHEN (NEW.state = 'committed') EXECUTE FUNCTION hf_crash()",
            ],
            _ => &["CREATE TRIGGER hf_crash AFTER UPDATE ON reserved_quantities FOR EACH ROW
                    BEGIN IF NEW.state = 'committed' THEN
                      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected crash mid-claim';
                    END IF; END"],
        };
        w.test_db().exec(crash_on).await;
        let failed = s.claim(&shop("s1"), id).await;
        assert!(failed.is_err(), "the injected failure must reach the claim: {failed:?}");
        assert!(s.audit(None).await.unwrap().ok(), "no partial claim is left");
        assert_eq!(s.get(&shop("s1"), id).await.unwrap().status, ReservationStatus::Held);
        let q = qty(s, "s1", "tee", "wh").await;
        assert_eq!((q.available, q.reserved, q.committed), (9, 1, 0));

        let drop = match w.backend {
            holdfast_core::Backend::Postgres => "DROP TRIGGER hf_crash ON reserved_quantities",
            _ => "DROP TRIGGER hf_crash",
        };
        w.test_db().exec(&[drop]).await;
        assert_eq!(s.claim(&shop("s1"), id).await.unwrap().status, ReservationStatus::Claimed);
        assert_eq!(sell_until_sold_out(s, "buyer").await, 9);
        let q = qty(s, "s1", "tee", "wh").await;
        assert_eq!((q.on_hand, q.committed, q.available, q.reserved), (10, 10, 0, 0));
        assert!(s.audit(None).await.unwrap().ok());
        w
    })
    .await;
}

/// PostgreSQL: the connection itself dies in the middle of a claim's
/// transaction (the server kills the backend while the claim is between its
/// writes). The transaction never commits; the claim is retried or fails,
/// and either way the books hold and the unit is sold exactly once.
#[tokio::test]
async fn sql_claim_losing_its_connection_mid_transaction_leaves_everything_consistent() {
    let w = world(holdfast_core::Backend::Postgres, &shared_redis_url()).await;
    let s = w.sql.clone();
    let id = hold_for_the_victim(&*s, 600).await;
    // A fuse: only the first claim attempt stalls (sequences ignore rollback).
    w.test_db()
        .exec(&[
            "CREATE SEQUENCE hf_fuse",
            "CREATE FUNCTION hf_stall() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN IF nextval('hf_fuse') = 1 THEN PERFORM pg_sleep(30); END IF; RETURN NEW; END $$",
            "CREATE TRIGGER hf_stall AFTER UPDATE ON reserved_quantities FOR EACH ROW
             WHEN (NEW.state = 'committed') EXECUTE FUNCTION hf_stall()",
        ])
        .await;
    let claim = tokio::spawn({
        let s = s.clone();
        async move { s.claim(&shop("s1"), id).await }
    });
    let mut admin = sqlx::PgConnection::connect(&w.url).await.unwrap();
    let mut killed = false;
    for _ in 0..500 {
        let n: Option<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event = 'PgSleep' LIMIT 1",
        )
        .fetch_optional(&mut admin)
        .await
        .unwrap();
        if n == Some(true) {
            killed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(killed, "the claim never reached the stalled write");
    let first = claim.await.unwrap();
    // Retried on a fresh connection, or failed as unavailable: both are fine;
    // what matters is that the books hold and a repeat settles it once.
    assert!(matches!(first, Ok(_) | Err(Error::Unavailable(_)) | Err(Error::RetriesExhausted(_))), "{first:?}");
    assert!(s.audit(None).await.unwrap().ok());
    assert_eq!(s.claim(&shop("s1"), id).await.unwrap().status, ReservationStatus::Claimed);
    let q = qty(&*s, "s1", "tee", "wh").await;
    assert_eq!((q.on_hand, q.committed, q.available, q.reserved), (10, 1, 9, 0));
    assert!(s.audit(None).await.unwrap().ok());
    drop(w);
}
