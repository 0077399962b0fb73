//! The conformance suite: every test runs unchanged against every store —
//! each SQL dialect, the legacy Redis store, the mode router in each mode
//! (see [`crate::conformance_suite!`], invoked by each crate's tests for its
//! stores). Tests that stress a store end with the accounting invariant.
//!
//! Where the legacy counter model cannot promise what holdfast does, the test
//! says so by [`Decider`] rather than leaving the store out: it has no pool
//! to refill, and a stock change racing a claim is not safe in it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use holdfast_core::{
    Error, Line, Mode, Quantity, ReservationId, ReservationStatus, ReserveRequest, StockChange, Store, Ttl,
};
use holdfast_sql::StoreConfig;
use rand::Rng;
use rand::seq::SliceRandom;
use tokio::task::JoinHandle;

use crate::subject::Decider;
use crate::*;

fn cap(pool_cap: u32) -> StoreConfig {
    StoreConfig { pool_cap, ..StoreConfig::default() }
}

/// Starts `task(n, store)` for every `n` in `0..count`, each on a tokio task
/// of its own with its own handle to `store`, so that they race each other
/// on the multi-threaded runtime the suite runs on.
fn spawn_each<T, F, Fut>(store: &Arc<dyn Store>, count: u64, task: F) -> Vec<JoinHandle<T>>
where
    F: Fn(u64, Arc<dyn Store>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    (0..count).map(|n| tokio::spawn(task(n, store.clone()))).collect()
}

/// [`spawn_each`], then every task's answer in the order they were started;
/// a task that panicked fails the test.
async fn run_each<T, F, Fut>(store: &Arc<dyn Store>, count: u64, task: F) -> Vec<T>
where
    F: Fn(u64, Arc<dyn Store>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut answers = Vec::new();
    for t in spawn_each(store, count, task) {
        answers.push(t.await.expect("a concurrent task"));
    }
    answers
}

/// 200 concurrent buyers of one unit each on stock 100 get
/// exactly 100 holds and 100 `insufficient_stock`.
pub async fn two_hundred_buyers_for_one_hundred_units(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 100).await;
        let answers = run_each(&db.store, 200, |n, store| async move {
            store.reserve(&request("s1", &format!("buyer-{n}"), vec![line("hot", 1, None)])).await
        })
        .await;
        let (mut held, mut refused) = (0, 0);
        for answer in answers {
            match answer {
                Ok(r) => {
                    assert_eq!(r.reservation.units(), 1);
                    held += 1;
                }
                Err(Error::InsufficientStock(lines)) => {
                    assert_eq!(lines[0].available, 0);
                    refused += 1;
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!((held, refused), (100, 100));
        let q = qty(&*db.store, "s1", "hot", "wh").await;
        assert_eq!((q.on_hand, q.reserved, q.available, q.committed), (100, 100, 0, 0));
        db.assert_audit_clean().await;
    })
    .await;
}

