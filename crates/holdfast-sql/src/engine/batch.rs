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

use holdfast_core::{Error, Reservation, ReservationId, ReserveRequest, Reserved, ShopId};

use super::reserve::{allocations, fast_wants, new_hold};
use super::settle::Settle;
use super::{Fail, SqlStore};
use crate::dialect::{Dialect, Fast, ReserveBatch, TxMode};
use crate::driver::Driver;
use crate::tag;

impl<D: Dialect> SqlStore<D> {
    /// One reserve alone: the fast path, the slow path, the retries.
    pub(super) async fn reserve_alone(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        self.retrying(true, || self.reserve_once(req)).await
    }

    /// A batch of reserves of one shop, in arrival order.
    pub(super) async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Result<Reserved, Error>> {
        if reqs.len() == 1 {
            return vec![self.reserve_alone(&reqs[0]).await];
        }
        // The first request of each key goes in the batch; a repeat goes on
        // alone after it, and replays what it made.
        let mut keys = HashSet::new();
        let first: Vec<usize> = (0..reqs.len()).filter(|&i| keys.insert(reqs[i].key().clone())).collect();
        let batch: Vec<&ReserveRequest> = first.iter().map(|&i| &reqs[i]).collect();
        // A batch the database keeps refusing sends every request on alone.
        let fast = self.retrying(true, || self.fast_batch(&batch)).await.unwrap_or_default();
        let mut held: Vec<Option<Reserved>> = vec![None; reqs.len()];
        for (&i, f) in first.iter().zip(fast) {
            if let Fast::Held { id, expires_at, taken } = f {
                held[i] = Some(new_hold(&reqs[i], id, expires_at, taken));
            }
        }
        let mut answers = Vec::with_capacity(reqs.len());
        for (req, held) in reqs.iter().zip(held) {
            answers.push(match held {
                Some(r) => Ok(r),
                None => self.reserve_alone(req).await,
            });
        }
        answers
    }

    /// One attempt of a batch's fast path: for each request, its hold, or
    /// why it has none (nothing changed for it).
    async fn fast_batch(&self, reqs: &[&ReserveRequest]) -> Result<Vec<Fast>, Fail> {
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
        for req in reqs {
            D::Db::execute(&mut tx, &tag::sql("SAVEPOINT hold"), &[]).await?;
            let wants = fast_wants(req);
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
            let end = if matches!(outcome, Fast::Held { .. }) {
                "RELEASE SAVEPOINT hold"
            } else {
                "ROLLBACK TO SAVEPOINT hold"
            };
            D::Db::execute(&mut tx, &tag::sql(end), &[]).await?;
            out.push(outcome);
        }
        tx.commit().await?;
        Ok(out)
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
        match self.retrying(true, || self.settle_together(shop, &ops)).await {
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

    async fn settle_together(
        &self,
        shop: &ShopId,
        ops: &[(ReservationId, Settle)],
    ) -> Result<Vec<Result<Reservation, Error>>, Fail> {
        let mut order: Vec<usize> = (0..ops.len()).collect();
        order.sort_by_key(|&i| (ops[i].0, i));
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let mut answers: Vec<Option<Result<Reservation, Error>>> = vec![None; ops.len()];
        for i in order {
            let (id, op) = ops[i];
            answers[i] = Some(match self.settle_in(&mut tx, shop, id, op).await {
                Ok(r) => Ok(r),
                Err(Fail::Domain(e)) => Err(e),
                Err(fail) => return Err(fail),
            });
        }
        tx.commit().await?;
        Ok(answers.into_iter().map(|a| a.expect("every request answered")).collect())
    }
}
