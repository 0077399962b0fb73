//! Modes end to end: a flash sale in each mode, shadow comparisons with one
//! client and under concurrency, the kill switch flipped mid-sale by another
//! process, and rules reaching every process within a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use holdfast_core::{Error, Store};
use holdfast_redis::{Mode, ModeChange, ModeControl, ModeRouter, Rules, is_redis_id};
use rand::Rng;

use crate::support::*;

#[derive(Debug, Default)]
struct Tally {
    sold: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    sql_holds: AtomicU64,
    redis_holds: AtomicU64,
    /// Micros since the sale started at which the last request that SQL
    /// held was sent (the router picks the store when the request arrives;
    /// how long SQL then takes is not the router's following).
    last_sql_hold_us: AtomicU64,
}

/// `buyers` tasks, each making `tries` checkouts of one unit: claim 80%,
/// release 20%. Then single buyers until the primary says sold out, so
/// units released late are sold too (zero undersell means every unit sells).
async fn flash_sale(router: Arc<ModeRouter>, s: &'static str, buyers: usize, tries: usize) -> Arc<Tally> {
    flash_sale_on(vec![router], s, buyers, tries).await
}

/// The same sale served by several processes (routers), buyer b on router
/// b mod n.
async fn flash_sale_on(routers: Vec<Arc<ModeRouter>>, s: &'static str, buyers: usize, tries: usize) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    paced_sale(routers, s, buyers, tries, Duration::ZERO, tally.clone()).await;
    tally
}