/// stock five times the pool cap sold out by 300 concurrent
/// buyers; every unit sold exactly once, the pool was refilled from the ledger.
pub async fn sell_out_five_times_the_pool_cap(s: Subject) {
    let seed = seed("sell-out", &s.name());
    with_subject(s, StoreConfig::default(), move |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 5_000).await;
        let sold = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let attempts = run_each(&db.store, 300, |buyer, store| {
            let sold = sold.clone();
            async move {
                let mut rng = task_rng(seed, buyer);
                let mut n = 0;
                loop {
                    let want = rng.gen_range(1..=3);
                    let req = request("s1", &format!("b{buyer}-{n}"), vec![line("hot", want, None)]);
                    n += 1;
                    match store.reserve(&req).await {
                        Ok(r) => {
                            let c = store.claim(&shop("s1"), r.reservation.id).await.expect("claim");
                            assert_eq!(c.status, ReservationStatus::Claimed);
                            sold.fetch_add(c.units(), Ordering::Relaxed);
                        }
                        // A buyer wanting 3 may still find 1 or 2 left;
                        // it stops only when nothing at all is left.
                        Err(Error::InsufficientStock(l)) if l[0].available == 0 => return n,
                        Err(Error::InsufficientStock(_)) => continue,
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
            }
        })
        .await
        .into_iter()
        .sum::<u64>();
        let secs = started.elapsed().as_secs_f64();
        let sold = sold.load(Ordering::Relaxed);
        assert_eq!(sold, 5_000, "oversold or undersold");
        let q = qty(&*db.store, "s1", "hot", "wh").await;
        assert_eq!((q.on_hand, q.committed, q.reserved, q.available), (5_000, 5_000, 0, 0));
        let stats = db.store.stats();
        if db.decider() == Decider::Holdfast {
            assert!(stats.replenishments >= 4, "pool never refilled: {stats:?}");
        }
        eprintln!(
            "[{}] sell-out: 5000 units, {attempts} reserves in {secs:.2}s ({:.0} reserve+claim/s), {stats:?}",
            s.name(),
            attempts as f64 / secs
        );
        db.assert_audit_clean().await;
    })
    .await;
}

/// 300 buyers of 3-unit carts on stock that is not a multiple of 3: every
/// cart that can be filled is, no buyer is turned away while 3 units are
/// free, and the books end exact (1 unit left).
pub async fn three_unit_carts_sell_out_exactly(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 3_001).await;
        let sold = run_each(&db.store, 300, |buyer, store| async move {
            let mut sold = 0u64;
            for n in 0.. {
                let req = request("s1", &format!("b{buyer}-{n}"), vec![line("hot", 3, None)]);
                match store.reserve(&req).await {
                    Ok(r) => {
                        assert_eq!(r.reservation.units(), 3);
                        sold += store.claim(&shop("s1"), r.reservation.id).await.expect("claim").units();
                    }
                    Err(Error::InsufficientStock(l)) => {
                        assert!(l[0].available < 3, "turned away while {} units were free", l[0].available);
                        return sold;
                    }
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            unreachable!()
        })
        .await
        .into_iter()
        .sum::<u64>();
        assert_eq!(sold, 3_000, "oversold or undersold");
        let q = qty(&*db.store, "s1", "hot", "wh").await;
        assert_eq!((q.on_hand, q.committed, q.reserved, q.available), (3_001, 3_000, 0, 1));
        db.assert_audit_clean().await;
    })
    .await;
}

/// What the churn clients were told, to check against the store at the end.
#[derive(Default)]
struct Told {
    /// Units each (item, location) gained or lost by accepted adjustments.
    adjusted: BTreeMap<(String, String), i64>,
    /// Units of claims that succeeded.
    committed: BTreeMap<(String, String), i64>,
    /// Holds still held when the client stopped.
    open: Vec<ReservationId>,
}

