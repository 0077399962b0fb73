//! Redis stopped and restarted under load (a redis-server of the test's
//! own, never the shared one): `sql` shops never notice, `sql-primary`
//! shops keep serving from SQL with the Redis writes counted as errors,
//! `redis` and `shadow` shops (Redis decides) get `unavailable` (503) until
//! Redis is back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use holdfast_core::{Backend, Error, Store};
use holdfast_redis::{Mode, ModeChange};
use tokio::sync::Mutex;

use crate::support::*;

#[derive(Debug, Default, Clone, Copy)]
struct Outcomes {
    held: u64,
    refused: u64,
    unavailable: u64,
    other: u64,
}

/// Phases of the run. An answer is counted under the phase it started and
/// ended in; one whose phase changed while it was in flight (Redis stopped
/// or started under it) is counted under `STRADDLED`. The transitional
/// phases and `STRADDLED` are only checked for "sql and sql-primary never
/// fail".
const UP: usize = 0;
const STOPPING: usize = 1;
const DOWN: usize = 2;
const RESTARTING: usize = 3;
/// Redis is running again; the client has not answered through it yet.
const RECOVERING: usize = 4;
const BACK: usize = 5;
const STRADDLED: usize = 6;
const PHASES: [&str; 7] = ["up", "stopping", "down", "restarting", "recovering", "back", "straddled"];

