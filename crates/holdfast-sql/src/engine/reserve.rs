//! Reserve: the fast path (every line from its pool with SKIP LOCKED, one
//! round trip), the lock-free sold-out check, and the slow path under the
//! ledger locks with the inline refill (docs/design.md, "The pool").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use holdfast_core::{
    Allocation, Error, ItemId, LocationId, Reservation, ReservationStatus, ReserveRequest, Reserved, ShopId, Shortfall,
    Topic,
};

use super::{Contention, Fail, SqlStore};
use crate::dialect::{Conn, Dialect, Fast, Head, Ledger, LedgerLock, Spec, Stmt, Tx, TxMode, Want};
use crate::run;
use crate::tag;
use crate::webhooks::Event;

/// Units of an (item, location) that no live hold has.
pub(super) use crate::dialect::Unheld;

/// What the lock-free look at a short reserve found.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Not enough units even if every unit no live hold has were free.
    SoldOut(Vec<Shortfall>),
    /// Perhaps enough; the ledger rows that exist.
    Maybe(Vec<Key>),
}

impl Verdict {
    /// "Perhaps": the slow path decides, over the ledger rows of `rows`.
    fn maybe(rows: &[Unheld]) -> Self {
        Verdict::Maybe(rows.iter().map(|(i, l, _)| (i.clone(), l.clone())).collect())
    }
}

/// A ledger row locked by this transaction, and what it has done to it.
#[derive(Debug)]
struct Locked {
    row: Ledger,
    /// Expired holds released and pending rows folded into `row`.
    prepared: bool,
    /// `row` changed and must be written back.
    dirty: bool,
}

type Key = (ItemId, LocationId);

impl<D: Dialect> SqlStore<D> {
    /// One attempt of a reserve.
    ///
    /// Fast path: one statement takes, for every line, units from the pool of
    /// its first candidate location with `SKIP LOCKED`. When every line is
    /// filled, the hold is inserted and the transaction commits: no ledger
    /// row is touched.
    ///
    /// Otherwise the fast path rolls back *before* anything waits for a
    /// ledger lock, and the slow path runs in a new transaction. So a
    /// transaction that holds pool rows never waits for a ledger lock, and a
    /// slow-path transaction (which holds the ledger lock) may safely wait for
    /// the pool rows that fast-path transactions still hold: they finish
    /// without waiting for it. Without this rule, short carts holding a few
    /// units each would wait on each other at sell-out and retry forever.
    ///
    /// `queued`: set once this request has waited at an item's gate and
    /// started over; the next time it queues there (engine/gate.rs).
    pub(super) async fn reserve_once(&self, req: &ReserveRequest, queued: &AtomicBool) -> Result<Reserved, Fail> {
        let wants = fast_wants(req);
        if let Some(done) = self.fast_path(req, &wants).await? {
            return Ok(done);
        }
        let spec = candidate_spec(req);
        let mut verdict = self.sold_out(req, &spec).await?;
        // At most one slow path per item of this process goes to the ledger
        // rows (engine/gate.rs). The first time a request finds the gate
        // taken it waits for the holder and starts over at the fast path,
        // with the others that waited, where the holder's refill is; the
        // next time it queues, first come first served, and on its turn
        // looks again before it goes on.
        let mut _pass = None;
        if let Verdict::Maybe(_) = verdict {
            let items = req.lines().iter().map(|l| &l.item);
            let Some(pass) = self.gates.enter(req.shop(), items, queued.load(Ordering::Relaxed)).await else {
                queued.store(true, Ordering::Relaxed);
                return Err(Fail::Again);
            };
            if pass.waited() {
                if let Some(done) = self.fast_path(req, &wants).await? {
                    return Ok(done);
                }
                verdict = self.sold_out(req, &spec).await?;
            }
            _pass = Some(pass);
        }
        let verdict = match verdict {
            Verdict::SoldOut(shortfalls) => Err(Fail::Domain(Error::InsufficientStock(shortfalls))),
            Verdict::Maybe(existing) => {
                let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                let _lease = tag::Lease::transaction();
                let mut held = vec![BTreeMap::new(); req.lines().len()];
                match self.slow_path(&mut tx, req, &spec, &existing, &mut held).await {
                    Ok((prepared, commit_by)) => return self.insert_hold(tx, req, &held, prepared, commit_by).await,
                    Err(Fail::LedgerBusy) => {
                        // Another process (or a batch's refill) is refilling:
                        // wait for it holding nothing, then start over from
                        // the fast path, where its rows are.
                        tx.rollback().await?;
                        let mut c = run::Solo::<D>::acquire(&self.pool).await?;
                        D::lock_ledgers(&mut c, req.shop(), &spec, LedgerLock::Await).await?;
                        c.done().await?;
                        Err(Fail::Again)
                    }
                    Err(fail) => Err(fail),
                }
            }
        };
        match verdict {
            // A replayed key must answer with its reservation even when the
            // stock has gone since.
            Err(Fail::Domain(Error::InsufficientStock(s))) => match self.replay(req).await? {
                Some(r) => Ok(r),
                None => Err(Fail::Domain(Error::InsufficientStock(s))),
            },
            other => other,
        }
    }