/// mixed churn from 64 clients — random multi-line carts over
/// 10 items × 3 locations, claims, releases, expiries, stock adjustments —
/// ends with a clean audit and totals that match what the clients were told.
pub async fn churn_matches_what_clients_were_told(s: Subject) {
    let secs: u64 = std::env::var("HOLDFAST_CHURN_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let seed = seed("churn", &s.name());
    // The legacy model cannot promise a stock change racing a claim (see
    // `Decider::Legacy`): its churn has no adjustments.
    let adjusts = if s.decider() == Decider::Holdfast { 8 } else { 0 };
    with_subject(s, cap(50), move |db| async move {
        let items: Vec<String> = (0..10).map(|i| format!("item{i}")).collect();
        let locs = ["east", "north", "west"];
        for i in &items {
            for l in locs {
                stock(&*db.store, "s1", i, l, 120).await;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        let sweeper = {
            let store = db.store.clone();
            tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < deadline {
                    n += store.expire(100).await.expect("sweep");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                n
            })
        };
        let clients = run_each(&db.store, 64, |c, store| {
            let items = items.clone();
            async move {
                let mut r = task_rng(seed, c);
                let mut told = Told::default();
                let mut n = 0;
                while Instant::now() < deadline {
                    n += 1;
                    let action = r.gen_range(0..100);
                    if action < adjusts {
                        let (i, l) = (items.choose(&mut r).unwrap().clone(), locs.choose(&mut r).unwrap().to_string());
                        let delta = r.gen_range(-5..=8);
                        if delta == 0 {
                            continue;
                        }
                        match change(&*store, "s1", &i, &l, StockChange::Adjust(delta)).await {
                            Ok(_) => *told.adjusted.entry((i, l)).or_default() += delta,
                            Err(Error::StockConflict(_)) => {}
                            Err(e) => panic!("adjust: {e}"),
                        }
                        continue;
                    }
                    let (lines, split, partial, ttl) = {
                        let k = r.gen_range(1..=4);
                        let lines: Vec<Line> = items
                            .choose_multiple(&mut r, k)
                            .map(|i| {
                                let locations = match r.gen_range(0..3) {
                                    0 => None,
                                    1 => Some(vec![loc(locs.choose(&mut r).unwrap())]),
                                    _ => {
                                        let mut all: Vec<_> = locs.iter().map(|l| loc(l)).collect();
                                        all.shuffle(&mut r);
                                        Some(all)
                                    }
                                };
                                Line { item: item(i), quantity: Quantity::new(r.gen_range(1..=4)).unwrap(), locations }
                            })
                            .collect();
                        (lines, r.gen_bool(0.3), r.gen_bool(0.2), if r.gen_bool(0.1) { 1 } else { 600 })
                    };
                    let req = ReserveRequest::new(
                        shop("s1"),
                        key(&format!("c{c}-{n}")),
                        lines,
                        Ttl::from_secs(ttl).unwrap(),
                        partial,
                        split,
                    )
                    .unwrap();
                    let res = match store.reserve(&req).await {
                        Ok(r) => r.reservation,
                        Err(Error::InsufficientStock(_)) => continue,
                        Err(e) => panic!("reserve: {e}"),
                    };
                    if ttl == 1 {
                        // Left to expire; a sweeper or a short reserve releases it.
                        told.open.push(res.id);
                        continue;
                    }
                    let pause = Duration::from_millis(r.gen_range(0..5));
                    tokio::time::sleep(pause).await;
                    if r.gen_bool(0.6) {
                        match store.claim(&shop("s1"), res.id).await {
                            Ok(r) => {
                                for a in r.lines {
                                    *told.committed.entry((a.item.to_string(), a.location.to_string())).or_default() +=
                                        a.quantity as i64;
                                }
                            }
                            Err(e) => panic!("claim: {e}"),
                        }
                    } else if r.gen_bool(0.9) {
                        store.release(&shop("s1"), res.id).await.expect("release");
                    } else {
                        told.open.push(res.id);
                    }
                }
                told
            }
        })
        .await;
        let mut told = Told::default();
        for t in clients {
            for (k, v) in t.adjusted {
                *told.adjusted.entry(k).or_default() += v;
            }
            for (k, v) in t.committed {
                *told.committed.entry(k).or_default() += v;
            }
            told.open.extend(t.open);
        }
        sweeper.await.unwrap();
        db.assert_audit_clean().await;

        // Settle what is still open: release long holds, the short ones are
        // expired (release of an expired hold answers with its state).
        for id in &told.open {
            let r = db.store.release(&shop("s1"), *id).await.expect("final release");
            assert!(matches!(r.status, ReservationStatus::Released | ReservationStatus::Expired));
        }
        for i in &items {
            for l in locs {
                let q = qty(&*db.store, "s1", i, l).await;
                let k = (i.clone(), l.to_string());
                let on_hand = 120 + told.adjusted.get(&k).copied().unwrap_or(0);
                let committed = told.committed.get(&k).copied().unwrap_or(0);
                assert_eq!(q.on_hand, on_hand, "{k:?} on_hand");
                assert_eq!(q.committed, committed, "{k:?} committed");
                assert_eq!(q.reserved, 0, "{k:?} reserved");
                assert_eq!(q.available, on_hand - committed, "{k:?} available");
            }
        }
        eprintln!("[{}] churn: {} settled at the end, {:?}", s.name(), told.open.len(), db.store.stats());
        db.assert_audit_clean().await;
    })
    .await;
}

/// The same idempotency key sent by 20 tasks at once yields one reservation.
pub async fn same_key_from_twenty_tasks_is_one_reservation(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 100).await;
        let answers = run_each(&db.store, 20, |_, store| async move {
            store.reserve(&request("s1", "checkout-42", vec![line("hot", 3, None)])).await.expect("reserve")
        })
        .await;
        let mut ids = HashSet::new();
        let mut created = 0;
        for r in answers {
            ids.insert(r.reservation.id);
            created += r.created as u32;
            assert_eq!(r.reservation.units(), 3);
        }
        assert_eq!(ids.len(), 1, "one key, several reservations: {ids:?}");
        assert_eq!(created, 1);
        let q = qty(&*db.store, "s1", "hot", "wh").await;
        assert_eq!((q.reserved, q.available), (3, 97));
        db.assert_audit_clean().await;
    })
    .await;
}

