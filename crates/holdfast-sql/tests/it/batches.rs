//! Request coalescing against the serial order: one batch of reserves must
//! give each request the answer it would have had if the requests had run one
//! after another, in arrival order — a key twice, a key with other lines, a
//! shortage beside a success, multi-line and multi-location carts, partial
//! and split fills — and one batch of claims, releases and extends the
//! same — on every dialect.

use holdfast_core::{Backend, Error, Reservation, ReservationId, ReserveRequest, Reserved, Settle, Ttl};
use holdfast_sql::StoreConfig;
use holdfast_testkit::*;

/// An answer with what depends on the database (ids, times) taken out:
/// a hold as its lines and whether it was made or replayed (and which
/// earlier answer it replays); a refusal as its kind and shortfalls.
#[derive(Debug, PartialEq, Eq)]
enum Told {
    Made(Lines),
    Replayed { of: Option<usize>, lines: Lines },
    Short(Vec<(String, u32, u32)>),
    Conflict,
    Other(String),
}

/// A hold's lines: (item, location, quantity).
type Lines = Vec<(String, String, u32)>;

fn lines_of(r: &Reservation) -> Lines {
    r.lines.iter().map(|a| (a.item.to_string(), a.location.to_string(), a.quantity)).collect()
}

/// Two fresh databases of the backend: one that coalesces, one that does not.
async fn batch_and_serial(b: Backend) -> (TestDb, TestDb) {
    let serial = StoreConfig { coalesce: false, ..StoreConfig::default() };
    (TestDb::new(b).await, TestDb::with_config(b, serial).await)
}

/// The batch's books and the serial order's agree on `items`, and both pass
/// the audit.
async fn same_books(batch: &TestDb, serial: &TestDb, items: &[&str]) {
    for item in items {
        assert_eq!(
            batch.store.levels(&shop("s1"), &holdfast_testkit::item(item)).await.unwrap(),
            serial.store.levels(&shop("s1"), &holdfast_testkit::item(item)).await.unwrap(),
            "{item}: the books of the batch and of the serial order"
        );
    }
    batch.assert_audit_clean().await;
    serial.assert_audit_clean().await;
}

fn told(answers: &[Result<Reserved, Error>]) -> Vec<Told> {
    let lines = |r: &Reserved| lines_of(&r.reservation);
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
    let (batch, serial) = batch_and_serial(b).await;
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
    same_books(&batch, &serial, &["a", "b", "c"]).await;
}

holdfast_testkit::per_backend!(one_batch_answers_as_the_serial_order_does:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);

/// A settle answer without ids and times: the status and lines, or the error.
fn settled(answers: &[Result<Reservation, Error>]) -> Vec<Result<(String, Lines), String>> {
    answers
        .iter()
        .map(|a| match a {
            Ok(r) => Ok((r.status.as_str().to_string(), lines_of(r))),
            Err(e) => Err(e.to_string()),
        })
        .collect()
}

/// Holds h0…h5 of item a (h4 with a 1 s TTL, expired once this returns).
async fn holds(db: &TestDb) -> Vec<ReservationId> {
    let st = &*db.store;
    stock(st, "s1", "a", "wh", 20).await;
    stock(st, "s1", "b", "wh", 10).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        let mut req = request("s1", &format!("h{n}"), vec![line("a", 1 + n % 2, None), line("b", 1, None)]);
        if n == 4 {
            req = req.with_ttl(Ttl::from_secs(1).unwrap());
        }
        ids.push(st.reserve(&req).await.unwrap().reservation.id);
    }
    ids
}

async fn one_settle_batch_answers_as_the_serial_order_does(b: Backend) {
    let (batch, serial) = batch_and_serial(b).await;
    let (hb, hs) = (holds(&batch).await, holds(&serial).await);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let long = Ttl::from_secs(900).unwrap();
    // (hold, op); hold 6 does not exist.
    let plan: Vec<(usize, Settle)> = vec![
        (0, Settle::Claim),
        (0, Settle::Claim),   // a repeat: the same answer
        (0, Settle::Release), // claimed: the wrong status
        (1, Settle::Release),
        (1, Settle::Release),
        (2, Settle::Extend(long)),
        (2, Settle::Claim),   // after its extend, in the same batch
        (4, Settle::Claim),   // expired: refused, and released on the way
        (4, Settle::Release), // expired: releasing it again is a repeat
        (6, Settle::Claim),
        (5, Settle::Release),
        (5, Settle::Claim), // released: the wrong status
        (3, Settle::Extend(long)),
    ];
    let missing = ReservationId::new(i64::MAX / 2).unwrap();
    let on = |ids: &[ReservationId]| -> Vec<(ReservationId, Settle)> {
        plan.iter().map(|&(h, op)| (ids.get(h).copied().unwrap_or(missing), op)).collect()
    };
    let batched = batch.db.batches.settle_batch(&shop("s1"), on(&hb)).await;
    let mut one_by_one = Vec::new();
    for (id, op) in on(&hs) {
        one_by_one.push(op.on(&*serial.store, &shop("s1"), id).await);
    }
    let (got, want) = (settled(&batched), settled(&one_by_one));
    for (n, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "request {n} {:?}: batch vs serial", plan[n]);
    }
    assert!(matches!(batched[2], Err(Error::WrongStatus(..))), "{:?}", batched[2]);
    assert!(matches!(batched[7], Err(Error::Expired)), "{:?}", batched[7]);
    assert!(matches!(batched[9], Err(Error::NotFound)), "{:?}", batched[9]);
    let extended = batched[12].as_ref().unwrap().expires_at;
    assert!(extended > chrono::Utc::now() + chrono::Duration::seconds(800), "the extend moved the expiry: {extended}");
    same_books(&batch, &serial, &["a", "b"]).await;
}

holdfast_testkit::per_backend!(one_settle_batch_answers_as_the_serial_order_does:
    postgres => Postgres, mysql => MySql, sqlite => Sqlite);
