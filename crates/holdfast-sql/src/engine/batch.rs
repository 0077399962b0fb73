//! The batches of request coalescing (coalesce.rs): a batch of reserves, or
//! of claims, releases and extends, of one shop goes to the database as one
//! transaction of a fixed number of statements, and every request gets the
//! answer it would have had alone.
//!
//! A batch is only ever the *fast* part of each operation, in arrival order.
//! What a batch cannot settle by itself — a reserve its pool rows did not
//! fill, an idempotency key someone else holds, a key twice in one batch, a
//! batch the database refused — goes on alone afterwards, on its caller's
//! task, through the same code as without coalescing: the slow path, the
//! replay, the retries. The lane does not wait for it: the next batch starts
//! as soon as this one has answered. So no request sees an error it would not
//! have seen alone, and within a batch's deal no request takes a unit an
//! earlier one could have had.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;

use holdfast_core::{
    Allocation, Error, IdempotencyKey, ItemId, LocationId, Reservation, ReservationId, ReserveRequest, Reserved,
    Settle, ShopId, Topic,
};

use super::reserve::{Verdict, allocations, candidate_spec as candidates, fast_wants, new_hold, verdict};
use super::{Fail, SqlStore};
use crate::dialect::{Batch, Dialect, Fast, Taken, TxMode, Unit, Want};
use crate::run;
use crate::tag;
use crate::webhooks::Event;

#[cfg(feature = "testing")]
#[async_trait::async_trait]
impl<D: Dialect> crate::BatchReserve for SqlStore<D> {
    async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Result<Reserved, Error>> {
        crate::tag::op("reserve", async {
            let mut out = Vec::with_capacity(reqs.len());
            for (req, answer) in reqs.iter().zip(SqlStore::reserve_batch(self, reqs.clone()).await) {
                out.push(match answer {
                    Some(a) => a,
                    None => self.reserve_alone(req).await,
                });
            }
            out
        })
        .await
    }

    async fn settle_batch(&self, shop: &ShopId, ops: Vec<(ReservationId, Settle)>) -> Vec<Result<Reservation, Error>> {
        crate::tag::op("settle", SqlStore::settle_batch(self, shop, ops)).await
    }

    async fn levels_twice(
        &self,
        shop: &ShopId,
        item: &holdfast_core::ItemId,
        between: std::time::Duration,
    ) -> Result<[(Vec<holdfast_core::LocationLevel>, bool); 2], Error> {
        SqlStore::levels_twice(self, shop, item, between).await
    }

    async fn in_flight(
        &self,
        shop: &ShopId,
        place: (&ItemId, &LocationId),
        lookahead: std::time::Duration,
        matters: u32,
    ) -> Result<(i64, Option<std::time::Duration>), Error> {
        let (n, wait) = self
            .op("in_flight", true, || async {
                let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                let read =
                    super::stock::look_ahead::<D>(&mut tx, shop, place, lookahead.as_millis() as i64, matters).await?;
                tx.rollback().await?;
                Ok(read)
            })
            .await?;
        Ok((n, wait.map(|ms| std::time::Duration::from_millis(ms.max(0) as u64))))
    }
}

impl<D: Dialect> SqlStore<D> {
    /// One reserve alone: the fast path, the slow path, the retries.
    pub(super) async fn reserve_alone(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        let queued = std::sync::atomic::AtomicBool::new(false);
        tag::op("reserve", self.retrying(true, || self.reserve_once(req, &queued))).await
    }