/// Four sweepers at once release each expired hold exactly once.
pub async fn four_sweepers_release_each_hold_once(s: Subject) {
    with_subject(s, StoreConfig::default(), move |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 300).await;
        for n in 0..120 {
            let req = request("s1", &format!("k{n}"), vec![line("hot", 2, None)]).with_ttl(Ttl::from_secs(3).unwrap());
            db.store.reserve(&req).await.expect("reserve");
        }
        // Mirrored holds are made when the mirror gets to them, and expire
        // three seconds after that: time enough, on a loaded machine, for
        // the 120 reserves and the mirror before they are counted.
        db.mirrored().await;
        // Each book's holds: the deciding store's 120, and the mirror's (the
        // shadow's SQL copy holds only what SQL agreed to), counted before
        // they expire (an expired hold is not reserved).
        let mirrored = match s {
            Subject::Router(Mode::Shadow, _) => qty(&*db.db.store, "s1", "hot", "wh").await.reserved as u64 / 2,
            Subject::Router(Mode::SqlPrimary, _) => 120,
            _ => 0,
        };
        tokio::time::sleep(Duration::from_millis(3_300)).await;
        let total = run_each(&db.store, 4, |_, store| async move {
            let mut n = 0;
            loop {
                let k = store.expire(7).await.expect("sweep");
                if k == 0 {
                    return n;
                }
                n += k;
            }
        })
        .await
        .into_iter()
        .sum::<u64>();
        assert_eq!(total, 120 + mirrored, "each expired hold released exactly once (in each book)");
        assert_eq!(db.store.expire(100).await.unwrap(), 0);
        let q = qty(&*db.store, "s1", "hot", "wh").await;
        assert_eq!((q.reserved, q.available), (0, 300));
        db.assert_audit_clean().await;
    })
    .await;
}