    /// The fast path: every line from the pool of its first candidate
    /// location, with SKIP LOCKED. `None` when some line came up short; then
    /// nothing is held any more (no pool row, no ledger lock).
    async fn fast_path(&self, req: &ReserveRequest, wants: &[Want]) -> Result<Option<Reserved>, Fail> {
        // With a subscription to new holds or to inventory events, the hold
        // and its events are written in one transaction: the one-statement
        // form has no room for them.
        let topics = [Topic::ReservationHeld, Topic::InventorySoldOut, Topic::InventoryRestocked];
        if D::ONE_STATEMENT_FAST_PATH && !self.outbox.wants(self, None, req.shop(), &topics).await? {
            let fast = {
                let mut c = run::Solo::<D>::acquire(&self.pool).await?;
                let _lease = tag::Lease::transaction();
                let fast = D::reserve_fast(&mut c, req, wants).await?;
                c.done().await?;
                fast
            };
            return match fast {
                Fast::Held { id, expires_at, taken } => Ok(Some(new_hold(req, id, expires_at, taken))),
                Fast::KeyTaken => match self.replay(req).await? {
                    Some(r) => Ok(Some(r)),
                    // The other holder of the key rolled back meanwhile.
                    None => Err(Fail::Contended(Contention::KeyRace)),
                },
                Fast::Short => Ok(None),
            };
        }
        // The dialect has no one-statement fast path: the same in a
        // transaction, rolled back when short.
        let mut tx = D::begin(&self.pool, TxMode::Write).await?;
        let _lease = tag::Lease::transaction();
        let taken = D::take_units(&mut tx, req.shop(), wants, false).await?;
        // Items are unique within a request, so the item names the line.
        let line_of: BTreeMap<&ItemId, usize> = req.lines().iter().enumerate().map(|(i, l)| (&l.item, i)).collect();
        let mut held: Vec<BTreeMap<LocationId, u32>> = vec![BTreeMap::new(); req.lines().len()];
        for t in taken {
            if let Some(&i) = line_of.get(&t.item) {
                *held[i].entry(t.location).or_default() += t.count;
            }
        }
        if (0..req.lines().len()).all(|i| total(&held[i]) == req.lines()[i].quantity.get()) {
            return self.insert_hold(tx, req, &held, Vec::new(), None).await.map(Some);
        }
        tx.rollback().await?;
        Ok(None)
    }

    /// The cheap answer for a sold-out item: from one lock-free snapshot,
    /// the shortfalls when the request cannot be met even if every unit no
    /// live hold has were free; otherwise the ledger rows that exist, and the
    /// slow path must find out.
    ///
    /// Only a refusal needs a settled read (`available.sql`): one made while
    /// a hold expired around the snapshot would report counts of two
    /// moments. Such a read is made again; if holds keep expiring around
    /// every read, the verdict is "maybe", and the slow path decides under
    /// the ledger locks.
    async fn sold_out(&self, req: &ReserveRequest, spec: &Spec) -> Result<Verdict, Fail> {
        let mut rows = Vec::new();
        for _ in 0..super::reports::UNSETTLED_READS {
            let unsettled;
            (rows, unsettled) = self.available(req.shop(), spec).await?;
            match verdict(req, &rows) {
                Verdict::SoldOut(_) if unsettled => continue,
                v => return Ok(v),
            }
        }
        Ok(Verdict::maybe(&rows))
    }