    /// A batch of reserves of one shop, in arrival order.
    ///
    /// 1. The batch's fast path: one transaction (see [`Self::fast_batch`]).
    /// 2. What came up short is checked against one lock-free read of the
    ///    units no live hold has: a request that cannot be met even if all
    ///    of them were free is turned away here (or answered as a replay).
    ///    After a sell-out that is nearly every request, and none of them
    ///    touches a ledger row.
    /// 3. For the rest, one transaction refills the pools they drew on from
    ///    the ledger (the slow path's refill, once for all of them), and the
    ///    fast path runs again for them.
    /// 4. Everything else is answered `None`: it goes on alone, on its
    ///    caller's task, once the batch has answered (the lane is free for
    ///    the next batch by then).
    ///
    /// A batch of one request is that request alone, start to end.
    pub(super) async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Option<Result<Reserved, Error>>> {
        self.counters.reserve_batches.fetch_add(1, Ordering::Relaxed);
        self.counters.reserves_batched.fetch_add(reqs.len() as u64, Ordering::Relaxed);
        if reqs.len() == 1 {
            return vec![Some(self.reserve_alone(&reqs[0]).await)];
        }
        let shop = reqs[0].shop().clone();
        let mut answers: Vec<Option<Result<Reserved, Error>>> = (0..reqs.len()).map(|_| None).collect();
        // The first request of each key goes in the batch; a repeat goes on
        // alone after it, and replays what it made.
        let mut keys = HashSet::new();
        let mut todo: Vec<usize> = (0..reqs.len()).filter(|&i| keys.insert(reqs[i].key().clone())).collect();
        for round in 0..2 {
            let batch: Vec<&ReserveRequest> = todo.iter().map(|&i| &reqs[i]).collect();
            // A batch the database keeps refusing sends every request on alone.
            let fast = match self.retrying(true, || self.fast_batch(&batch)).await {
                Ok(fast) => fast,
                Err(e) => {
                    metrics::counter!("holdfast_coalesce_batch_failures_total", "op" => "reserve").increment(1);
                    tracing::warn!(error = %e, requests = batch.len(), "a reserve batch failed; its requests go on alone");
                    Batch::default()
                }
            };
            let mut short = Vec::new();
            for (&i, f) in todo.iter().zip(fast.outcomes) {
                match f {
                    Fast::Held { id, expires_at, taken } => {
                        answers[i] = Some(Ok(new_hold(&reqs[i], id, expires_at, taken)))
                    }
                    Fast::Short if round == 0 => short.push(i),
                    Fast::Short | Fast::KeyTaken => {}
                }
            }
            if short.is_empty() || round == 1 {
                break;
            }
            self.turn_away_sold_out(&reqs, &mut answers).await;
            short.retain(|&i| answers[i].is_none());
            if short.is_empty() {
                break;
            }
            let spec: Vec<(ItemId, Option<LocationId>)> = short.iter().flat_map(|&i| candidates(&reqs[i])).collect();
            if self.retrying(true, || self.refill(&shop, &spec)).await.is_err() {
                break;
            }
            todo = short;
        }
        answers
    }

    /// Answers the unanswered requests that cannot be met even if every unit
    /// no live hold has were free (one lock-free read for all of them), as a
    /// reserve alone would: `insufficient_stock`, or the replay of its key.
    async fn turn_away_sold_out(&self, reqs: &[ReserveRequest], answers: &mut [Option<Result<Reserved, Error>>]) {
        let open: Vec<usize> = (0..reqs.len()).filter(|&i| answers[i].is_none()).collect();
        if open.is_empty() {
            return;
        }
        let spec: Vec<(ItemId, Option<LocationId>)> = open.iter().flat_map(|&i| candidates(&reqs[i])).collect();
        // An unsettled read refuses nothing: the requests go on alone, whose
        // sold-out check reads again (`sold_out`).
        let Ok((rows, false)) = self.available(reqs[0].shop(), &spec).await else { return };
        // A request that goes on alone may take units of its items first; a
        // later request that wants one of them is judged after it, alone.
        let mut tainted: HashSet<&ItemId> = HashSet::new();
        let mut sold_out = Vec::new();
        for i in open {
            let items: Vec<&ItemId> = reqs[i].lines().iter().map(|l| &l.item).collect();
            if items.iter().any(|item| tainted.contains(item)) {
                tainted.extend(items);
                continue;
            }
            match verdict(&reqs[i], &rows) {
                Verdict::Maybe(_) => tainted.extend(items),
                Verdict::SoldOut(shortfalls) => sold_out.push((i, shortfalls)),
            }
        }
        if sold_out.is_empty() {
            return;
        }
        // A key already used answers as a replay; one look for all the keys,
        // after the read above: a key unused now was unused then (keys are
        // never given back), so the refusal stands as of that read.
        let keys: Vec<&IdempotencyKey> = sold_out.iter().map(|(i, _)| reqs[*i].key()).collect();
        let Ok(used) = self.retrying(true, || self.keys_used(reqs[0].shop(), &keys)).await else { return };
        for (i, shortfalls) in sold_out {
            answers[i] = if used.contains(reqs[i].key()) {
                match self.retrying(true, || self.replay(&reqs[i])).await {
                    Ok(Some(r)) => Some(Ok(r)),
                    Ok(None) => Some(Err(Error::InsufficientStock(shortfalls))),
                    Err(_) => None,
                }
            } else {
                Some(Err(Error::InsufficientStock(shortfalls)))
            };
        }
    }