/// Bad input gets a clear error and changes nothing.
pub async fn bad_input_changes_nothing(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 10).await;
        let held = db.store.reserve(&request("s1", "mine", vec![line("hot", 2, None)])).await.unwrap().reservation;
        let before = db.store.levels(&shop("s1"), &item("hot")).await.unwrap();

        // Values that cannot even be built.
        assert!(Quantity::new(0).is_err());
        assert!(Quantity::new(-3).is_err());
        assert!(Quantity::new(10_001).is_err());
        let many: Vec<Line> = (0..101).map(|i| line(&format!("i{i}"), 1, None)).collect();
        let err = ReserveRequest::new(shop("s1"), key("k"), many, Ttl::DEFAULT, false, false).unwrap_err();
        assert_eq!(err.field, "lines");
        let dup = ReserveRequest::new(
            shop("s1"),
            key("k"),
            vec![line("hot", 1, None), line("hot", 1, None)],
            Ttl::DEFAULT,
            false,
            false,
        );
        assert!(dup.is_err());
        assert!(matches!(change(&*db.store, "s1", "hot", "wh", StockChange::Set(-1)).await, Err(Error::Invalid(_))));
        assert!(matches!(change(&*db.store, "s1", "hot", "wh", StockChange::Adjust(0)).await, Err(Error::Invalid(_))));

        // Unknown and foreign reservations look the same: not found.
        let unknown = ReservationId::new(i64::MAX).unwrap();
        assert!(matches!(db.store.claim(&shop("s1"), unknown).await, Err(Error::NotFound)));
        for op in 0..4 {
            let other = shop("s2");
            let r = match op {
                0 => db.store.claim(&other, held.id).await,
                1 => db.store.release(&other, held.id).await,
                2 => db.store.extend(&other, held.id, Ttl::DEFAULT).await,
                _ => db.store.get(&other, held.id).await,
            };
            assert!(matches!(r, Err(Error::NotFound)), "other shop reached a reservation: {r:?}");
        }
        assert!(db.store.levels(&shop("s2"), &item("hot")).await.unwrap().locations.is_empty());

        // Refusals that change nothing.
        assert!(matches!(
            change(&*db.store, "s1", "hot", "wh", StockChange::Set(1)).await,
            Err(Error::StockConflict(_))
        ));
        assert!(matches!(
            change(&*db.store, "s1", "hot", "wh", StockChange::Fulfil(1)).await,
            Err(Error::StockConflict(_))
        ));
        assert!(matches!(
            db.store.reserve(&request("s1", "big", vec![line("hot", 9, None)])).await,
            Err(Error::InsufficientStock(_))
        ));
        assert!(matches!(
            db.store.reserve(&request("s1", "mine", vec![line("hot", 1, None)])).await,
            Err(Error::IdempotencyConflict(_))
        ));
        let after = db.store.levels(&shop("s1"), &item("hot")).await.unwrap();
        assert_eq!(before, after);
        assert_eq!(db.store.get(&shop("s1"), held.id).await.unwrap().status, ReservationStatus::Held);
        db.assert_audit_clean().await;
    })
    .await;
}

/// Claim and release are idempotent; a finished hold refuses the other verb.
pub async fn lifecycle_and_idempotent_verbs(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "a", "wh", 10).await;
        let s = shop("s1");
        let r1 = db.store.reserve(&request("s1", "k1", vec![line("a", 4, None)])).await.unwrap();
        assert!(r1.created);
        assert_eq!(r1.reservation.lines[0].location, loc("wh"));
        let replay = db.store.reserve(&request("s1", "k1", vec![line("a", 4, None)])).await.unwrap();
        assert!(!replay.created);
        assert_eq!(replay.reservation, r1.reservation);

        let c1 = db.store.claim(&s, r1.reservation.id).await.unwrap();
        let c2 = db.store.claim(&s, r1.reservation.id).await.unwrap();
        assert_eq!(c1, c2);
        assert_eq!(c1.status, ReservationStatus::Claimed);
        assert!(matches!(db.store.release(&s, r1.reservation.id).await, Err(Error::WrongStatus(..))));
        assert!(matches!(db.store.extend(&s, r1.reservation.id, Ttl::DEFAULT).await, Err(Error::WrongStatus(..))));

        let r2 = db.store.reserve(&request("s1", "k2", vec![line("a", 3, None)])).await.unwrap().reservation;
        let before = r2.expires_at;
        let ext = db.store.extend(&s, r2.id, Ttl::from_secs(3_600).unwrap()).await.unwrap();
        assert!(ext.expires_at > before);
        let rel1 = db.store.release(&s, r2.id).await.unwrap();
        let rel2 = db.store.release(&s, r2.id).await.unwrap();
        assert_eq!(rel1, rel2);
        assert_eq!(rel1.status, ReservationStatus::Released);
        assert!(matches!(db.store.claim(&s, r2.id).await, Err(Error::WrongStatus(..))));

        let q = qty(&*db.store, "s1", "a", "wh").await;
        assert_eq!((q.on_hand, q.committed, q.reserved, q.available), (10, 4, 0, 6));
        let shipped = change(&*db.store, "s1", "a", "wh", StockChange::Fulfil(3)).await.unwrap();
        assert_eq!((shipped.quantities.on_hand, shipped.quantities.committed), (7, 1));
        assert_eq!(shipped.quantities.available, 6);
        db.assert_audit_clean().await;
    })
    .await;
}