    /// Units of each matching (item, location) that no live hold has, from
    /// one lock-free snapshot, and whether the read is unsettled: a hold
    /// expired around the snapshot (as for `levels`), so the read may count
    /// its units free while missing what committed after its expiry, or the
    /// other way round.
    pub(super) async fn available(&self, shop: &ShopId, spec: &Spec) -> Result<crate::dialect::Available, Fail> {
        let mut c = run::Solo::<D>::acquire(&self.pool).await?;
        let _lease = tag::Lease::start();
        let read = D::available(&mut c, shop, spec).await?;
        c.done().await?;
        Ok(read)
    }

    /// Lock order step 4: inserts the hold for the units taken, and commits.
    /// `prepared`: ledger rows whose expired holds the slow path released,
    /// for the inventory events (engine/watch.rs). `commit_by`: when the
    /// COMMIT must be sent at the latest; past it the transaction rolls back
    /// and the reserve starts over.
    async fn insert_hold(
        &self,
        mut tx: Tx<D>,
        req: &ReserveRequest,
        held: &[BTreeMap<LocationId, u32>],
        prepared: Vec<Key>,
        commit_by: Option<Instant>,
    ) -> Result<Reserved, Fail> {
        let mut lines: Vec<Allocation> = Vec::new();
        for (i, h) in held.iter().enumerate() {
            for (loc, &n) in h {
                if n > 0 {
                    lines.push(Allocation { item: req.lines()[i].item.clone(), location: loc.clone(), quantity: n });
                }
            }
        }
        lines.sort();
        if lines.is_empty() {
            // allow_partial with nothing at all to hold.
            drop(tx);
            return match self.replay(req).await? {
                Some(r) => Ok(r),
                None => Err(Fail::Domain(Error::InsufficientStock(shortfalls(req, held)))),
            };
        }
        match D::insert_hold(&mut tx, req, &lines).await? {
            Some((id, expires_at)) => {
                let reservation =
                    Reservation { id, key: req.key().clone(), status: ReservationStatus::Held, expires_at, lines };
                let event = Event::reservation(Topic::ReservationHeld, req.shop(), &reservation);
                self.write_events(&mut tx, &[event]).await?;
                let took =
                    reservation.lines.iter().map(|a| (a.item.clone(), a.location.clone(), -i64::from(a.quantity)));
                let expired = prepared.into_iter().map(|(item, location)| (item, location, 0));
                self.watch(&mut tx, req.shop(), took.chain(expired)).await?;
                if commit_by.is_some_and(|by| Instant::now() > by) {
                    // Too late: a hold that would change this answer may
                    // expire before the commit is visible.
                    tx.rollback().await?;
                    return Err(Fail::Contended(Contention::LateCommit));
                }
                tx.commit().await?;
                Ok(Reserved { reservation, created: true })
            }
            None => {
                // The key is taken: give the units back and answer as a replay.
                tx.rollback().await?;
                match self.replay(req).await? {
                    Some(r) => Ok(r),
                    // The other holder of the key rolled back meanwhile.
                    None => Err(Fail::Contended(Contention::KeyRace)),
                }
            }
        }
    }

    /// The existing reservation of `req.key()`, if any: returned when the lines
    /// match, `IdempotencyConflict` when they do not.
    pub(super) async fn replay(&self, req: &ReserveRequest) -> Result<Option<Reserved>, Fail> {
        let mut tx = D::begin(&self.pool, TxMode::Snapshot).await?;
        let _lease = tag::Lease::transaction();
        let Some(head) = run::all::<D, _>(
            &mut tx,
            Stmt::FindByKey,
            &[req.shop().as_str().into(), req.key().as_str().into()],
            run::head::<D>,
        )
        .await?
        .pop() else {
            return Ok(None);
        };
        if head.fingerprint != req.fingerprint() {
            return Err(Fail::Domain(Error::IdempotencyConflict(req.key().to_string())));
        }
        let lines = run::lines_of::<D>(&mut tx, req.shop(), head.id).await?;
        tx.commit().await?;
        Ok(Some(Reserved { reservation: reservation(head, lines), created: false }))
    }