/// The sale itself, counted into `tally` (which the caller may watch while
/// it runs); each buyer pauses `pause` between checkouts.
async fn paced_sale(
    routers: Vec<Arc<ModeRouter>>,
    s: &'static str,
    buyers: usize,
    tries: usize,
    pause: Duration,
    tally: Arc<Tally>,
) {
    let router = routers[0].clone();
    let started = Instant::now();
    let tasks: Vec<_> = (0..buyers)
        .map(|b| {
            let (router, tally) = (routers[b % routers.len()].clone(), tally.clone());
            tokio::spawn(async move {
                for t in 0..tries {
                    checkout(&*router, s, &format!("b{b}-{t}"), &tally, started).await;
                    tokio::time::sleep(pause).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut n = 0;
    loop {
        n += 1;
        let before = tally.refused.load(Ordering::Relaxed);
        checkout(&*router, s, &format!("late-{n}"), &tally, started).await;
        if tally.refused.load(Ordering::Relaxed) > before {
            break;
        }
    }
}

async fn checkout(store: &dyn Store, s: &str, key: &str, tally: &Tally, started: Instant) {
    let sent = started.elapsed();
    match store.reserve(&request(s, key, vec![line("hot", 1, None)])).await {
        Ok(r) => {
            let id = r.reservation.id;
            if is_redis_id(id) {
                tally.redis_holds.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.sql_holds.fetch_add(1, Ordering::Relaxed);
                tally.last_sql_hold_us.fetch_max(sent.as_micros() as u64, Ordering::Relaxed);
            }
            let pay = rand::thread_rng().gen_bool(0.8);
            let done = if pay { store.claim(&shop(s), id).await } else { store.release(&shop(s), id).await };
            match done {
                Ok(_) if pay => {
                    tally.sold.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("settle failed: {e}");
                    tally.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(Error::InsufficientStock(_)) => {
            tally.refused.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            eprintln!("reserve failed: {e}");
            tally.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn pin(w: &World, s: &str, mode: Mode) {
    w.control.apply(&ModeChange::Shop { shop: shop(s), mode: Some(mode) }).await.unwrap();
}

/// Each store's own books of shop `s` balance, whichever of them decided
/// and in whatever order the other saw the requests.
async fn assert_both_books_whole(w: &World, s: &str) {
    assert!(w.redis.audit(Some(&shop(s))).await.unwrap().ok(), "{s}: redis books");
    assert!(w.sql.audit(Some(&shop(s))).await.unwrap().ok(), "{s}: sql books");
}

#[tokio::test]
async fn flash_sale_in_each_mode_sells_exactly_the_stock() {
    each_backend(|w| async move {
        for mode in Mode::ALL {
            let s: &'static str = Box::leak(format!("sale-{mode}").into_boxed_str());
            pin(&w, s, mode).await;
            // Stock on both sides (the router writes the other side too in
            // shadow and sql-primary; set the other explicitly otherwise).
            stock(&*w.router, s, "hot", "wh", 60).await;
            let tally = flash_sale(w.router.clone(), s, 16, 8).await;
            w.router.drain_shadow().await;
            let sold = tally.sold.load(Ordering::Relaxed) as i64;
            assert_eq!(tally.errors.load(Ordering::Relaxed), 0, "{mode}: every request answered");
            let primary: &dyn Store = match mode {
                Mode::Redis | Mode::Shadow => &*w.redis,
                _ => &*w.sql,
            };
            let q = qty(primary, s, "hot", "wh").await;
            assert_eq!(sold, 60, "{mode}: oversold {} undersold {}", (sold - 60).max(0), (60 - sold).max(0));
            assert_eq!((q.on_hand, q.committed, q.available, q.reserved), (60, 60, 0, 0), "{mode}: primary books");
            assert!(primary.audit(Some(&shop(s))).await.unwrap().ok(), "{mode}: audit");
            if mode == Mode::SqlPrimary {
                // Redis was kept current: it would take over with the same books.
                let r = qty(&*w.redis, s, "hot", "wh").await;
                assert_eq!((r.available, r.reserved, r.committed), (0, 0, 60), "sql-primary: redis current");
            }
        }
        w
    })
    .await;
}

#[tokio::test]
async fn shadow_with_one_client_reports_zero_mismatches() {
    each_backend(|w| async move {
        pin(&w, "calm", Mode::Shadow).await;
        stock(&*w.router, "calm", "hot", "wh", 20).await;
        let tally = Tally::default();
        let started = Instant::now();
        for n in 0..40 {
            checkout(&*w.router, "calm", &format!("k{n}"), &tally, started).await;
        }
        w.router.drain_shadow().await;
        let c = w.router.shadow_counts();
        assert_eq!(c.mismatches, 0, "{c:?}");
        assert_eq!(c.skipped_queue_full + c.mirror_errors + c.unmapped, 0, "{c:?}");
        assert_eq!(c.matched, c.mirrored);
        assert!(c.mirrored >= 40, "{c:?}");
        let (r, q) = (qty(&*w.redis, "calm", "hot", "wh").await, qty(&*w.sql, "calm", "hot", "wh").await);
        assert_eq!((r.available, r.reserved, r.committed), (q.available, q.reserved, q.committed));
        w
    })
    .await;
}

/// 64 buyers racing for 100 units through two service processes (each
/// with its own shadow mirror), on a multi-threaded runtime. Redis decides
/// in the order its scripts run; each mirror applies in the order answers
/// came back to its process, and the two mirrors interleave on SQL as they
/// please. At sell-out the last units can go to different buyers on the
/// two sides: those are the mismatches, each counted and logged with both
/// answers. Redis (the primary) still sells exactly the stock, and SQL
/// keeps its own books whole (it gives back holds Redis refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shadow_under_concurrency_counts_explained_mismatches() {
    each_backend(|w| async move {
        pin(&w, "rush", Mode::Shadow).await;
        stock(&*w.router, "rush", "hot", "wh", 100).await;
        let (_, second) = w.second_process().await;
        let tally = flash_sale_on(vec![w.router.clone(), second.clone()], "rush", 64, 6).await;
        w.router.drain_shadow().await;
        second.drain_shadow().await;
        let (a, b) = (w.router.shadow_counts(), second.shadow_counts());
        let (mirrored, matched, mismatches) =
            (a.mirrored + b.mirrored, a.matched + b.matched, a.mismatches + b.mismatches);
        let q = qty(&*w.sql, "rush", "hot", "wh").await;
        println!(
            "[{}] concurrent shadow run (2 processes, 64 buyers, 100 units): sold {} refused {}; \
             mirrored {mirrored} matched {matched} mismatches {mismatches} unmapped {} skipped {}; \
             sql side afterwards: committed {} available {} reserved {}",
            w.backend.name(),
            tally.sold.load(Ordering::Relaxed),
            tally.refused.load(Ordering::Relaxed),
            a.unmapped + b.unmapped,
            a.skipped_queue_full + b.skipped_queue_full,
            q.committed,
            q.available,
            q.reserved,
        );
        assert_eq!(mirrored, matched + mismatches);
        assert_eq!(a.skipped_queue_full + b.skipped_queue_full, 0);
        // Redis (the primary) sold exactly the stock, and SQL never breaks
        // its own books, whatever order it saw.
        assert_eq!(tally.sold.load(Ordering::Relaxed), 100);
        assert_both_books_whole(&w, "rush").await;
        w
    })
    .await;
}

/// A second process flips the kill switch in the middle of a sql-primary
/// flash sale. Every request is answered, every unit sells once; holds made
/// by SQL before the flip are settled by SQL (and in Redis), new holds come
/// from Redis within a second.
#[tokio::test]
async fn kill_switch_during_a_flash_sale_loses_no_request_and_no_unit() {
    each_backend(|w| async move {
        for (m, p) in [(Mode::Shadow, 100), (Mode::SqlPrimary, 100)] {
            w.control.apply(&ModeChange::Rollout { mode: m, percent: p, pod: None }).await.unwrap();
        }
        assert_eq!(w.router.mode_of(&shop("big")), Mode::SqlPrimary);
        stock(&*w.router, "big", "hot", "wh", 400).await;
        let (other, _) = w.second_process().await;
        let started = Instant::now();
        let tally = Arc::new(Tally::default());
        // Flip by progress, not by the clock: after 100 SQL holds, whatever
        // the machine's speed. Buyers pause 100 ms between checkouts, so
        // the ~500 holds of the sale take seconds and the router (which
        // follows within a second) still has sales left for Redis.
        let watched = tally.clone();
        let flip = tokio::spawn(async move {
            while watched.sql_holds.load(Ordering::Relaxed) < 100 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other.set_kill_switch(true).await.unwrap();
            // The switch is in the database now: the second is counted from
            // here (the write's own latency is not the router's following).
            started.elapsed()
        });
        paced_sale(vec![w.router.clone()], "big", 24, 40, Duration::from_millis(100), tally.clone()).await;
        let flipped_at = flip.await.unwrap();
        w.router.drain_shadow().await;
        let last_sql = Duration::from_micros(tally.last_sql_hold_us.load(Ordering::Relaxed));
        println!(
            "[{}] kill switch: flipped at {flipped_at:?}; last request sql-primary held sent {:?} after the flip; \
             holds by sql {} then by redis {}; shadow {:?}",
            w.backend.name(),
            last_sql.saturating_sub(flipped_at),
            tally.sql_holds.load(Ordering::Relaxed),
            tally.redis_holds.load(Ordering::Relaxed),
            w.router.shadow_counts()
        );
        assert_eq!(tally.errors.load(Ordering::Relaxed), 0, "no request lost");
        assert!(tally.sql_holds.load(Ordering::Relaxed) > 0 && tally.redis_holds.load(Ordering::Relaxed) > 0);
        assert!(last_sql.saturating_sub(flipped_at) < Duration::from_secs(1), "followed within a second");
        assert_eq!(w.router.mode_of(&shop("big")), Mode::Shadow);
        // No unit lost or sold twice: buyers got exactly the stock, and Redis
        // (the primary now) has nothing left, nothing held.
        assert_eq!(tally.sold.load(Ordering::Relaxed), 400);
        let r = qty(&*w.redis, "big", "hot", "wh").await;
        assert_eq!((r.on_hand, r.available, r.reserved, r.committed), (400, 0, 0, 400));
        assert_both_books_whole(&w, "big").await;
        w
    })
    .await;
}

#[tokio::test]
async fn rules_reach_every_process_within_a_second_and_survive_a_restart() {
    each_backend(|w| async move {
        let (other, _) = w.second_process().await;
        // Timed from the change's return (it is in the database then). The
        // rules are looked at before the clock, so a late wake-up of this
        // task is not taken for a late process.
        let within_a_second = |c: Arc<ModeControl>, what: String, seen: Box<dyn Fn(&Rules) -> bool>| async move {
            let t = Instant::now();
            loop {
                if seen(&c.rules()) {
                    return t.elapsed();
                }
                assert!(t.elapsed() < Duration::from_secs(1), "{what}: not after a second");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let wait_for = |c: Arc<ModeControl>, s: &'static str, want: Mode| {
            within_a_second(c, format!("{s} {want}"), Box::new(move |r: &Rules| r.mode_of(&shop(s)) == want))
        };
        other.apply(&ModeChange::Shop { shop: shop("a"), mode: Some(Mode::SqlPrimary) }).await.unwrap();
        wait_for(w.control.clone(), "a", Mode::SqlPrimary).await;
        other.set_kill_switch(true).await.unwrap();
        let took = wait_for(w.control.clone(), "a", Mode::Shadow).await;
        println!("[{}] kill switch seen by the other process after {took:?}", w.backend.name());
        // A restarted process reads the engaged switch before serving.
        let restarted = ModeControl::load(w.db.modes.clone()).await.unwrap();
        assert!(restarted.kill_switch().engaged);
        assert_eq!(restarted.mode_of(&shop("a")), Mode::Shadow);
        other.set_kill_switch(false).await.unwrap();
        wait_for(w.control.clone(), "a", Mode::SqlPrimary).await;
        // Rollout by percentage: stable hash, monotone.
        other.apply(&ModeChange::Rollout { mode: Mode::Sql, percent: 30, pod: None }).await.unwrap();
        let sql_30 = |r: &Rules| r.rollout.get(&Mode::Sql) == Some(&30);
        within_a_second(w.control.clone(), "rollout sql 30%".into(), Box::new(sql_30)).await;
        let rules = w.control.rules();
        let shops: Vec<_> = (0..1000).map(|n| shop(&format!("r{n}"))).collect();
        let in_sql = shops.iter().filter(|s| rules.mode_of(s) == Mode::Sql).count();
        assert!((250..350).contains(&in_sql), "{in_sql} of 1000 at 30%");
        w
    })
    .await;
}