/// An expired hold is never claimable, and a short reserve releases expired
/// holds itself instead of waiting for the sweeper (no undersell from lag).
pub async fn expired_holds_are_not_claimable_and_do_not_undersell(s: Subject) {
    with_subject(s, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "a", "wh", 5).await;
        let s = shop("s1");
        let req = request("s1", "short", vec![line("a", 5, None)]).with_ttl(Ttl::from_secs(1).unwrap());
        let r = db.store.reserve(&req).await.unwrap().reservation;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        if db.decider() != Decider::Legacy {
            // Past its expiry a hold is not reserved, even before a sweep:
            // levels agree with what a reserve may take.
            let q = qty(&*db.store, "s1", "a", "wh").await;
            assert_eq!((q.on_hand, q.reserved, q.available), (5, 0, 5));
        }
        // No sweeper has run: holdfast's reserve finds the expired units
        // itself. The legacy counter model turns the buyer away until its
        // sweeper gives them back: it undersells while the sweeper lags.
        let next = request("s1", "next", vec![line("a", 5, None)]);
        if db.decider() == Decider::Legacy {
            assert!(matches!(db.store.reserve(&next).await, Err(Error::InsufficientStock(_))));
            assert!(db.store.expire(100).await.unwrap() >= 1);
        }
        let r2 = db.store.reserve(&next).await.unwrap();
        assert_eq!(r2.reservation.units(), 5);
        assert!(matches!(db.store.claim(&s, r.id).await, Err(Error::Expired)));
        assert_eq!(db.store.get(&s, r.id).await.unwrap().status, ReservationStatus::Expired);

        let req = request("s1", "late", vec![line("a", 1, None)]).with_ttl(Ttl::from_secs(1).unwrap());
        db.store.release(&s, r2.reservation.id).await.unwrap();
        let r3 = db.store.reserve(&req).await.unwrap().reservation;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        assert!(matches!(db.store.claim(&s, r3.id).await, Err(Error::Expired)));
        assert!(matches!(db.store.extend(&s, r3.id, Ttl::DEFAULT).await, Err(Error::Expired)));
        let q = qty(&*db.store, "s1", "a", "wh").await;
        assert_eq!((q.reserved, q.available), (0, 5));
        db.assert_audit_clean().await;
    })
    .await;
}