    /// A reserve under the ledger locks of every candidate location of every
    /// line (taken at once, in lock order). For each candidate in order, see
    /// [`Self::acquire`]. Afterwards the pool of every ledger row touched is
    /// refilled, so only one transaction per (item, location) refills at a
    /// time and the others find rows instead of queueing here. Returns the
    /// ledger rows it prepared (released expired holds at), and when the
    /// hold's COMMIT must be sent at the latest, if holds about to expire
    /// where it came up short would change its answer (`none_in_flight`).
    async fn slow_path(
        &self,
        tx: &mut Conn<D>,
        req: &ReserveRequest,
        spec: &Spec,
        existing: &[Key],
        held: &mut [BTreeMap<LocationId, u32>],
    ) -> Result<(Vec<Key>, Option<Instant>), Fail> {
        // Take the ledger locks without waiting: when another transaction
        // holds one, it is refilling that pool, and queueing behind it here —
        // each waiter then holding the lock through its own commit — would
        // serialise the whole herd. The caller waits for it holding nothing.
        let rows = D::lock_ledgers(tx, req.shop(), spec, LedgerLock::Skip).await?;
        if existing.iter().any(|k| !rows.iter().any(|r| r.item == k.0 && r.location == k.1)) {
            return Err(Fail::LedgerBusy);
        }
        let mut ledgers: BTreeMap<Key, Locked> = rows
            .into_iter()
            .map(|row| ((row.item.clone(), row.location.clone()), Locked { row, prepared: false, dirty: false }))
            .collect();

        let mut still_short: Vec<(usize, Vec<LocationId>)> = Vec::new();
        // Candidates that came up short while a later one gave units, and
        // the fewest units there that would have changed that.
        let mut passed_over: Vec<(ItemId, LocationId, u32)> = Vec::new();
        for (i, (line, h)) in req.lines().iter().zip(held.iter_mut()).enumerate() {
            let qty = line.quantity.get();
            let candidates: Vec<LocationId> = match &line.locations {
                Some(locs) => locs.clone(),
                None => ledgers.keys().filter(|(it, _)| it == &line.item).map(|(_, l)| l.clone()).collect(),
            };
            if req.allow_split() {
                let mut short_here: Vec<LocationId> = Vec::new();
                for loc in &candidates {
                    let want = qty - total(h);
                    if want == 0 {
                        break;
                    }
                    let got = self.acquire(tx, req.shop(), &mut ledgers, &line.item, loc, want).await?;
                    *h.entry(loc.clone()).or_default() += got;
                    if got > 0 {
                        // Split: one more unit anywhere earlier would have
                        // been taken there instead.
                        passed_over.extend(short_here.drain(..).map(|l| (line.item.clone(), l, 1)));
                    }
                    if got < want {
                        short_here.push(loc.clone());
                    }
                }
            } else {
                // The first candidate that can fill the whole line wins; what
                // was taken at the others goes back to their ledger rows.
                let mut chosen = None;
                // What each candidate lacked of the whole line.
                let mut lacked: BTreeMap<&LocationId, u32> = BTreeMap::new();
                for loc in &candidates {
                    let have = h.get(loc).copied().unwrap_or(0);
                    let got = self.acquire(tx, req.shop(), &mut ledgers, &line.item, loc, qty - have).await?;
                    *h.entry(loc.clone()).or_default() += got;
                    if have + got == qty {
                        chosen = Some(loc.clone());
                        break;
                    }
                    lacked.insert(loc, qty - have - got);
                }
                if let Some(chosen) = &chosen {
                    let before = candidates.iter().take_while(|l| *l != chosen);
                    passed_over.extend(before.map(|l| (line.item.clone(), l.clone(), lacked[l])));
                }
                // Without a winner keep the best single location: it is what a
                // partial reserve holds, and what a failing one reports.
                let keep = chosen.or_else(|| h.iter().max_by_key(|(_, n)| **n).map(|(l, _)| l.clone()));
                let give_back: Vec<(LocationId, u32)> =
                    h.iter().filter(|(l, _)| Some(*l) != keep.as_ref()).map(|(l, n)| (l.clone(), *n)).collect();
                for (loc, n) in give_back {
                    h.remove(&loc);
                    if n > 0 {
                        // Every candidate's ledger row is locked here, so the
                        // units go back to their own row's `unpooled`.
                        let locked = ledgers.get_mut(&(line.item.clone(), loc)).ok_or_else(|| {
                            Fail::Domain(Error::Internal("units taken from an unlocked location".into()))
                        })?;
                        locked.row.unpooled += n as i64;
                        locked.dirty = true;
                    }
                }
            }
            if total(h) < qty {
                still_short.push((i, candidates));
            }
        }

        // Whether this reserve will commit a hold: then holds about to
        // expire where it came up short set when it must commit by
        // (`none_in_flight`).
        let commits = (still_short.is_empty() || req.allow_partial()) && held.iter().any(|h| total(h) > 0);
        let mut commit_by: Option<Instant> = None;

        // Candidate order: a candidate passed over for a later one must have
        // been short for good, not because another transaction has its units
        // in flight (a sweeper releasing an expired hold, a fast path that
        // may roll back). Otherwise start over once they have landed.
        for (item, loc, matters) in &passed_over {
            let by = self.none_in_flight(tx, req.shop(), (item, loc), *matters, commits).await?;
            commit_by = commit_by.into_iter().chain(by).min();
        }

        if !still_short.is_empty() {
            // An empty SKIP LOCKED result is not "sold out": rows may be held
            // by transactions that can still roll back, and expired holds may
            // be in a sweeper's hands. Only when nothing is in flight is the
            // shortage real.
            for (i, candidates) in &still_short {
                for loc in candidates {
                    let by = self.none_in_flight(tx, req.shop(), (&req.lines()[*i].item, loc), 1, commits).await?;
                    commit_by = commit_by.into_iter().chain(by).min();
                }
            }
            if !req.allow_partial() {
                return Err(Fail::Domain(Error::InsufficientStock(shortfalls(req, held))));
            }
        }

        let prepared = ledgers.iter().filter(|(_, l)| l.prepared).map(|(k, _)| k.clone()).collect();
        self.write_back(tx, req.shop(), ledgers.into_values().filter(|l| l.dirty).map(|l| l.row)).await?;
        Ok((prepared, commit_by))
    }