    /// Which of `keys` a reservation of `shop` has, from one lock-free read.
    async fn keys_used(&self, shop: &ShopId, keys: &[&IdempotencyKey]) -> Result<HashSet<IdempotencyKey>, Fail> {
        let mut c = run::Solo::<D>::acquire(&self.pool).await?;
        let _lease = tag::Lease::start();
        let used = D::keys_used(&mut c, shop, keys).await?;
        c.done().await?;
        Ok(used.into_iter().collect())
    }

    /// One attempt of a batch's fast path: for each request, its hold, or
    /// why it has none (nothing changed for it). One transaction: the keys
    /// already used and one pick of the units of the whole batch (one round
    /// trip on PostgreSQL), the deal (in this process, in arrival order:
    /// [`Plan::deal`]), one delete of the units given away and the holds and
    /// their lines inserted set-based (again one round trip on PostgreSQL).
    async fn fast_batch(&self, reqs: &[&ReserveRequest]) -> Result<Batch, Fail> {
        let Some(first) = reqs.first() else { return Ok(Batch::default()) };
        let shop = first.shop();
        let plan = Plan::of(reqs);
        let events = self.outbox.wants(self, None, shop, &[Topic::ReservationHeld]).await?;
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let keys: Vec<&IdempotencyKey> = reqs.iter().map(|r| r.key()).collect();
        let (units, used) = D::pick_batch(&mut tx, shop, &plan.wants, &keys).await?;
        let used: HashSet<IdempotencyKey> = used.into_iter().collect();
        let (dealt, given) = plan.deal(reqs, &used, units);
        let holds: Vec<(&ReserveRequest, Vec<Allocation>)> = reqs
            .iter()
            .zip(&dealt)
            .filter_map(|(r, d)| match d {
                Dealt::Held(taken) => Some((*r, allocations(taken))),
                _ => None,
            })
            .collect();
        // Units are given only to requests that got all they asked for.
        let mut inserted =
            if holds.is_empty() { Vec::new() } else { D::hold_batch(&mut tx, shop, &given, &holds).await? }.into_iter();
        let mut outcomes = Vec::with_capacity(reqs.len());
        for d in dealt {
            outcomes.push(match d {
                Dealt::Held(taken) => {
                    let (id, expires_at) = inserted
                        .next()
                        .ok_or_else(|| sqlx::Error::Protocol("hold_batch answered fewer holds".into()))?;
                    Fast::Held { id, expires_at, taken }
                }
                Dealt::Short => Fast::Short,
                Dealt::KeyTaken => Fast::KeyTaken,
            });
        }
        // The batch's new holds as events, in the same transaction: one
        // statement for all of them, none without a subscription.
        if events && !holds.is_empty() {
            let events: Vec<Event> = reqs
                .iter()
                .zip(&outcomes)
                .filter_map(|(req, f)| match f {
                    Fast::Held { id, expires_at, taken } => {
                        let hold = new_hold(req, *id, *expires_at, taken.clone()).reservation;
                        Some(Event::reservation(Topic::ReservationHeld, shop, &hold))
                    }
                    _ => None,
                })
                .collect();
            self.write_events(&mut tx, &events).await?;
        }
        let took = holds.iter().flat_map(|(_, lines)| lines);
        self.watch(&mut tx, shop, took.map(|a| (a.item.clone(), a.location.clone(), -i64::from(a.quantity)))).await?;
        tx.commit().await?;
        self.refill_ahead(shop, &given);
        Ok(Batch { outcomes })
    }

    /// A batch of claims, releases and extends of one shop, in arrival
    /// order, in one transaction: the reservation rows are locked in id
    /// order (lock order step 1), so two batches never wait on each other in
    /// a cycle. A request that fails (not found, the wrong status) changes
    /// nothing and fails no other; the batch's failure sends each on alone.
    pub(super) async fn settle_batch(
        &self,
        shop: &ShopId,
        ops: Vec<(ReservationId, Settle)>,
    ) -> Vec<Result<Reservation, Error>> {
        if ops.len() == 1 {
            let (id, op) = ops[0];
            return vec![self.retrying(true, || self.settle_once(shop, id, op)).await];
        }
        match self.retrying(true, || self.settle_all(shop, &ops)).await {
            Ok(answers) => answers,
            Err(_) => {
                let mut answers = Vec::with_capacity(ops.len());
                for &(id, op) in &ops {
                    answers.push(self.retrying(true, || self.settle_once(shop, id, op)).await);
                }
                answers
            }
        }
    }
}