/// Candidate locations are tried in order; without `allow_split` a line comes
/// from one location; with it, from several; `allow_partial` holds what there is.
pub async fn candidates_split_and_partial(s: Subject) {
    with_subject(s, cap(3), |db| async move {
        let st = &*db.store;
        stock(st, "s1", "a", "l1", 2).await;
        stock(st, "s1", "a", "l2", 5).await;
        stock(st, "s1", "a", "l3", 4).await;
        stock(st, "s1", "b", "l1", 1).await;

        // Default order is by location id: l1 cannot fill 4, l2 can.
        let r = st.reserve(&request("s1", "k1", vec![line("a", 4, None)])).await.unwrap().reservation;
        assert_eq!(r.lines.len(), 1);
        assert_eq!((r.lines[0].location.as_str(), r.lines[0].quantity), ("l2", 4));

        // Explicit order wins.
        let r = st.reserve(&request("s1", "k2", vec![line("a", 2, Some(&["l3", "l1"]))])).await.unwrap().reservation;
        assert_eq!((r.lines[0].location.as_str(), r.lines[0].quantity), ("l3", 2));

        // 1 left at l2, 2 at l1, 2 at l3: no single location has 3.
        let e = st.reserve(&request("s1", "k3", vec![line("a", 3, None)])).await.unwrap_err();
        match e {
            Error::InsufficientStock(l) => assert_eq!((l[0].requested, l[0].available), (3, 2)),
            e => panic!("{e}"),
        }
        let lines = vec![line("a", 4, Some(&["l2", "l1", "l3"]))];
        let split = ReserveRequest::new(shop("s1"), key("k4"), lines, Ttl::DEFAULT, false, true).unwrap();
        let r = st.reserve(&split).await.unwrap().reservation;
        let got: Vec<(&str, u32)> = r.lines.iter().map(|a| (a.location.as_str(), a.quantity)).collect();
        assert_eq!(got, vec![("l1", 2), ("l2", 1), ("l3", 1)]);

        // Multi-line cart, all or nothing: b has 1, the cart wants 2 of b.
        let e = st.reserve(&request("s1", "k5", vec![line("a", 1, None), line("b", 2, None)])).await;
        assert!(matches!(e, Err(Error::InsufficientStock(_))));
        let lines = vec![line("a", 1, Some(&["l3"])), line("b", 2, None)];
        let partial = ReserveRequest::new(shop("s1"), key("k6"), lines, Ttl::DEFAULT, true, false).unwrap();
        let r = st.reserve(&partial).await.unwrap().reservation;
        assert_eq!(r.units(), 2);
        assert_eq!(r.lines.iter().find(|a| a.item == item("b")).unwrap().quantity, 1);

        // Unknown items are simply not in stock.
        let e = st.reserve(&request("s1", "k7", vec![line("nope", 1, None)])).await;
        assert!(matches!(e, Err(Error::InsufficientStock(_))));
        db.assert_audit_clean().await;
    })
    .await;
}

/// A decrease never takes reserved or committed units; it takes pool rows
/// when it must, and increases refill the pool.
pub async fn stock_changes_respect_holds(s: Subject) {
    with_subject(s, cap(4), |db| async move {
        let st = &*db.store;
        let s = shop("s1");
        stock(st, "s1", "a", "wh", 10).await;
        let r = st.reserve(&request("s1", "k1", vec![line("a", 3, None)])).await.unwrap().reservation;
        st.claim(&s, r.id).await.unwrap();
        st.reserve(&request("s1", "k2", vec![line("a", 2, None)])).await.unwrap();
        // 10 on hand, 3 committed, 2 reserved: 5 can go.
        let lvl = change(st, "s1", "a", "wh", StockChange::Adjust(-5)).await.unwrap();
        assert_eq!((lvl.quantities.on_hand, lvl.quantities.available), (5, 0));
        assert!(matches!(change(st, "s1", "a", "wh", StockChange::Adjust(-1)).await, Err(Error::StockConflict(_))));
        let lvl = change(st, "s1", "a", "wh", StockChange::Set(20)).await.unwrap();
        assert_eq!((lvl.quantities.on_hand, lvl.quantities.available, lvl.quantities.reserved), (20, 15, 2));
        let lvl = change(st, "s1", "a", "wh", StockChange::Fulfil(3)).await.unwrap();
        assert_eq!((lvl.quantities.on_hand, lvl.quantities.committed), (17, 0));
        db.assert_audit_clean().await;
    })
    .await;
}

