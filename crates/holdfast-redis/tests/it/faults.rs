//! Redis stopped and restarted under load (a redis-server of the test's
//! own, never the shared one): `sql` shops never notice, `sql-primary`
//! shops keep serving from SQL with the Redis writes counted as errors,
//! `redis` and `shadow` shops (Redis decides) get `unavailable` (503) until
//! Redis is back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
    // phase 0: Redis up, 1: Redis down, 2: Redis back.
    let phase = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<BTreeMap<(&str, usize), Outcomes>>> = Arc::default();
    let mut tasks = Vec::new();
    for (s, _) in shops {
        for t in 0..2 {
            let (router, phase, stop, seen) = (w.router.clone(), phase.clone(), stop.clone(), seen.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let p = phase.load(Ordering::Relaxed);
                    let answer = router.reserve(&request(s, &format!("t{t}-{n}"), vec![line("hot", 1, None)])).await;
                    let answer = match answer {
                        Ok(r) => router.claim(&shop(s), r.reservation.id).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
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
    tokio::time::sleep(Duration::from_millis(800)).await;
    own.stop();
    phase.store(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    own.restart();
    // The ConnectionManager reconnects on its own; give it a moment before
    // counting answers as "after the restart".
    tokio::time::sleep(Duration::from_millis(700)).await;
    phase.store(2, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().await;
    for ((s, p), o) in seen.iter() {
        println!("{s} phase {p}: {o:?}");
    }
    let get = |s: &'static str, p: usize| seen.get(&(s, p)).copied().unwrap_or_default();
    for p in 0..3 {
        // sql: never affected.
        let o = get("f-sql", p);
        assert!(o.held > 0 && o.unavailable + o.other + o.refused == 0, "f-sql phase {p}: {o:?}");
        // sql-primary: SQL decides, Redis failures are only counted.
        let o = get("f-primary", p);
        assert!(o.held > 0 && o.unavailable + o.other + o.refused == 0, "f-primary phase {p}: {o:?}");
    }
    for s in ["f-redis", "f-shadow"] {
        assert!(get(s, 0).held > 0, "{s} before");
        let down = get(s, 1);
        assert!(down.unavailable > 0 && down.other == 0 && down.held == 0, "{s} down: {down:?}");
        // Redis keeps nothing on disk here: it came back empty, so the shop
        // answers again (no more 503) but has no counters until reconciled.
        let back = get(s, 2);
        assert!(back.unavailable == 0 && back.other == 0, "{s} back: {back:?}");
    }
    assert!(w.router.shadow_counts().mirror_errors > 0, "{:?}", w.router.shadow_counts());
    assert!(w.sql.audit(None).await.unwrap().ok());
    drop(seen);
    finish(w).await;
}