    /// Takes up to `want` units of (item, location) for a transaction that
    /// holds the ledger lock. Pool rows come first: while this transaction
    /// waited for the lock, the holder before it most likely refilled the
    /// pool, and taking those rows needs no write to the ledger row, so a
    /// herd of short reserves passes through the lock quickly. When the pool
    /// is dry: release expired holds, fold pending rows, take units straight
    /// from `unpooled`; and last, wait for pool rows that fast-path
    /// transactions still hold (they commit or roll back without waiting for
    /// anything this transaction holds), so that what is left is really gone.
    async fn acquire(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        ledgers: &mut BTreeMap<Key, Locked>,
        item: &ItemId,
        location: &LocationId,
        want: u32,
    ) -> Result<u32, Fail> {
        let Some(locked) = ledgers.get_mut(&(item.clone(), location.clone())) else {
            return Ok(0); // nothing stocked there
        };
        let wants = [Want { item: item.clone(), location: Some(location.clone()), qty: want }];
        let mut got: u32 = D::take_units(tx, shop, &wants, false).await?.iter().map(|t| t.count).sum();
        if got < want {
            if !locked.prepared {
                self.prepare(tx, shop, &mut locked.row).await?;
                locked.prepared = true;
                locked.dirty = true;
            }
            let from_ledger = locked.row.unpooled.min((want - got) as i64);
            if from_ledger > 0 {
                locked.row.unpooled -= from_ledger;
                locked.dirty = true;
                got += from_ledger as u32;
            }
        }
        if got < want {
            let wants = [Want { item: item.clone(), location: Some(location.clone()), qty: want - got }];
            got += D::take_units(tx, shop, &wants, true).await?.iter().map(|t| t.count).sum::<u32>();
        }
        Ok(got)
    }
}