/// Callers that give up mid-operation — a timeout dropping the call after 0
/// to 3 ms, wherever it is: queued for a batch, leading one, between two
/// statements — leave the store working: afterwards every call is answered
/// as usual (no connection left half-way through a conversation, no batch
/// lane stuck), and the books balance.
pub async fn callers_that_give_up_leave_the_store_working(s: Subject) {
    let seed = seed("give_up", &s.name());
    with_subject(s, StoreConfig::default(), move |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 60).await;
        run_each(&db.store, 300, |n, store| async move {
            let mut rng = task_rng(seed, n);
            let patience = |rng: &mut rand::rngs::StdRng| Duration::from_micros(rng.gen_range(0..3_000));
            let req = request("s1", &format!("impatient-{n}"), vec![line("hot", 1, None)]);
            let held = tokio::time::timeout(patience(&mut rng), store.reserve(&req)).await;
            if let Ok(Ok(r)) = held {
                let id = r.reservation.id;
                let shop = shop("s1");
                let _ = match rng.gen_range(0..3) {
                    0 => tokio::time::timeout(patience(&mut rng), store.claim(&shop, id)).await,
                    1 => tokio::time::timeout(patience(&mut rng), store.release(&shop, id)).await,
                    _ => tokio::time::timeout(patience(&mut rng), store.get(&shop, id)).await,
                };
            }
            let _ = tokio::time::timeout(patience(&mut rng), store.levels(&shop("s1"), &item("hot"))).await;
        })
        .await;
        // What was under way when its caller left finishes on its own.
        tokio::time::sleep(Duration::from_millis(300)).await;

        stock(&*db.store, "s1", "cold", "wh", 40).await;
        let tasks = spawn_each(&db.store, 40, |n, store| async move {
            let r = store.reserve(&request("s1", &format!("patient-{n}"), vec![line("cold", 1, None)])).await?;
            store.claim(&shop("s1"), r.reservation.id).await
        });
        for t in tasks {
            let answer = tokio::time::timeout(Duration::from_secs(20), t).await.expect("answered within 20 s");
            let claimed = answer.expect("a patient caller").expect("answered as usual after the impatient ones");
            assert_eq!(claimed.status, ReservationStatus::Claimed);
        }
        let q = qty(&*db.store, "s1", "cold", "wh").await;
        assert_eq!((q.on_hand, q.committed, q.available), (40, 40, 0));
        // A claim whose caller left may still be finishing. The SQL stores
        // write it in one transaction, but the legacy store writes two books
        // one after the other and reads them one after the other, so a read
        // between the two writes sees a unit in one book only. Read until no
        // such write is under way; a unit really lost or doubled never
        // balances, and fails below.
        let mut q = qty(&*db.store, "s1", "hot", "wh").await;
        for _ in 0..100 {
            if q.available + q.reserved + q.committed == q.on_hand {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            q = qty(&*db.store, "s1", "hot", "wh").await;
        }
        assert_eq!(q.on_hand, 60);
        assert_eq!(q.available + q.reserved + q.committed, q.on_hand, "{q:?}");
        db.assert_audit_clean().await;
    })
    .await;
}

/// Declares one `#[tokio::test]` per conformance test for `$subject`, so one
/// suite, unchanged, runs against every store:
/// `holdfast_testkit::conformance_suite!(Subject::Sql(Backend::Postgres));`
#[macro_export]
macro_rules! conformance_suite {
    ($subject:expr) => {
        $crate::conformance_suite!(@tests $subject;
            two_hundred_buyers_for_one_hundred_units,
            sell_out_five_times_the_pool_cap,
            three_unit_carts_sell_out_exactly,
            churn_matches_what_clients_were_told,
            same_key_from_twenty_tasks_is_one_reservation,
            four_sweepers_release_each_hold_once,
            bad_input_changes_nothing,
            lifecycle_and_idempotent_verbs,
            expired_holds_are_not_claimable_and_do_not_undersell,
            candidates_split_and_partial,
            stock_changes_respect_holds,
            callers_that_give_up_leave_the_store_working,
        );
    };
    (@tests $subject:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::conformance::$name($subject).await
            }
        )*
    };
}
