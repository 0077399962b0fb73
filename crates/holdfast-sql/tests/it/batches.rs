//! Request coalescing against the serial order: one batch of reserves must
//! give each request the answer it would have had if the requests had run one
//! after another, in arrival order — a key twice, a key with other lines, a
//! shortage beside a success, multi-line and multi-location carts, partial
//! and split fills — on every dialect.

use holdfast_core::{Backend, Error, ReserveRequest, Reserved, Ttl};
use holdfast_sql::StoreConfig;
use holdfast_testkit::*;

/// An answer with what depends on the database (ids, times) taken out:
/// a hold as its lines and whether it was made or replayed (and which
/// earlier answer it replays); a refusal as its kind and shortfalls.
#[derive(Debug, PartialEq, Eq)]
enum Told {
    Made(Vec<(String, String, u32)>),
    Replayed { of: Option<usize>, lines: Vec<(String, String, u32)> },
    Short(Vec<(String, u32, u32)>),
    Conflict,
    Other(String),
}

fn told(answers: &[Result<Reserved, Error>]) -> Vec<Told> {
    let lines = |r: &Reserved| {
        r.reservation.lines.iter().map(|a| (a.item.to_string(), a.location.to_string(), a.quantity)).collect()
    };
    answers
        .iter()
        .map(|a| match a {
            Ok(r) if r.created => Told::Made(lines(r)),
            Ok(r) => Told::Replayed {
                of: answers
                    .iter()
                    .position(|b| b.as_ref().is_ok_and(|b| b.created && b.reservation.id == r.reservation.id)),
                lines: lines(r),
            },
            Err(Error::InsufficientStock(s)) => {
                Told::Short(s.iter().map(|s| (s.item.to_string(), s.requested, s.available)).collect())
            }
            Err(Error::IdempotencyConflict(_)) => Told::Conflict,
            Err(e) => Told::Other(e.to_string()),
        })
        .collect()
}

fn with(k: &str, lines: Vec<holdfast_core::Line>, partial: bool, split: bool) -> ReserveRequest {
    ReserveRequest::new(shop("s1"), key(k), lines, Ttl::DEFAULT, partial, split).unwrap()
}

async fn setup(db: &TestDb) {
    let st = &*db.store;
    stock(st, "s1", "a", "wh", 10).await;
    stock(st, "s1", "b", "wh", 3).await;
    stock(st, "s1", "c", "l1", 2).await;
    stock(st, "s1", "c", "l2", 5).await;
    st.reserve(&request("s1", "earlier", vec![line("a", 1, None)])).await.unwrap();
}

async fn one_batch_answers_as_the_serial_order_does(b: Backend) {
    let batch = TestDb::new(b).await;
    let serial = TestDb::with_config(b, StoreConfig { coalesce: false, ..StoreConfig::default() }).await;
    setup(&batch).await;
    setup(&serial).await;
    let reqs = vec![
        request("s1", "k1", vec![line("a", 2, None)]),
        // The same key and lines in the same batch: a replay of the first.
        request("s1", "k1", vec![line("a", 2, None)]),
        // The same key with other lines: a conflict.
        request("s1", "k1", vec![line("a", 3, None)]),
        // A shortage beside successes.
        request("s1", "big", vec![line("b", 5, None)]),
        // A multi-line cart beside single lines.
        request("s1", "cart", vec![line("a", 1, None), line("b", 2, None)]),
        request("s1", "single", vec![line("b", 1, None)]),
        // Nothing of b is left for a later request.
        request("s1", "late", vec![line("b", 1, None)]),
        // A key held before the batch: a replay.
        request("s1", "earlier", vec![line("a", 1, None)]),
        // Split over candidates: l1 has 2, l2 has 5.
        with("split", vec![line("c", 6, Some(&["l1", "l2"]))], false, true),
        // Partial: b is gone, a is not.
        with("partial", vec![line("b", 2, None), line("a", 1, None)], true, false),
        // A candidate that cannot fill the line whole, then one that can.
        request("s1", "second", vec![line("c", 1, Some(&["l1", "l2"]))]),
    ];
    let batched = batch.db.batches.reserve_batch(reqs.clone()).await;
    let mut one_by_one = Vec::new();
    for r in &reqs {
        one_by_one.push(serial.store.reserve(r).await);
    }
    let (batched, one_by_one) = (told(&batched), told(&one_by_one));
    for (n, (got, want)) in batched.iter().zip(&one_by_one).enumerate() {
        assert_eq!(got, want, "request {n} ({}): batch vs serial", reqs[n].key());
    }
    assert!(matches!(batched[0], Told::Made(_)) && matches!(batched[1], Told::Replayed { of: Some(0), .. }));
    assert_eq!(batched[2], Told::Conflict);
    assert!(matches!(batched[3], Told::Short(_)) && matches!(batched[6], Told::Short(_)));
    for item in ["a", "b", "c"] {
        assert_eq!(
            batch.store.levels(&shop("s1"), &holdfast_testkit::item(item)).await.unwrap(),
            serial.store.levels(&shop("s1"), &holdfast_testkit::item(item)).await.unwrap(),
            "{item}: the books of the batch and of the serial order"
        );
    }
    batch.assert_audit_clean().await;
    serial.assert_audit_clean().await;
}

holdfast_testkit::per_backend!(one_batch_answers_as_the_serial_order_does:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);
