//! The sequential model of holdfast's inventory: what one correct store,
//! taking operations one at a time, answers to each. The checker replays a
//! history's operations through it in every order real time allows.
//!
//! The model changes in place and keeps an undo log, so the search can step
//! back in constant time per change; it keeps a hash of its whole state,
//! updated with every change, for the search's memo of states seen.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use super::history::{Alloc, Answer, Call, Held, Line, Qty, Short};

/// Slack, in microseconds, when a time the database chose is compared with
/// the client's clock (rounding of stored timestamps).
pub const SLACK_US: i64 = 20_000;

/// The id a hold made by the lost reserve `op` has in the model until a
/// replay names its real one.
pub fn ghost_hold(op: u64) -> i64 {
    -(op as i64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Status {
    Held,
    Claimed,
    Released,
    Expired,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Held => "held",
            Status::Claimed => "claimed",
            Status::Released => "released",
            Status::Expired => "expired",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Stock {
    on_hand: i64,
    reserved: i64,
    committed: i64,
}

impl Stock {
    fn available(&self) -> i64 {
        self.on_hand - self.reserved - self.committed
    }

    fn qty(&self) -> Qty {
        Qty { on_hand: self.on_hand, available: self.available(), reserved: self.reserved, committed: self.committed }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Hold {
    key: String,
    fingerprint: String,
    lines: Vec<Alloc>,
    status: Status,
    expires_at: i64,
    /// An extend (or the reserve) whose answer was lost may have moved the
    /// expiry to a time the model does not know.
    expiry_unknown: bool,
}

#[derive(Debug)]
enum Undo {
    Stock((String, String), Option<Stock>),
    Hold(i64, Option<Hold>),
    Key(String, Option<i64>),
    Applied(u64, bool),
}

/// One operation as the checker sees it: the call, the answer (`Unknown`
/// for an operation that may or may not have taken effect) and when it was
/// invoked and completed (microseconds; for a lost answer, the last moment
/// the operation may have taken effect).
#[derive(Debug, Clone)]
pub struct Op {
    pub n: u64,
    pub client: u32,
    pub call: Call,
    pub answer: Answer,
    pub invoked: i64,
    pub completed: i64,
}

impl Op {
    pub fn unknown(&self) -> bool {
        self.answer.is_unknown()
    }

    /// Whether the model, wherever it takes this op, leaves its state as it
    /// was: a refusal of any kind and a read of levels. (An answer that names a
    /// reservation may be a replay, which changes nothing, or a new hold.)
    pub fn read_only(&self) -> bool {
        match self.call {
            Call::Lapse { .. } => false,
            Call::Read { .. } | Call::Levels { .. } => !self.unknown(),
            _ => matches!(self.answer, Answer::Refused { .. }),
        }
    }
}

/// The inventory of one partition of a history.
#[derive(Debug, Default)]
pub struct Model {
    stock: BTreeMap<(String, String), Stock>,
    holds: HashMap<i64, Hold>,
    keys: HashMap<String, i64>,
    /// Stock changes taken, whose level may now be read.
    applied: HashSet<u64>,
    hash: u64,
    log: Vec<(Undo, u64)>,
}

fn h64(v: &impl Hash) -> u64 {
    let mut s = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut s);
    s.finish()
}

/// Canonical text of a cart's lines (order-free), as the store compares a
/// replay's lines with the original's.
pub fn fingerprint(lines: &[Line]) -> String {
    let mut v: Vec<String> = lines
        .iter()
        .map(|l| format!("{}:{}@{}", l.item, l.qty, l.locations.as_ref().map(|v| v.join(",")).unwrap_or_default()))
        .collect();
    v.sort();
    v.join(";")
}

/// The items one call touches, where the call names them.
pub fn items_of(call: &Call) -> Vec<String> {
    match call {
        Call::Reserve { lines, .. } => lines.iter().map(|l| l.item.clone()).collect(),
        Call::Stock { item, .. } | Call::Levels { item } => vec![item.clone()],
        Call::Read { item, .. } => vec![item.clone()],
        Call::Claim { .. } | Call::Release { .. } | Call::Extend { .. } | Call::Lapse { .. } => Vec::new(),
    }
}

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How far a read's answer is from this state: the units by which its
    /// quantities differ (a location missing or extra counts as many units
    /// as it holds, plus one). `None` for an op that is not a read of levels.
    pub fn distance(&self, op: &Op) -> Option<i64> {
        let apart = |a: &Qty, b: &Qty| {
            (a.on_hand - b.on_hand).abs() + (a.reserved - b.reserved).abs() + (a.committed - b.committed).abs()
        };
        let size = |q: &Qty| q.on_hand.abs() + q.reserved.abs() + q.committed.abs() + 1;
        let qty = |item: &str, l: &str| self.stock_of(item, l).unwrap_or_default().qty();
        match (&op.call, &op.answer) {
            (Call::Read { item, location, .. }, Answer::Level { qty: got, .. }) => {
                Some(apart(&qty(item, location), got))
            }
            (Call::Levels { item }, Answer::Levels { locations }) => {
                let want = self.locations_of(item);
                let mut d: i64 = locations
                    .iter()
                    .map(|(l, got)| if want.contains(l) { apart(&qty(item, l), got) } else { size(got) })
                    .sum();
                d += want
                    .iter()
                    .filter(|l| !locations.iter().any(|(g, _)| g == *l))
                    .map(|l| size(&qty(item, l)))
                    .sum::<i64>();
                Some(d)
            }
            _ => None,
        }
    }

    pub fn mark(&self) -> usize {
        self.log.len()
    }

    /// Undoes every change since `mark`.
    pub fn undo(&mut self, mark: usize) {
        while self.log.len() > mark {
            let (u, hash) = self.log.pop().expect("non-empty log");
            match u {
                Undo::Stock(k, v) => restore(&mut self.stock, k, v),
                Undo::Hold(k, v) => restore(&mut self.holds, k, v),
                Undo::Key(k, v) => restore(&mut self.keys, k, v),
                Undo::Applied(n, was) => {
                    if !was {
                        self.applied.remove(&n);
                    }
                }
            }
            self.hash = hash;
        }
    }

    fn set_stock(&mut self, k: (String, String), v: Stock) {
        let old = self.stock.insert(k.clone(), v);
        let before = self.hash;
        if let Some(o) = &old {
            self.hash ^= h64(&(0u8, &k, o));
        }
        self.hash ^= h64(&(0u8, &k, &v));
        self.log.push((Undo::Stock(k, old), before));
    }

    fn set_hold(&mut self, id: i64, v: Option<Hold>) {
        let old = match &v {
            Some(h) => self.holds.insert(id, h.clone()),
            None => self.holds.remove(&id),
        };
        let before = self.hash;
        if let Some(o) = &old {
            self.hash ^= h64(&(1u8, id, o));
        }
        if let Some(h) = &v {
            self.hash ^= h64(&(1u8, id, h));
        }
        self.log.push((Undo::Hold(id, old), before));
    }

    fn set_key(&mut self, key: String, id: i64) {
        let old = self.keys.insert(key.clone(), id);
        // Keys follow from the holds (each hold carries its key): no hash.
        self.log.push((Undo::Key(key, old), self.hash));
    }

    fn set_applied(&mut self, n: u64) {
        let was = !self.applied.insert(n);
        let before = self.hash;
        if !was {
            self.hash ^= h64(&(2u8, n));
        }
        self.log.push((Undo::Applied(n, was), before));
    }

    fn stock_of(&self, item: &str, location: &str) -> Option<Stock> {
        self.stock.get(&(item.to_string(), location.to_string())).copied()
    }

    fn locations_of(&self, item: &str) -> Vec<String> {
        self.stock.keys().filter(|(i, _)| i == item).map(|(_, l)| l.clone()).collect()
    }

    /// Moves a hold's units as its status changes.
    fn transition(&mut self, id: i64, to: Status) {
        let Some(mut h) = self.holds.get(&id).cloned() else { return };
        if h.status != Status::Held || to == Status::Held {
            return;
        }
        for a in &h.lines {
            let k = (a.item.clone(), a.location.clone());
            let mut s = self.stock.get(&k).copied().unwrap_or_default();
            s.reserved -= a.qty as i64;
            if to == Status::Claimed {
                s.committed += a.qty as i64;
            }
            self.set_stock(k, s);
        }
        h.status = to;
        self.set_hold(id, Some(h));
    }

    /// A lapsed hold held again, when its units are all still available.
    fn revive(&mut self, id: i64) -> bool {
        let Some(mut h) = self.holds.get(&id).cloned() else { return false };
        let free =
            h.lines.iter().all(|a| self.stock_of(&a.item, &a.location).is_some_and(|s| s.available() >= a.qty as i64));
        if h.status != Status::Expired || !free {
            return false;
        }
        for a in &h.lines {
            let k = (a.item.clone(), a.location.clone());
            let mut s = self.stock.get(&k).copied().unwrap_or_default();
            s.reserved += a.qty as i64;
            self.set_stock(k, s);
        }
        h.status = Status::Held;
        self.set_hold(id, Some(h));
        true
    }

    /// Takes `op`: `Ok` when its answer is what this model gives, `Err`
    /// with what it would have given otherwise. On `Err` the caller undoes
    /// to its mark. A hold's expiry is a step of its own ([`Call::Lapse`]).
    pub fn step(&mut self, op: &Op) -> Result<(), String> {
        let ghost = op.unknown();
        match &op.call {
            Call::Reserve { key, lines, ttl, partial, split } => {
                self.reserve(op, key, lines, *ttl, *partial, *split, ghost)
            }
            Call::Claim { id } => self.settle(op, *id, Status::Claimed, None, ghost),
            Call::Release { id } => self.settle(op, *id, Status::Released, None, ghost),
            Call::Extend { id, ttl } => self.settle(op, *id, Status::Held, Some(*ttl), ghost),
            Call::Stock { item, location, change, n } => self.stock_change(op, item, location, change, *n, ghost),
            Call::Lapse { id, at } => {
                // The hold expires now if this is still its expiry time. An
                // expiry a lost reserve or extend set is exactly the `at` of
                // that op's own step, whose window covers when it may have
                // taken effect; one an answer named is within the slack of
                // the answer's step.
                if let Some(h) = self.holds.get(id)
                    && h.status == Status::Held
                    && if h.expiry_unknown { h.expires_at == *at } else { (h.expires_at - at).abs() <= SLACK_US }
                {
                    self.transition(*id, Status::Expired);
                }
                Ok(())
            }
            Call::Read { of, item, location } => {
                if !self.applied.contains(of) {
                    return Err(format!("stock change {of} is not taken yet, so its level cannot be read"));
                }
                let want = self.stock_of(item, location).unwrap_or_default().qty();
                match &op.answer {
                    Answer::Level { location: l, qty } if l == location && *qty == want => Ok(()),
                    other => Err(format!("stock of {item}@{location} should be {want:?}, got {other:?}")),
                }
            }
            Call::Levels { item } => {
                if ghost {
                    return Ok(());
                }
                let want: Vec<(String, Qty)> = self
                    .locations_of(item)
                    .into_iter()
                    .map(|l| {
                        let q = self.stock_of(item, &l).unwrap_or_default().qty();
                        (l, q)
                    })
                    .collect();
                match &op.answer {
                    Answer::Levels { locations } if *locations == want => Ok(()),
                    other => Err(format!("levels should be {want:?}, got {other:?}")),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn reserve(
        &mut self,
        op: &Op,
        key: &str,
        lines: &[Line],
        ttl: u32,
        partial: bool,
        split: bool,
        ghost: bool,
    ) -> Result<(), String> {
        let fp = fingerprint(lines);
        if let Some(&id) = self.keys.get(key) {
            let h = self.holds[&id].clone();
            if ghost {
                return Ok(());
            }
            if h.fingerprint != fp {
                return refused(&op.answer, "idempotency_conflict", &[]);
            }
            let Answer::Reservation(got) = &op.answer else {
                return Err(format!("a replay of key {key} should answer reservation {id}, got {:?}", op.answer));
            };
            if got.created == Some(true) {
                return Err(format!("key {key} already had reservation {id}; the answer says it created {}", got.id));
            }
            if id < 0 {
                // The hold of an answer that was lost: its id is learnt now.
                if self.holds.contains_key(&got.id) {
                    return Err(format!("reservation {} answered for key {key} belongs to another key", got.id));
                }
                same_hold(got.id, &h, got, op)?;
                // And its expiry, which the answers' lapse steps use from
                // now on.
                let mut learnt = h.clone();
                if learnt.status == Status::Held && (got.status == "held" || got.status == "expired") {
                    learnt.expires_at = got.expires_at;
                    learnt.expiry_unknown = false;
                }
                self.set_hold(id, None);
                self.set_hold(got.id, Some(learnt));
                self.set_key(key.to_string(), got.id);
                return Ok(());
            };
            return same_hold(id, &h, got, op);
        }

        // Deal the lines as the store does.
        let mut held: Vec<Alloc> = Vec::new();
        let mut shorts: Vec<Short> = Vec::new();
        // For a line filled at one location from several equally good ones,
        // any of them is right.
        let mut ties: Vec<(usize, Vec<String>)> = Vec::new();
        for line in lines {
            let candidates = line.locations.clone().unwrap_or_else(|| self.locations_of(&line.item));
            let avail = |l: &String| self.stock_of(&line.item, l).map(|s| s.available().max(0)).unwrap_or(0) as u32;
            let mut got: Vec<(String, u32)> = Vec::new();
            if split {
                let mut want = line.qty;
                for l in &candidates {
                    let n = avail(l).min(want);
                    if n > 0 {
                        got.push((l.clone(), n));
                        want -= n;
                    }
                }
            } else if let Some(l) = candidates.iter().find(|l| avail(l) >= line.qty) {
                got.push((l.clone(), line.qty));
            } else {
                let best = candidates.iter().map(avail).max().unwrap_or(0);
                if best > 0 {
                    let at: Vec<String> = candidates.iter().filter(|l| avail(l) == best).cloned().collect();
                    got.push((at[0].clone(), best));
                    if at.len() > 1 {
                        ties.push((held.len(), at));
                    }
                }
            }
            let total: u32 = got.iter().map(|g| g.1).sum();
            shorts.push(Short { item: line.item.clone(), requested: line.qty, available: total.min(line.qty) });
            held.extend(got.into_iter().map(|(location, qty)| Alloc { item: line.item.clone(), location, qty }));
        }
        let short = shorts.iter().any(|s| s.available < s.requested);
        if (short && !partial) || held.is_empty() {
            if ghost {
                return Ok(());
            }
            return refused(&op.answer, "insufficient_stock", &shorts);
        }

        let (id, expires_at, expiry_unknown) = if ghost {
            // Named after its op, so the op's own lapse step finds it.
            let id = ghost_hold(op.n);
            (id, op.invoked + ttl as i64 * 1_000_000, true)
        } else {
            let Answer::Reservation(got) = &op.answer else {
                return Err(format!("should hold {held:?}, got {:?}", op.answer));
            };
            // `created: false` on a key's first hold is right too: a store
            // that retries a commit whose acknowledgement was lost finds the
            // hold its own first attempt made.
            if self.holds.contains_key(&got.id) {
                return Err(format!("reservation id {} was already given to another reservation", got.id));
            }
            // Where a line had ties, take the answer's choice among them.
            for (i, at) in &ties {
                if let Some(a) = got.lines.iter().find(|a| a.item == held[*i].item && at.contains(&a.location)) {
                    held[*i].location = a.location.clone();
                }
            }
            held.sort();
            let mut answered = got.lines.clone();
            answered.sort();
            // `expired`: the answer came after the hold had lapsed (a slow
            // reserve); its lapse step (check.rs) expires it at that time.
            let lapsed_by_answer = got.status == "expired" && got.expires_at <= op.completed + SLACK_US;
            if answered != held || !(got.status == "held" || lapsed_by_answer) {
                return Err(format!("should hold {held:?}, got {} {:?}", got.status, got.lines));
            }
            let ttl_us = ttl as i64 * 1_000_000;
            if got.expires_at < op.invoked + ttl_us - SLACK_US || got.expires_at > op.completed + ttl_us + SLACK_US {
                return Err(format!("expires_at {} is not {ttl} s after the call", got.expires_at));
            }
            (got.id, got.expires_at, false)
        };
        held.sort();
        for a in &held {
            let k = (a.item.clone(), a.location.clone());
            let mut s = self.stock.get(&k).copied().unwrap_or_default();
            s.reserved += a.qty as i64;
            self.set_stock(k, s);
        }
        let hold = Hold {
            key: key.to_string(),
            fingerprint: fp,
            lines: held,
            status: Status::Held,
            expires_at,
            expiry_unknown,
        };
        self.set_hold(id, Some(hold));
        self.set_key(key.to_string(), id);
        Ok(())
    }

    /// Claim (`to` = Claimed), release (Released) or extend (Held with a ttl).
    fn settle(&mut self, op: &Op, id: i64, to: Status, ttl: Option<u32>, ghost: bool) -> Result<(), String> {
        let Some(mut h) = self.holds.get(&id).cloned() else {
            return if ghost { Ok(()) } else { refused(&op.answer, "not_found", &[]) };
        };
        use Status::*;
        // A claim or extend decides "still in time" at its statement and
        // becomes visible at its commit, a moment later. A reader in between,
        // after the expiry, counts the hold's units as available (a hold past
        // its expiry is, before any sweep), but nothing can take them: the
        // sweep and a refill's expiry skip or wait for the reservation row
        // the settle has locked. So a hold that lapsed is taken back by a
        // claim or extend called before its expiry that answers success, as
        // long as its units are still free in the model.
        let succeeded = ghost || matches!(op.answer, Answer::Reservation(_));
        if h.status == Expired && to != Released && succeeded && op.invoked <= h.expires_at + SLACK_US {
            if !self.revive(id) {
                return if ghost { Ok(()) } else { Err(format!("reservation {id} lapsed and its units were taken")) };
            }
            h.status = Held;
        }
        let verdict: Result<Status, &str> = match (h.status, to) {
            (Held, _) => Ok(to),
            (Claimed, Claimed) => Ok(Claimed),
            (Released | Expired, Released) => Ok(h.status),
            (Expired, _) => Err("reservation_expired"),
            _ => Err("invalid_state"),
        };
        let status = match verdict {
            Err(code) => return if ghost { Ok(()) } else { refused(&op.answer, code, &[]) },
            Ok(s) => s,
        };
        if ghost {
            match ttl {
                Some(t) if h.status == Held => {
                    let mut moved = h;
                    // An extend sets the expiry to `ttl` after it runs,
                    // shorter than before or longer: its own lapse step
                    // (check.rs) covers when that was.
                    moved.expires_at = op.invoked + t as i64 * 1_000_000;
                    moved.expiry_unknown = true;
                    self.set_hold(id, Some(moved));
                }
                _ => self.transition(id, status),
            }
            return Ok(());
        }
        let Answer::Reservation(got) = &op.answer else {
            return Err(format!(
                "reservation {id} is {}; should answer it {}, got {:?}",
                h.status.as_str(),
                status.as_str(),
                op.answer
            ));
        };
        if h.status == Held && to != Released && !h.expiry_unknown && op.invoked > h.expires_at + SLACK_US {
            return Err(format!(
                "reservation {id} expired at {} before this call; it must not be {}",
                h.expires_at,
                to.as_str()
            ));
        }
        let mut after = h.clone();
        after.status = status;
        if h.status == Expired && to == Released && got.status == "released" {
            // Its units went back when it expired; until a sweep marks the
            // row, releasing it answers `released`.
            after.status = Released;
            same_hold(id, &after, got, op)?;
            self.set_hold(id, Some(after));
            return Ok(());
        }
        if let Some(t) = ttl {
            let ttl_us = t as i64 * 1_000_000;
            if got.expires_at < op.invoked + ttl_us - SLACK_US || got.expires_at > op.completed + ttl_us + SLACK_US {
                return Err(format!("extended expires_at {} is not {t} s after the call", got.expires_at));
            }
            after.expires_at = got.expires_at;
            after.expiry_unknown = false;
            same_hold(id, &after, got, op)?;
            self.set_hold(id, Some(after));
            return Ok(());
        }
        same_hold(id, &after, got, op)?;
        self.transition(id, status);
        Ok(())
    }

    fn stock_change(
        &mut self,
        op: &Op,
        item: &str,
        location: &str,
        change: &str,
        n: i64,
        ghost: bool,
    ) -> Result<(), String> {
        let k = (item.to_string(), location.to_string());
        let existing = self.stock.get(&k).copied();
        let conflict = |why: String| {
            if ghost { Ok(()) } else { refused(&op.answer, "stock_conflict", &[]).map_err(|e| format!("{e} ({why})")) }
        };
        let next = match (change, existing) {
            ("fulfil", None) => return conflict("no stock recorded".into()),
            ("fulfil", Some(s)) if s.committed < n => return conflict(format!("{} committed", s.committed)),
            ("fulfil", Some(s)) => Stock { on_hand: s.on_hand - n, committed: s.committed - n, ..s },
            ("set" | "adjust", s) => {
                let s = s.unwrap_or_default();
                let target = if change == "set" { n } else { s.on_hand + n };
                let delta = target - s.on_hand;
                if target < 0 || -delta > s.available() {
                    return conflict(format!("on hand {} available {} target {target}", s.on_hand, s.available()));
                }
                Stock { on_hand: target, ..s }
            }
            (other, _) => return Err(format!("unknown stock change {other:?}")),
        };
        if !ghost {
            // Its level answer is checked by its own Read step.
            if op.answer != Answer::Applied {
                return Err(format!("stock of {item}@{location} changes to {:?}, got {:?}", next.qty(), op.answer));
            }
            self.set_applied(op.n);
        }
        self.set_stock(k, next);
        Ok(())
    }

    /// The model's quantities of every (item, location), for a report.
    pub fn describe(&self, items: &[String]) -> String {
        let mut out = String::new();
        for ((i, l), s) in &self.stock {
            if items.contains(i) {
                out.push_str(&format!("  {i}@{l}: {:?}\n", s.qty()));
            }
        }
        out
    }
}

fn restore<K: std::hash::Hash + Eq + Ord, V>(map: &mut impl MapLike<K, V>, k: K, v: Option<V>) {
    match v {
        Some(v) => map.put(k, v),
        None => map.take(&k),
    }
}

trait MapLike<K, V> {
    fn put(&mut self, k: K, v: V);
    fn take(&mut self, k: &K);
}

impl<K: Ord, V> MapLike<K, V> for BTreeMap<K, V> {
    fn put(&mut self, k: K, v: V) {
        self.insert(k, v);
    }
    fn take(&mut self, k: &K) {
        self.remove(k);
    }
}

impl<K: std::hash::Hash + Eq, V> MapLike<K, V> for HashMap<K, V> {
    fn put(&mut self, k: K, v: V) {
        self.insert(k, v);
    }
    fn take(&mut self, k: &K) {
        self.remove(k);
    }
}

/// The answer is the refusal `code` (with these shortfalls, for
/// `insufficient_stock`).
fn refused(answer: &Answer, code: &str, shorts: &[Short]) -> Result<(), String> {
    match answer {
        Answer::Refused { code: c, lines } if c == code => {
            let mut a = lines.clone();
            let mut b = shorts.to_vec();
            a.sort_by(|x, y| x.item.cmp(&y.item));
            b.sort_by(|x, y| x.item.cmp(&y.item));
            if code == "insufficient_stock" && a != b {
                return Err(format!("insufficient_stock should report {b:?}, got {a:?}"));
            }
            Ok(())
        }
        other => Err(format!("should be refused with {code} {shorts:?}, got {other:?}")),
    }
}

/// The answer names hold `id` as the model has it.
fn same_hold(id: i64, h: &Hold, got: &Held, op: &Op) -> Result<(), String> {
    let mut lines = got.lines.clone();
    lines.sort();
    let expiry_ok = h.expiry_unknown || (got.expires_at - h.expires_at).abs() <= SLACK_US;
    // An expired hold's row reads `held` until a sweep (or a settle) marks it.
    let status_ok = got.status == h.status.as_str() || (h.status == Status::Expired && got.status == "held");
    if got.id != id || lines != h.lines || !status_ok || !expiry_ok {
        return Err(format!(
            "should answer reservation {id} {} {:?} expiring {}, got {} {} {:?} expiring {} (call {:?})",
            h.status.as_str(),
            h.lines,
            h.expires_at,
            got.id,
            got.status,
            lines,
            got.expires_at,
            op.call
        ));
    }
    Ok(())
}