/// What the deal gave one request of a batch.
#[derive(Debug, Clone)]
enum Dealt {
    Held(Vec<Taken>),
    /// Nothing: it goes on (refill, then alone) after the batch.
    Short,
    KeyTaken,
}

/// A pool the deal draws on: an item and its location as the batch asked
/// for it (`None`: the first location that stocks the item).
type PoolKey = (ItemId, Option<LocationId>);

/// A batch's wants, summed per pool, for one pick.
#[derive(Debug)]
struct Plan {
    wants: Vec<Want>,
    /// Per item, whether the batch asks for it by location (`true`) or as
    /// the first location that stocks it. A request that asks the other way
    /// than the first request of its item is left out of the deal (`false`
    /// in `dealable`): the two could name the same rows.
    by_location: HashMap<ItemId, bool>,
    dealable: Vec<bool>,
}

impl Plan {
    fn of(reqs: &[&ReserveRequest]) -> Self {
        let mut sums: Vec<(PoolKey, u32)> = Vec::new();
        let mut by_location: HashMap<ItemId, bool> = HashMap::new();
        let mut dealable = Vec::with_capacity(reqs.len());
        for req in reqs {
            let wants = fast_wants(req);
            let ok = wants
                .iter()
                .all(|w| *by_location.entry(w.item.clone()).or_insert(w.location.is_some()) == w.location.is_some());
            dealable.push(ok);
            if !ok {
                continue;
            }
            for w in wants {
                let key = (w.item, w.location);
                match sums.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n += w.qty,
                    None => sums.push((key, w.qty)),
                }
            }
        }
        let wants = sums.into_iter().map(|((item, location), qty)| Want { item, location, qty }).collect();
        Plan { wants, by_location, dealable }
    }

    /// Deals `units` out in arrival order: a request gets its units only
    /// when every line is filled and its key is new. A request left short
    /// takes its items out of the rest of the deal (the later requests for
    /// them go on after it), so no request takes a unit an earlier one could
    /// have had. Returns each request's share and every unit given away.
    fn deal(
        &self,
        reqs: &[&ReserveRequest],
        used: &HashSet<IdempotencyKey>,
        units: Vec<Unit>,
    ) -> (Vec<Dealt>, Vec<Unit>) {
        let mut pools: HashMap<PoolKey, VecDeque<Unit>> = HashMap::new();
        for u in units {
            let by_location = self.by_location.get(&u.item).copied().unwrap_or(true);
            let key = (u.item.clone(), by_location.then(|| u.location.clone()));
            pools.entry(key).or_default().push_back(u);
        }
        let (mut dealt, mut given) = (Vec::with_capacity(reqs.len()), Vec::new());
        let mut tainted: HashSet<ItemId> = HashSet::new();
        for (req, &dealable) in reqs.iter().zip(&self.dealable) {
            let wants = fast_wants(req);
            if used.contains(req.key()) {
                dealt.push(Dealt::KeyTaken);
                continue;
            }
            let mut need: Vec<(PoolKey, u32)> = Vec::new();
            for w in &wants {
                let key = (w.item.clone(), w.location.clone());
                match need.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n += w.qty,
                    None => need.push((key, w.qty)),
                }
            }
            let fits = dealable
                && wants.iter().all(|w| !tainted.contains(&w.item))
                && need.iter().all(|(k, n)| pools.get(k).is_some_and(|p| p.len() >= *n as usize));
            if !fits {
                tainted.extend(wants.into_iter().map(|w| w.item));
                dealt.push(Dealt::Short);
                continue;
            }
            let mut taken: Vec<Taken> = Vec::new();
            for (k, n) in need {
                let pool = pools.get_mut(&k).expect("checked above");
                for u in pool.drain(..n as usize) {
                    match taken.iter_mut().find(|t| t.item == u.item && t.location == u.location) {
                        Some(t) => t.count += 1,
                        None => taken.push(Taken { item: u.item.clone(), location: u.location.clone(), count: 1 }),
                    }
                    given.push(u);
                }
            }
            dealt.push(Dealt::Held(taken));
        }
        (dealt, given)
    }
}
