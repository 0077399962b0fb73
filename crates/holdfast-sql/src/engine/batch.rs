//! The batches of request coalescing (coalesce.rs): a batch of reserves, or
//! of claims, releases and extends, of one shop goes to the database as one
//! statement or one transaction, and every request gets the answer it would
//! have had alone.
//!
//! A batch is only ever the *fast* part of each operation, in arrival order.
//! What a batch cannot settle by itself — a reserve its pool rows did not
//! fill, an idempotency key someone else holds, a key twice in one batch, a
//! batch the database refused — goes on alone afterwards, through the same
//! code as without coalescing, in arrival order: the slow path, the replay,
//! the retries. So no request sees an error it would not have seen alone,
//! and within a batch no request takes a unit an earlier one could have had.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use holdfast_core::{Error, ItemId, LocationId, Reservation, ReservationId, ReserveRequest, Reserved, ShopId};

use super::reserve::{Verdict, allocations, candidate_spec as candidates, fast_wants, new_hold, verdict};
use super::settle::Settle;
use super::{Fail, SqlStore};
use crate::dialect::{Batch, Dialect, Fast, ReserveBatch, TxMode};
use crate::driver::Driver;
use crate::tag;

#[cfg(feature = "testing")]
#[async_trait::async_trait]
impl<D: Dialect> crate::BatchReserve for SqlStore<D> {
    async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Result<Reserved, Error>> {
        crate::tag::op("reserve", SqlStore::reserve_batch(self, reqs)).await
    }

    async fn settle_batch(&self, shop: &ShopId, ops: Vec<(ReservationId, Settle)>) -> Vec<Result<Reservation, Error>> {
        crate::tag::op("settle", SqlStore::settle_batch(self, shop, ops)).await
    }
}

impl<D: Dialect> SqlStore<D> {
    /// One reserve alone: the fast path, the slow path, the retries.
    pub(super) async fn reserve_alone(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        self.retrying(true, || self.reserve_once(req)).await
    }

    /// A batch of reserves of one shop, in arrival order.
    ///
    /// 1. The batch's fast path (one statement, or one transaction).
    /// 2. If some came up short: one transaction refills the pools they
    ///    drew on from the ledger (the slow path's refill, once for all of
    ///    them), and the fast path runs again for them.
    /// 3. What is still short is checked against one lock-free read of the
    ///    units no live hold has: a request that cannot be met even if all
    ///    of them were free is turned away here (or answered as a replay).
    /// 4. Everything else goes on alone, in arrival order.
    pub(super) async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Result<Reserved, Error>> {
        self.counters.reserve_batches.fetch_add(1, Ordering::Relaxed);
        self.counters.reserves_batched.fetch_add(reqs.len() as u64, Ordering::Relaxed);
        if reqs.len() == 1 {
            return vec![self.reserve_alone(&reqs[0]).await];
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
            let spec: Vec<(ItemId, Option<LocationId>)> = short.iter().flat_map(|&i| candidates(&reqs[i])).collect();
            if self.retrying(true, || self.refill(&shop, &spec)).await.is_err() {
                break;
            }
            todo = short;
        }
        self.turn_away_sold_out(&reqs, &mut answers).await;
        let mut out = Vec::with_capacity(reqs.len());
        for (req, answer) in reqs.iter().zip(answers) {
            out.push(match answer {
                Some(a) => a,
                None => self.reserve_alone(req).await,
            });
        }
        out
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
        let Ok(Some(rows)) = self.available(reqs[0].shop(), &spec).await else { return };
        // A request that goes on alone may take units of its items first; a
        // later request that wants one of them is judged after it, alone.
        let mut tainted: HashSet<&ItemId> = HashSet::new();
        for i in open {
            let items: Vec<&ItemId> = reqs[i].lines().iter().map(|l| &l.item).collect();
            if items.iter().any(|item| tainted.contains(item)) {
                tainted.extend(items);
                continue;
            }
            match verdict(&reqs[i], &rows) {
                Verdict::Maybe(_) => tainted.extend(items),
                Verdict::SoldOut(shortfalls) => {
                    answers[i] = match self.retrying(true, || self.replay(&reqs[i])).await {
                        Ok(Some(r)) => Some(Ok(r)),
                        Ok(None) => Some(Err(Error::InsufficientStock(shortfalls))),
                        Err(_) => None,
                    };
                }
            }
        }
    }

    /// One attempt of a batch's fast path: for each request, its hold, or
    /// why it has none (nothing changed for it).
    async fn fast_batch(&self, reqs: &[&ReserveRequest]) -> Result<Batch, Fail> {
        if D::RESERVE_BATCH == ReserveBatch::Statement {
            let mut c = self.pool.acquire().await?;
            let _lease = tag::Lease::transaction();
            return Ok(D::reserve_batch(&mut c, reqs).await?);
        }
        // One transaction; each request's take inside a savepoint of its
        // own, given back whole when it comes up short.
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let mut out = Vec::with_capacity(reqs.len());
        // Items of requests left short: a later request that wants one goes
        // alone after them (see reserve_batch.sql).
        let mut tainted: HashSet<ItemId> = HashSet::new();
        for req in reqs {
            let wants = fast_wants(req);
            if wants.iter().any(|w| tainted.contains(&w.item)) {
                tainted.extend(wants.into_iter().map(|w| w.item));
                out.push(Fast::Short);
                continue;
            }
            D::Db::execute(&mut tx, &tag::sql("SAVEPOINT hold"), &[]).await?;
            let taken = D::take_units(&mut tx, req.shop(), &wants, false).await?;
            let filled =
                wants.iter().all(|w| taken.iter().filter(|t| t.item == w.item).map(|t| t.count).sum::<u32>() == w.qty);
            let outcome = match filled {
                false => Fast::Short,
                true => {
                    let lines = allocations(&taken);
                    match D::insert_hold(&mut tx, req, &lines).await? {
                        Some((id, expires_at)) => Fast::Held { id, expires_at, taken },
                        None => Fast::KeyTaken,
                    }
                }
            };
            if matches!(outcome, Fast::Short) {
                tainted.extend(wants.iter().map(|w| w.item.clone()));
            }
            let end = if matches!(outcome, Fast::Held { .. }) {
                "RELEASE SAVEPOINT hold"
            } else {
                "ROLLBACK TO SAVEPOINT hold"
            };
            D::Db::execute(&mut tx, &tag::sql(end), &[]).await?;
            out.push(outcome);
        }
        tx.commit().await?;
        Ok(Batch { outcomes: out })
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