type Seen = Arc<Mutex<BTreeMap<(&'static str, usize), Outcomes>>>;

/// Waits until `done` holds for what was seen, at most `limit`.
async fn wait_for(seen: &Seen, limit: Duration, what: &str, done: impl Fn(&dyn Fn(&str, usize) -> Outcomes) -> bool) {
    let started = Instant::now();
    loop {
        {
            let seen = seen.lock().await;
            let get = |s: &str, p: usize| {
                seen.iter().find(|((k, q), _)| *k == s && *q == p).map(|(_, o)| *o).unwrap_or_default()
            };
            if done(&get) {
                return;
            }
            assert!(started.elapsed() < limit, "{what}: not after {limit:?}: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn redis_stopped_and_restarted_during_load() {
    let mut own = OwnRedis::start();
    let w = world(Backend::Postgres, &own.url()).await;
    let shops =
        [("f-sql", Mode::Sql), ("f-primary", Mode::SqlPrimary), ("f-redis", Mode::Redis), ("f-shadow", Mode::Shadow)];
    for (s, m) in shops {
        w.control.apply(&ModeChange::Shop { shop: shop(s), mode: Some(m) }).await.unwrap();
        stock(&*w.router, s, "hot", "wh", 100_000).await;
    }
    let phase = Arc::new(std::sync::atomic::AtomicUsize::new(UP));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Seen = Arc::default();
    let mut tasks = Vec::new();
    for (s, _) in shops {
        for t in 0..2 {
            let (router, phase, stop, seen) = (w.router.clone(), phase.clone(), stop.clone(), seen.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let began = phase.load(Ordering::SeqCst);
                    let answer = router.reserve(&request(s, &format!("t{t}-{n}"), vec![line("hot", 1, None)])).await;
                    let answer = match answer {
                        Ok(r) => router.claim(&shop(s), r.reservation.id).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    let ended = phase.load(Ordering::SeqCst);
                    let p = if began == ended { began } else { STRADDLED };
                    let mut seen = seen.lock().await;
                    let o = seen.entry((s, p)).or_default();
                    match answer {
                        Ok(()) => o.held += 1,
                        Err(Error::InsufficientStock(_)) => o.refused += 1,
                        Err(Error::Unavailable(_)) => o.unavailable += 1,
                        Err(e) => {
                            eprintln!("{s}: {e}");
                            o.other += 1
                        }
                    }
                    drop(seen);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
    }
    // Each phase lasts at least as long as it used to, and until every shop
    // has answers in it, however slow the machine: a phase that ended on
    // the clock alone could hold too few answers to show anything.
    let limit = Duration::from_secs(60);
    let enough = 5;
    tokio::time::sleep(Duration::from_millis(800)).await;
    wait_for(&seen, limit, "holds in every shop before the stop", |get| {
        shops.iter().all(|(s, _)| get(s, UP).held >= enough)
    })
    .await;

    phase.store(STOPPING, Ordering::SeqCst);
    own.stop();
    phase.store(DOWN, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    wait_for(&seen, limit, "answers in every shop while Redis is down", |get| {
        get("f-sql", DOWN).held >= enough
            && get("f-primary", DOWN).held >= enough
            && get("f-redis", DOWN).unavailable >= enough
            && get("f-shadow", DOWN).unavailable >= enough
    })
    .await;

    phase.store(RESTARTING, Ordering::SeqCst);
    own.restart();
    let restarted = Instant::now();
    phase.store(RECOVERING, Ordering::SeqCst);
    // The ConnectionManager reconnects on its own (after the breaker's half
    // second): "back" starts once Redis has answered, not after a guess.
    wait_for(&seen, Duration::from_secs(20), "Redis answering again after its restart", |get| {
        ["f-redis", "f-shadow"].iter().all(|s| {
            let o = get(s, RECOVERING);
            o.held + o.refused > 0
        })
    })
    .await;
    println!("Redis answered again {:?} after its restart", restarted.elapsed());
    phase.store(BACK, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(800)).await;
    wait_for(&seen, limit, "answers in every shop after the restart", |get| {
        shops.iter().all(|(s, _)| {
            let o = get(s, BACK);
            o.held + o.refused + o.unavailable + o.other >= enough
        })
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().await;
    for ((s, p), o) in seen.iter() {
        println!("{s} {}: {o:?}", PHASES[*p]);
    }
    let get = |s: &'static str, p: usize| seen.get(&(s, p)).copied().unwrap_or_default();
    for p in [UP, DOWN, BACK] {
        // sql: never affected; sql-primary: SQL decides, Redis failures are
        // only counted. Both answer in every phase.
        for s in ["f-sql", "f-primary"] {
            assert!(get(s, p).held > 0, "{s} {}: {:?}", PHASES[p], get(s, p));
        }
    }
    // Neither ever fails, not even across a stop or a start.
    for ((s, p), o) in seen.iter().filter(|((s, _), _)| ["f-sql", "f-primary"].contains(s)) {
        assert!(o.unavailable + o.other + o.refused == 0, "{s} {}: {o:?}", PHASES[*p]);
    }
    for s in ["f-redis", "f-shadow"] {
        assert!(get(s, UP).held > 0, "{s} before");
        let down = get(s, DOWN);
        assert!(down.unavailable > 0 && down.other == 0 && down.held == 0, "{s} down: {down:?}");
        // Redis keeps nothing on disk here: it came back empty, so the shop
        // answers again (no more 503) but has no counters until reconciled.
        let back = get(s, BACK);
        assert!(back.unavailable == 0 && back.other == 0, "{s} back: {back:?}");
    }
    assert!(w.router.shadow_counts().mirror_errors > 0, "{:?}", w.router.shadow_counts());
    assert!(w.sql.audit(None).await.unwrap().ok());
    drop(seen);
    drop(w);
}

/// sql-primary mirrors a SQL claim into the legacy books with two writes:
/// the Redis hold is settled, then the units are added to the ledger's
/// `committed`. A caller that gives up between the two (a request timeout)
/// must not leave the units out of both. The ledger row is kept locked so
/// that the second write cannot land before the caller's timeout: the
/// caller is always dropped after the first write and before the second.
#[tokio::test]
async fn a_mirrored_claim_whose_caller_gives_up_still_lands_in_both_books() {
    use sqlx::Connection;

    let w = world(Backend::Postgres, &shared_redis_url()).await;
    let s = shop("s1");
    stock(&*w.redis, "s1", "tee", "wh", 10).await;
    let id = w.redis.reserve(&request("s1", "gives-up", vec![line("tee", 1, None)])).await.unwrap().reservation.id;

    let mut locker = sqlx::PgConnection::connect(&w.url).await.unwrap();
    let mut lock = locker.begin().await.unwrap();
    sqlx::query("SELECT committed FROM legacy_ledger WHERE shop_id = 's1' AND item_id = 'tee' FOR UPDATE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(300), w.redis.mirror_settle(&s, id, "claim", None)).await;
    assert!(gave_up.is_err(), "the ledger write cannot finish while its row is locked: {gave_up:?}");
    assert_eq!(w.redis.get(&s, id).await.unwrap().status, holdfast_core::ReservationStatus::Claimed);
    lock.rollback().await.unwrap();

    // The ledger write finishes on its own once the row is free.
    let started = Instant::now();
    let q = loop {
        let q = qty(&*w.redis, "s1", "tee", "wh").await;
        if q.committed == 1 || started.elapsed() > Duration::from_secs(5) {
            break q;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((q.on_hand, q.available, q.reserved, q.committed), (10, 9, 0, 1));
    assert!(w.redis.audit(None).await.unwrap().ok());
}
