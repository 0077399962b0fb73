//! The checkout workload whose history the checker verifies: many clients,
//! each a loop of what storefronts send — multi-line carts with candidate
//! locations, split and partial reserves, short lifetimes, claims, releases,
//! extends, abandoned carts left to expire, replays and misused keys, stock
//! changes and level reads — on a few groups of items ("families") small
//! enough to sell out and be restocked again and again.
//!
//! A client that gets no answer (a timeout, a lost connection, a `503`)
//! retries what is safe to retry, as a storefront would: a reserve with the
//! same idempotency key, a claim or release of the same id.

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{
    Error, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReservationId, ReserveRequest, ShopId, StockChange,
    StockRequest, Store, Ttl,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::history::{self, Alloc, Answer, Call, Held, Qty, Recorder, Short};

/// The shape of a verification load.
#[derive(Debug, Clone)]
pub struct Workload {
    pub shop: ShopId,
    pub clients: u32,
    /// Groups of items no cart mixes; each is checked on its own.
    pub families: u32,
    pub items_per_family: u32,
    pub locations: u32,
    /// Longest wait for one answer before it counts as lost.
    pub timeout: Duration,
    /// Hold lifetimes (and extends), in seconds, drawn from this range.
    pub ttl: (u32, u32),
    /// Units each (item, location) starts with, drawn from this range;
    /// stock sets during the run draw from half its low end to its high end.
    pub stock: (u32, u32),
    pub seed: u64,
}

impl Workload {
    pub fn item(&self, family: u32, i: u32) -> String {
        format!("f{family}-item{i}")
    }

    pub fn location(&self, l: u32) -> String {
        format!("loc-{}", (b'a' + l as u8) as char)
    }
}

/// Runs `call` once against `store`, recording it.
pub async fn perform(
    store: &dyn Store,
    shop: &ShopId,
    rec: &Recorder,
    client: u32,
    call: Call,
    timeout: Duration,
) -> Answer {
    let op = rec.invoke(client, call.clone());
    let answer = match tokio::time::timeout(timeout, send(store, shop, &call)).await {
        Ok(a) => a,
        Err(_) => Answer::Unknown { reason: format!("no answer within {} ms", timeout.as_millis()) },
    };
    rec.complete(op, answer.clone());
    answer
}

async fn send(store: &dyn Store, shop: &ShopId, call: &Call) -> Answer {
    let r: Result<Answer, Error> = async {
        Ok(match call {
            Call::Reserve { key, lines, ttl, partial, split } => {
                let lines = lines
                    .iter()
                    .map(|l| {
                        Ok(Line {
                            item: ItemId::new(l.item.clone())?,
                            quantity: Quantity::new(l.qty as i64)?,
                            locations: match &l.locations {
                                Some(v) => {
                                    Some(v.iter().map(|x| LocationId::new(x.clone())).collect::<Result<_, _>>()?)
                                }
                                None => None,
                            },
                        })
                    })
                    .collect::<Result<Vec<_>, holdfast_core::Invalid>>()?;
                let req = ReserveRequest::new(
                    shop.clone(),
                    IdempotencyKey::new(key.clone())?,
                    lines,
                    Ttl::from_secs(*ttl as i64)?,
                    *partial,
                    *split,
                )?;
                let r = store.reserve(&req).await?;
                reservation(&r.reservation, Some(r.created))
            }
            Call::Claim { id } => reservation(&store.claim(shop, ReservationId::new(*id)?).await?, None),
            Call::Release { id } => reservation(&store.release(shop, ReservationId::new(*id)?).await?, None),
            Call::Extend { id, ttl } => {
                reservation(&store.extend(shop, ReservationId::new(*id)?, Ttl::from_secs(*ttl as i64)?).await?, None)
            }
            Call::Stock { item, location, change, n } => {
                let change = match change.as_str() {
                    "set" => StockChange::Set(*n),
                    "adjust" => StockChange::Adjust(*n),
                    _ => StockChange::Fulfil(*n),
                };
                let req = StockRequest::new(
                    shop.clone(),
                    ItemId::new(item.clone())?,
                    LocationId::new(location.clone())?,
                    change,
                )?;
                let l = store.change_stock(&req).await?;
                Answer::Level { location: l.location.to_string(), qty: qty(&l.quantities) }
            }
            Call::Lapse { .. } | Call::Read { .. } => {
                return Err(holdfast_core::Invalid::new("call", "the checker's own steps are never sent").into());
            }
            Call::Levels { item } => {
                let levels = store.levels(shop, &ItemId::new(item.clone())?).await?;
                Answer::Levels {
                    locations: levels.locations.iter().map(|l| (l.location.to_string(), qty(&l.quantities))).collect(),
                }
            }
        })
    }
    .await;
    match r {
        Ok(a) => a,
        Err(e) => answer_of(&e),
    }
}

/// An error as the history records it: refusals by code, and what says
/// nothing about the outcome as unknown.
pub fn answer_of(e: &Error) -> Answer {
    match e {
        Error::Unavailable(m) => Answer::Unknown { reason: format!("unavailable: {m}") },
        Error::RetriesExhausted(n) => Answer::Unknown { reason: format!("contended after {n} attempts") },
        Error::Internal(m) => Answer::Unknown { reason: format!("internal: {m}") },
        Error::InsufficientStock(s) => Answer::Refused {
            code: e.code().into(),
            lines: s
                .iter()
                .map(|s| Short { item: s.item.to_string(), requested: s.requested, available: s.available })
                .collect(),
        },
        other => Answer::Refused { code: other.code().into(), lines: Vec::new() },
    }
}

fn qty(q: &holdfast_core::Quantities) -> Qty {
    Qty { on_hand: q.on_hand, available: q.available, reserved: q.reserved, committed: q.committed }
}

fn reservation(r: &holdfast_core::Reservation, created: Option<bool>) -> Answer {
    Answer::Reservation(Held {
        id: r.id.get(),
        status: r.status.as_str().into(),
        expires_at: r.expires_at.timestamp_micros(),
        lines: r
            .lines
            .iter()
            .map(|a| Alloc { item: a.item.to_string(), location: a.location.to_string(), qty: a.quantity })
            .collect(),
        created,
    })
}

/// Puts stock on every (item, location) of every family.
pub async fn stock_up(store: &dyn Store, w: &Workload, rec: &Recorder) {
    let mut rng = StdRng::seed_from_u64(w.seed);
    for f in 0..w.families {
        for i in 0..w.items_per_family {
            for l in 0..w.locations {
                let call = Call::Stock {
                    item: w.item(f, i),
                    location: w.location(l),
                    change: "set".into(),
                    n: rng.gen_range(w.stock.0..=w.stock.1) as i64,
                };
                // Retried until answered, so the sale starts from known stock.
                while perform(store, &w.shop, rec, 0, call.clone(), w.timeout).await.is_unknown() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// A whole run: stock on every (item, location), then `w.clients` clients
/// for `duration` (client `c` on `stores[c % stores.len()]`, so several
/// replicas share the load), with `during` running alongside until the
/// deadline (faults, say), an expiry sweeper every 200 ms when `sweep`, and
/// last a read of every item so the final changes are observed. Returns what
/// `during` returned.
pub async fn session<F, Fut>(
    stores: &[Arc<dyn Store>],
    w: &Arc<Workload>,
    rec: &Arc<Recorder>,
    duration: Duration,
    sweep: bool,
    during: F,
) -> Result<(), Error>
where
    F: FnOnce(tokio::time::Instant) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let first = stores.first().ok_or_else(|| Error::Internal("a session needs a store".into()))?;
    stock_up(first.as_ref(), w, rec).await;
    let deadline = tokio::time::Instant::now() + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 1..=w.clients {
        let store = stores[c as usize % stores.len()].clone();
        tasks.spawn(client(store, w.clone(), rec.clone(), c, deadline));
    }
    // The sweeper, as `serve` runs it.
    let sweeper = sweep.then(|| {
        let store = first.clone();
        tokio::spawn(async move {
            loop {
                let _ = store.expire(200).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    });
    let outcome = during(deadline).await;
    while tasks.join_next().await.is_some() {}
    if let Some(s) = sweeper {
        s.abort();
    }
    for f in 0..w.families {
        for i in 0..w.items_per_family {
            let call = Call::Levels { item: w.item(f, i) };
            perform(first.as_ref(), &w.shop, rec, 0, call, w.timeout).await;
        }
    }
    outcome
}

/// One client's loop until `deadline`.
pub async fn client(
    store: Arc<dyn Store>,
    w: Arc<Workload>,
    rec: Arc<Recorder>,
    client: u32,
    deadline: tokio::time::Instant,
) {
    let mut rng = StdRng::seed_from_u64(w.seed ^ ((client as u64 + 1) << 32));
    let mut open: Vec<i64> = Vec::new();
    let mut sent: Vec<Call> = Vec::new();
    let mut n = 0u64;
    while tokio::time::Instant::now() < deadline {
        let family = rng.gen_range(0..w.families);
        let roll = rng.gen_range(0..100);
        let call = if roll < 40 || (roll < 75 && open.is_empty()) {
            n += 1;
            reserve_call(&w, &mut rng, family, format!("c{client}-{n}"))
        } else if roll < 75 {
            let id = open.remove(0);
            match rng.gen_range(0..100) {
                0..55 => Call::Claim { id },
                55..85 => Call::Release { id },
                _ => {
                    open.push(id);
                    Call::Extend { id, ttl: rng.gen_range(w.ttl.0..=w.ttl.1) }
                }
            }
        } else if roll < 80 && !sent.is_empty() {
            // A replay, or now and then the same key with other lines.
            let mut c = sent.choose(&mut rng).cloned().expect("non-empty");
            if rng.gen_bool(0.2)
                && let Call::Reserve { lines, .. } = &mut c
            {
                lines[0].qty = lines[0].qty % 3 + 1;
            }
            c
        } else if roll < 92 {
            Call::Levels { item: w.item(family, rng.gen_range(0..w.items_per_family)) }
        } else {
            let item = w.item(family, rng.gen_range(0..w.items_per_family));
            let location = w.location(rng.gen_range(0..w.locations));
            match rng.gen_range(0..3) {
                0 => Call::Stock {
                    item,
                    location,
                    change: "set".into(),
                    n: rng.gen_range((w.stock.0 / 2).max(1)..=w.stock.1) as i64,
                },
                1 => Call::Stock {
                    item,
                    location,
                    change: "adjust".into(),
                    n: *[-2, -1, 1, 2, 4].choose(&mut rng).expect(""),
                },
                _ => Call::Stock { item, location, change: "fulfil".into(), n: rng.gen_range(1..=2) },
            }
        };
        let retry_safe =
            matches!(call, Call::Reserve { .. } | Call::Claim { .. } | Call::Release { .. } | Call::Levels { .. });
        let mut tries = 0;
        let answer = loop {
            let a = perform(store.as_ref(), &w.shop, &rec, client, call.clone(), w.timeout).await;
            tries += 1;
            if !a.is_unknown() || !retry_safe || tries >= 50 || tokio::time::Instant::now() >= deadline {
                break a;
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..120))).await;
        };
        if let (Call::Reserve { .. }, Answer::Reservation(h)) = (&call, &answer) {
            // Most carts are paid or given up; some are left to expire.
            if h.created == Some(true) && rng.gen_bool(0.85) {
                open.push(h.id);
            }
            if sent.len() < 64 {
                sent.push(call.clone());
            }
        }
        if rng.gen_bool(0.3) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..20))).await;
        }
    }
}

fn reserve_call(w: &Workload, rng: &mut StdRng, family: u32, key: String) -> Call {
    let mut items: Vec<u32> = (0..w.items_per_family).collect();
    items.shuffle(rng);
    let n_lines = if rng.gen_bool(0.35) { 2.min(items.len()) } else { 1 };
    let lines = items[..n_lines]
        .iter()
        .map(|&i| {
            let locations = if rng.gen_bool(0.3) {
                None
            } else {
                let mut ls: Vec<u32> = (0..w.locations).collect();
                ls.shuffle(rng);
                let k = rng.gen_range(1..=ls.len());
                Some(ls[..k].iter().map(|&l| w.location(l)).collect())
            };
            history::Line { item: w.item(family, i), qty: rng.gen_range(1..=3), locations }
        })
        .collect();
    Call::Reserve {
        key,
        lines,
        ttl: rng.gen_range(w.ttl.0..=w.ttl.1),
        partial: rng.gen_bool(0.2),
        split: rng.gen_bool(0.3),
    }
}