/// What the fast path wants: every line, whole, from its first candidate
/// location (`None`: the first location, in id order, that stocks the item).
pub(super) fn fast_wants(req: &ReserveRequest) -> Vec<Want> {
    req.lines()
        .iter()
        .map(|l| Want {
            item: l.item.clone(),
            location: l.locations.as_ref().map(|v| v[0].clone()),
            qty: l.quantity.get(),
        })
        .collect()
}

/// The answer for a hold just created from the units `taken`.
pub(super) fn new_hold(
    req: &ReserveRequest,
    id: holdfast_core::ReservationId,
    expires_at: chrono::DateTime<chrono::Utc>,
    taken: Vec<crate::dialect::Taken>,
) -> Reserved {
    let lines = allocations(&taken);
    let reservation = Reservation { id, key: req.key().clone(), status: ReservationStatus::Held, expires_at, lines };
    Reserved { reservation, created: true }
}

/// The units taken, as a hold's lines in (item, location) order.
pub(super) fn allocations(taken: &[crate::dialect::Taken]) -> Vec<Allocation> {
    let mut lines: Vec<Allocation> = taken
        .iter()
        .map(|t| Allocation { item: t.item.clone(), location: t.location.clone(), quantity: t.count })
        .collect();
    lines.sort();
    lines
}

/// Every candidate (item, location) of a request; `None` stands for every
/// location of the item.
pub(super) fn candidate_spec(req: &ReserveRequest) -> Vec<(ItemId, Option<LocationId>)> {
    req.lines()
        .iter()
        .flat_map(|line| match &line.locations {
            Some(locs) => locs.iter().map(|l| (line.item.clone(), Some(l.clone()))).collect(),
            None => vec![(line.item.clone(), None)],
        })
        .collect()
}

fn total(h: &BTreeMap<LocationId, u32>) -> u32 {
    h.values().sum()
}

fn shortfalls(req: &ReserveRequest, held: &[BTreeMap<LocationId, u32>]) -> Vec<Shortfall> {
    req.lines()
        .iter()
        .zip(held)
        .map(|(l, h)| Shortfall { item: l.item.clone(), requested: l.quantity.get(), available: total(h) })
        .collect()
}

pub(crate) fn reservation(head: Head, lines: Vec<Allocation>) -> Reservation {
    Reservation { id: head.id, key: head.key, status: head.status, expires_at: head.expires_at, lines }
}

/// The verdict on `req` from the units no live hold has (`rows`): sold out,
/// with what each line could have had, when it cannot be met even if every
/// one of them were free.
pub(super) fn verdict(req: &ReserveRequest, rows: &[Unheld]) -> Verdict {
    let mut shortfalls = Vec::new();
    let mut any_short = false;
    let mut any_units = false;
    for line in req.lines() {
        let at = |loc: &LocationId| {
            rows.iter().find(|(i, l, _)| i == &line.item && l == loc).map(|r| r.2.max(0)).unwrap_or(0)
        };
        let per_location: Vec<i64> = match &line.locations {
            Some(locs) => locs.iter().map(at).collect(),
            None => rows.iter().filter(|(i, _, _)| i == &line.item).map(|r| r.2.max(0)).collect(),
        };
        let best =
            if req.allow_split() { per_location.iter().sum() } else { per_location.into_iter().max().unwrap_or(0) };
        let qty = line.quantity.get();
        any_short |= best < qty as i64;
        any_units |= best > 0;
        shortfalls.push(Shortfall { item: line.item.clone(), requested: qty, available: best.min(qty as i64) as u32 });
    }
    let hopeless = if req.allow_partial() { !any_units } else { any_short };
    match hopeless {
        true => Verdict::SoldOut(shortfalls),
        false => Verdict::maybe(rows),
    }
}
