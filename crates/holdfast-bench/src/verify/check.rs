//! The linearizability checker: is there one order of a history's
//! operations, consistent with real time, in which every answer is what the
//! model ([`super::model`]) gives?
//!
//! The search is a depth-first search over the orders real time allows, run
//! separately on each group of items that no operation spans
//! (P-compositionality: the history is linearizable iff every group's
//! sub-history is), with each choice point's (position, operations taken,
//! model state) remembered so that no state is explored twice (Lowe's memo).
//! Operations are taken *just in time* (Lowe): one that changes the state at
//! its return, or earlier only when an answer returning before it needs it; a
//! read (a refusal or a levels answer) as soon as the state explains it, and
//! never revisited: it changes nothing, so an order taking it later is no
//! different. Taking every operation at its call instead (Wing & Gong) makes
//! the search try the concurrent state changes in every order wherever one
//! read needs another; on histories where requests take hundreds of
//! milliseconds that is more orders than a minute can try.
//!
//! Operations whose answer was lost (a timeout, a cut connection, a `503`)
//! may or may not have taken effect, at any moment after they were invoked.
//! The search takes such an operation only where it is needed: at a return
//! the state does not explain, it tries each lost operation that makes that
//! answer right, and backtracks when none does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::history::{Answer, Call, Event};
use super::model::{Model, Op, SLACK_US, ghost_hold, items_of};

/// Most model steps one group's search may take. Beyond it the search gives
/// up and says so: neither a proof nor a violation.
pub const STEP_BUDGET: u64 = 50_000_000;

/// How long after its call an operation whose answer was lost may still have
/// taken effect: the workload gives up on an answer after 3 s (a `serve` that
/// `bench verify` starts, after 2.5 s); an operation whose caller went away
/// finishes the attempt it has under way and starts no other, and a fault
/// holds an attempt up for at most 3 s.
const GHOST_COMMIT_US: i64 = 6_000_000;

/// A history the model cannot explain.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The operation no order could explain, at the search's furthest point.
    pub op: Op,
    /// What the model would have answered instead.
    pub why: String,
    /// The model's quantities of the group's items at that point.
    pub state: String,
    /// The operations linearized just before it, and those concurrent with it.
    pub before: Vec<Op>,
    pub concurrent: Vec<Op>,
    /// The search ran out of its step budget: no verdict on this group.
    pub gave_up: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "no order of the history explains op {} (client {}): {:?}",
            self.op.n, self.op.client, self.op.call
        )?;
        writeln!(f, "  answered: {:?}", self.op.answer)?;
        writeln!(f, "  the model says: {}", self.why)?;
        writeln!(f, "  model state before it:\n{}", self.state.trim_end())?;
        writeln!(f, "  last operations taken before it:")?;
        for o in &self.before {
            writeln!(f, "    {}", describe(o))?;
        }
        writeln!(f, "  operations concurrent with it:")?;
        for o in &self.concurrent {
            writeln!(f, "    {}", describe(o))?;
        }
        Ok(())
    }
}

/// Up to 40 operations whose interval overlaps `op`'s, for a report.
fn concurrent_with(ops: &[Op], op: &Op) -> Vec<Op> {
    ops.iter()
        .filter(|x| x.n != op.n && x.invoked <= op.completed && x.completed >= op.invoked)
        .take(40)
        .cloned()
        .collect()
}

fn describe(o: &Op) -> String {
    let end = if o.unknown() { "lost".to_string() } else { o.completed.to_string() };
    format!("op {} client {} [{} .. {}] {:?} -> {:?}", o.n, o.client, o.invoked, end, o.call, o.answer)
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    pub operations: usize,
    /// Operations whose answer was lost.
    pub unknown: usize,
    pub faults: usize,
    /// Independent groups of items checked.
    pub groups: usize,
    /// Search steps taken (model steps tried).
    pub steps: u64,
    pub elapsed: Duration,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Pairs each invoke with its completion; an invoke without one is lost.
pub fn operations(events: &[Event]) -> (Vec<Op>, usize) {
    let mut open: HashMap<u64, Op> = HashMap::new();
    let mut done = Vec::new();
    let mut faults = 0;
    for e in events {
        match e {
            Event::Invoke { at, op, client, call } => {
                open.insert(
                    *op,
                    Op {
                        n: *op,
                        client: *client,
                        call: call.clone(),
                        answer: Answer::Unknown { reason: "no answer recorded".into() },
                        invoked: *at,
                        completed: *at + GHOST_COMMIT_US,
                    },
                );
            }
            Event::Complete { at, op, answer } => {
                if let Some(mut o) = open.remove(op) {
                    o.answer = answer.clone();
                    if !o.unknown() {
                        o.completed = *at;
                    }
                    done.push(o);
                }
            }
            Event::Fault { .. } => faults += 1,
        }
    }
    done.extend(open.into_values());
    done.sort_by_key(|o| (o.invoked, o.n));
    (done, faults)
}

/// Checks a whole history.
pub fn check(events: &[Event]) -> Report {
    let started = Instant::now();
    let (ops, faults) = operations(events);
    let mut report = Report { operations: ops.len(), faults, ..Report::default() };
    report.unknown = ops.iter().filter(|o| o.unknown()).count();
    let ops = collapse_retries(ops);

    // The items of each reservation id, from every answer that names it.
    let mut items_of_id: HashMap<i64, Vec<String>> = HashMap::new();
    for o in &ops {
        if let Answer::Reservation(h) = &o.answer {
            let e = items_of_id.entry(h.id).or_default();
            for a in &h.lines {
                if !e.contains(&a.item) {
                    e.push(a.item.clone());
                }
            }
        }
    }
    // Each hold reaches its expiry at a time the answers name (its reserve,
    // each extend): one step per such time, in a window of the clock slack
    // around it, so operations on either side see it live or expired. A
    // reserve answered only after its hold had lapsed (a slow one) answers
    // `expired` with the time it lapsed at.
    let mut lapses: Vec<(i64, i64)> = Vec::new();
    for o in &ops {
        if let Answer::Reservation(h) = &o.answer
            && (h.status == "held" || h.status == "expired")
        {
            lapses.push((h.id, h.expires_at));
        }
    }
    lapses.sort();
    lapses.dedup();
    // A lost reserve may have made a hold that nobody's answer names, and a
    // lost extend may have moved a hold's expiry to a time no answer names:
    // such a hold expires `ttl` after the lost op took effect, which was
    // after its call and, at the latest, when it could last take effect.
    let mut ghost_lapses: Vec<(i64, &Op, i64)> = Vec::new();
    for o in ops.iter().filter(|o| o.unknown()) {
        match &o.call {
            Call::Reserve { ttl, .. } => {
                items_of_id.insert(ghost_hold(o.n), items_of(&o.call));
                ghost_lapses.push((ghost_hold(o.n), o, *ttl as i64 * 1_000_000));
            }
            Call::Extend { id, ttl } => ghost_lapses.push((*id, o, *ttl as i64 * 1_000_000)),
            _ => {}
        }
    }
    let ghost_lapses: Vec<Op> = ghost_lapses
        .into_iter()
        .enumerate()
        .map(|(k, (id, lost, ttl))| Op {
            n: u64::MAX / 4 - k as u64,
            client: 0,
            call: Call::Lapse { id, at: lost.invoked + ttl },
            answer: Answer::Refused { code: "expires".into(), lines: Vec::new() },
            invoked: lost.invoked + ttl - SLACK_US,
            completed: lost.completed + ttl + SLACK_US,
        })
        .collect();
    // A stock change's level is read after it commits: the change is one
    // step, the read of its answer another, later in the same interval.
    let mut ops = ops;
    let mut reads = Vec::new();
    for o in &mut ops {
        if let (Call::Stock { item, location, .. }, Answer::Level { .. }) = (&o.call, &o.answer) {
            let call = Call::Read { of: o.n, item: item.clone(), location: location.clone() };
            let answer = std::mem::replace(&mut o.answer, Answer::Applied);
            reads.push(Op { n: u64::MAX / 2 - reads.len() as u64, call, answer, ..o.clone() });
        }
    }
    ops.extend(reads);
    for (k, (id, at)) in lapses.into_iter().enumerate() {
        ops.push(Op {
            n: u64::MAX - k as u64,
            client: 0,
            call: Call::Lapse { id, at },
            answer: Answer::Refused { code: "expires".into(), lines: Vec::new() },
            invoked: at - SLACK_US,
            completed: at + SLACK_US,
        });
    }
    ops.extend(ghost_lapses);
    let items = |o: &Op| -> Vec<String> {
        match &o.call {
            Call::Claim { id } | Call::Release { id } | Call::Extend { id, .. } | Call::Lapse { id, .. } => {
                items_of_id.get(id).cloned().unwrap_or_default()
            }
            other => items_of(other),
        }
    };

    // Union-find over items.
    let mut parent: HashMap<String, String> = HashMap::new();
    fn find(p: &mut HashMap<String, String>, x: &str) -> String {
        let up = p.get(x).cloned().unwrap_or_else(|| x.to_string());
        if up == x {
            p.entry(x.to_string()).or_insert(up.clone());
            return up;
        }
        let root = find(p, &up);
        p.insert(x.to_string(), root.clone());
        root
    }
    for o in &ops {
        let its = items(o);
        if let Some(first) = its.first() {
            let a = find(&mut parent, first);
            for i in &its[1..] {
                let b = find(&mut parent, i);
                if a != b {
                    parent.insert(b, a.clone());
                }
            }
        }
    }
    let mut groups: BTreeMap<String, Vec<Op>> = BTreeMap::new();
    for o in ops {
        // A settle of an id no answer ever named has no items: it must be
        // `not_found`, which an empty model checks.
        let root = match items(&o).first() {
            Some(i) => find(&mut parent, i),
            None => String::new(),
        };
        groups.entry(root).or_default().push(o);
    }
    report.groups = groups.len();
    // Groups are independent: they are searched side by side, one thread per
    // core, and reported in their order.
    let groups: Vec<Vec<Op>> = groups.into_values().collect();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(groups.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut verdicts: Vec<(usize, Verdict)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let g = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(group) = groups.get(g) else { return done };
                        done.push((g, check_group(group)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a checker thread panicked")).collect()
    });
    verdicts.sort_by_key(|v| v.0);
    for (_, (steps, violation)) in verdicts {
        report.steps += steps;
        report.violations.extend(violation.map(|v| *v));
    }
    report.elapsed = started.elapsed();
    report
}

/// Steps a group's check took, and the violation it found, if any.
type Verdict = (u64, Option<Box<Violation>>);

/// Searches one group; a group no order explains is cut down to its
/// smallest failing prefix, whose violation is reported.
fn check_group(group: &[Op]) -> Verdict {
    match search(group) {
        (steps, Ok(()), _) => (steps, None),
        (steps, Err(v), _) if v.gave_up => (steps, Some(v)),
        (steps, Err(_), furthest) => {
            let (more, v) = smallest_failing_prefix(group, furthest);
            (steps + more, Some(v))
        }
    }
}

/// Settles lost answers that a client's retry of the same call settled.
/// A client that got no answer sends the same call again (a reserve with the
/// same key and lines, a claim or release of the same id, a levels read);
/// the answer that finally comes says what the lost attempts did:
///
/// - a levels read changes nothing: its lost attempts go;
/// - a reserve answered `created: true` or refused: no lost attempt made a
///   hold (a later attempt would have found it), so they go; answered
///   `created: false` as the first answer its key ever had: exactly one lost
///   attempt made the hold that answer names, somewhere between the first
///   call and that answer, so the chain becomes that one creation; answered
///   `created: false` with a reservation an answer named before the chain
///   began: every attempt was a replay, so they go;
/// - a claim or release: the chain is one change (or none, if refused)
///   somewhere between the first call and the answer.
///
/// What stays lost is a chain no answer ended.
fn collapse_retries(ops: Vec<Op>) -> Vec<Op> {
    let mut by_client: BTreeMap<u32, Vec<Op>> = BTreeMap::new();
    for o in ops {
        by_client.entry(o.client).or_default().push(o);
    }
    // The first call of each key, to tell a first creation from a replay.
    let mut first_call_of_key: HashMap<String, i64> = HashMap::new();
    for o in by_client.values().flatten() {
        if let Call::Reserve { key, .. } = &o.call {
            let e = first_call_of_key.entry(key.clone()).or_insert(o.invoked);
            *e = (*e).min(o.invoked);
        }
    }
    // When an answer first named each reservation.
    let mut named_at: HashMap<i64, i64> = HashMap::new();
    for o in by_client.values().flatten() {
        if let Answer::Reservation(h) = &o.answer {
            let e = named_at.entry(h.id).or_insert(o.completed);
            *e = (*e).min(o.completed);
        }
    }
    let mut out = Vec::new();
    for (client, list) in by_client {
        let mut i = 0;
        while i < list.len() {
            let mut j = i;
            while client != 0 && list[j].unknown() && j + 1 < list.len() && list[j + 1].call == list[i].call {
                j += 1;
            }
            let (first, last) = (&list[i], &list[j]);
            if j == i || last.unknown() {
                out.extend(list[i..=j].iter().cloned());
                i = j + 1;
                continue;
            }
            match (&last.call, &last.answer) {
                (Call::Levels { .. }, _) => out.push(last.clone()),
                (Call::Reserve { key, .. }, Answer::Reservation(h)) if h.created == Some(false) => {
                    if first_call_of_key.get(key) == Some(&first.invoked) {
                        let mut made = h.clone();
                        made.created = Some(true);
                        out.push(Op { answer: Answer::Reservation(made), completed: last.completed, ..first.clone() });
                        out.push(last.clone());
                    } else if named_at.get(&h.id).is_some_and(|&t| t < first.invoked) {
                        // A replay of a key whose reservation an answer named
                        // before the first attempt: every attempt was a
                        // replay, which changes nothing.
                        out.push(last.clone());
                    } else {
                        // A replay of an older key: leave the attempts lost.
                        out.extend(list[i..=j].iter().cloned());
                    }
                }
                (Call::Reserve { .. }, _) => out.push(last.clone()),
                _ => out.push(Op { invoked: first.invoked, ..last.clone() }),
            }
            i = j + 1;
        }
    }
    out.sort_by_key(|o| (o.invoked, o.n));
    out
}

/// The group's history cut at time `t`: what was invoked by then, with
/// the answers that came after it taken as lost.
fn prefix(ops: &[Op], t: i64) -> Vec<Op> {
    ops.iter()
        .filter(|o| o.invoked <= t)
        .map(|o| {
            let mut o = o.clone();
            if o.completed > t {
                o.completed = o.completed.max(o.invoked + GHOST_COMMIT_US);
                o.answer = Answer::Unknown { reason: "answered after the cut".into() };
            }
            o
        })
        .collect()
}

/// A failing group cut at the earliest answer that no order explains: every
/// prefix of a linearizable history is linearizable, so a search over the
/// answers' times finds the first one after which the prefix fails. A
/// failing prefix is the expensive probe (the search must exhaust it), so
/// the search starts at the furthest answer the group's search reached
/// (`furthest`), where the failure usually is, and gallops back from there
/// to a prefix that passes before it bisects.
/// The violation names that answer, with the search's account of it.
fn smallest_failing_prefix(ops: &[Op], furthest: i64) -> (u64, Box<Violation>) {
    let mut times: Vec<i64> = ops.iter().filter(|o| !o.unknown()).map(|o| o.completed).collect();
    times.sort();
    times.dedup();
    let mut steps = 0;
    let mut probe = |i: usize| {
        let (n, r, _) = search(&prefix(ops, times[i]));
        steps += n;
        r
    };
    // Invariant: the prefix at times[hi] fails (the whole group does), and
    // every prefix before times[lo] passes.
    let (mut lo, mut hi) = (0usize, times.len() - 1);
    let mut failing = None;
    let start = times.partition_point(|&t| t < furthest);
    if start < hi
        && let Err(v) = probe(start)
    {
        hi = start;
        failing = Some(v);
    }
    let mut step = 1;
    while step <= hi {
        match probe(hi - step) {
            Ok(()) => {
                lo = hi - step + 1;
                break;
            }
            Err(v) => {
                hi -= step;
                failing = Some(v);
                step *= 2;
            }
        }
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        match probe(mid) {
            Ok(()) => lo = mid + 1,
            Err(v) => {
                hi = mid;
                failing = Some(v);
            }
        }
    }
    let mut v = match failing {
        Some(v) => v,
        None => {
            let (n, r, _) = search(&prefix(ops, times[hi]));
            steps += n;
            r.expect_err("the whole group fails")
        }
    };
    // The answer that tips the prefix over.
    if let Some(culprit) = ops.iter().find(|o| o.completed == times[hi]) {
        if culprit.n != v.op.n {
            v.why = format!(
                "{} (the search got furthest at op {}: {})",
                "this is the earliest answer no order explains", v.op.n, v.why
            );
            v.op = culprit.clone();
        }
        v.concurrent = concurrent_with(ops, culprit);
    }
    (steps, v)
}

/// An entry of a group's time line: the call or the return of a definite op
/// (an index into `definite`). On equal times calls come first: the two ops
/// are then concurrent, the reading that allows more orders.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Call(usize),
    Ret(usize),
}

/// What the search took, in order, so that a step back can put it back.
#[derive(Debug, Clone, Copy)]
enum Took {
    /// A definite op (index into `definite`).
    Op(usize),
    /// A lost op (index into `ghosts`).
    Ghost(usize),
}

/// A choice point: the return of op `d` (entry `pos`) reached with `d` not
/// yet taken. Its alternatives, tried in turn: `d` itself; each other
/// pending op that changes the state, before it; each lost op that makes
/// `d`'s answer right, before it. The rest is the state to go back to.
struct Frame {
    d: usize,
    next: usize,
    pos: usize,
    mark: usize,
    lin: u64,
    floor: i64,
    took: usize,
    pending: Vec<usize>,
}

/// The furthest dead end, for the report: how many ops were taken, the op
/// no order explained, why, the model's state and the ops taken just before.
struct Worst {
    taken: usize,
    op: usize,
    why: String,
    state: String,
    before: Vec<usize>,
}

/// One group's search.
///
/// Ops are taken *just in time*: an op that changes the state is taken at
/// its return, unless an op returning earlier needs it first (then it is one
/// of that return's alternatives); a read — a refusal, a levels answer — is
/// taken as soon as the state explains it, and never revisited (it changes
/// nothing, so an order that takes it later can take it there instead).
/// Every order consistent with real time is still reachable: at each return,
/// whatever a correct order puts before the returning op and has not been
/// taken yet is pending there. But the search only branches where an answer
/// forces it, instead of trying the ops that change state in every order
/// from their calls on; with `(entry, ops taken, model state)` remembered
/// for each choice point, no state is explored twice.
struct Search<'a> {
    ops: &'a [Op],
    definite: Vec<usize>,
    ghosts: Vec<usize>,
    /// Per lost op: the definite op that is its own lapse step (a lost
    /// reserve's or extend's), which must not come before it.
    ghost_lapse: Vec<Option<usize>>,
    /// Per definite op: it is a read.
    reads: Vec<bool>,
    entries: Vec<Entry>,
    model: Model,
    taken: Vec<bool>,
    ghost_used: Vec<bool>,
    /// Definite ops called and not taken, in call order.
    pending: Vec<usize>,
    took: Vec<Took>,
    pos: usize,
    /// Zobrist hash of the ops taken.
    lin: u64,
    /// The latest call among the ops taken: the order's present moment is no
    /// earlier, so a lost op whose effect must have come before it is out.
    floor: i64,
    steps: u64,
    worst: Option<Worst>,
}

enum Alt {
    /// Taken: go on from the state it left.
    Taken,
    Failed,
    /// No alternative left.
    Exhausted,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [Op]) -> Self {
        let definite: Vec<usize> = (0..ops.len()).filter(|&i| !ops[i].unknown()).collect();
        // In call order: the alternatives at a return stop at the first lost
        // op called after it.
        let mut ghosts: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].unknown()).collect();
        ghosts.sort_by_key(|&i| ops[i].invoked);
        let mut timed: Vec<(i64, u8, Entry)> = Vec::with_capacity(2 * definite.len());
        for (d, &o) in definite.iter().enumerate() {
            timed.push((ops[o].invoked, 0, Entry::Call(d)));
            timed.push((ops[o].completed, 1, Entry::Ret(d)));
        }
        timed.sort_by_key(|e| (e.0, e.1));
        let lapse_of: HashMap<(i64, i64), usize> = (definite.iter().enumerate())
            .filter_map(|(d, &o)| match ops[o].call {
                Call::Lapse { id, at } => Some(((id, at), d)),
                _ => None,
            })
            .collect();
        let ghost_lapse = (ghosts.iter())
            .map(|&g| {
                let o = &ops[g];
                let key = match &o.call {
                    Call::Reserve { ttl, .. } => (ghost_hold(o.n), o.invoked + *ttl as i64 * 1_000_000),
                    Call::Extend { id, ttl } => (*id, o.invoked + *ttl as i64 * 1_000_000),
                    _ => return None,
                };
                lapse_of.get(&key).copied()
            })
            .collect();
        Self {
            ghost_lapse,
            reads: definite.iter().map(|&o| ops[o].read_only()).collect(),
            taken: vec![false; definite.len()],
            ghost_used: vec![false; ghosts.len()],
            entries: timed.into_iter().map(|e| e.2).collect(),
            ops,
            definite,
            ghosts,
            model: Model::new(),
            pending: Vec::new(),
            took: Vec::new(),
            pos: 0,
            lin: 0,
            floor: i64::MIN,
            steps: 0,
            worst: None,
        }
    }

    fn op(&self, d: usize) -> &'a Op {
        &self.ops[self.definite[d]]
    }

    /// Goes forward to the next return of an op not taken (a choice point),
    /// taking each read the state explains at its call.
    fn advance(&mut self) -> Option<usize> {
        while self.pos < self.entries.len() {
            match self.entries[self.pos] {
                Entry::Call(d) => {
                    self.pending.push(d);
                    if self.reads[d] {
                        self.take(d);
                    }
                }
                Entry::Ret(d) if !self.taken[d] => return Some(d),
                Entry::Ret(_) => {}
            }
            self.pos += 1;
        }
        None
    }

    /// Takes definite op `d` if the state explains its answer.
    fn take(&mut self, d: usize) -> bool {
        let o = self.op(d);
        let mark = self.model.mark();
        self.steps += 1;
        if self.model.step(o).is_err() {
            self.model.undo(mark);
            return false;
        }
        self.took_op(d);
        true
    }

    fn took_op(&mut self, d: usize) {
        self.taken[d] = true;
        self.took.push(Took::Op(d));
        self.pending.retain(|&p| p != d);
        self.lin ^= zobrist(d, false);
        self.floor = self.floor.max(self.op(d).invoked);
    }

    /// After a change of state: takes every pending read it explains.
    fn take_reads(&mut self) {
        let mut k = 0;
        while k < self.pending.len() {
            let r = self.pending[k];
            if !(self.reads[r] && self.take(r)) {
                k += 1;
            }
        }
    }

    fn frame(&self, d: usize) -> Frame {
        Frame {
            d,
            next: 0,
            pos: self.pos,
            mark: self.model.mark(),
            lin: self.lin,
            floor: self.floor,
            took: self.took.len(),
            pending: self.pending.clone(),
        }
    }

    fn restore(&mut self, f: &Frame) {
        self.model.undo(f.mark);
        while self.took.len() > f.took {
            match self.took.pop().expect("non-empty") {
                Took::Op(d) => self.taken[d] = false,
                Took::Ghost(g) => self.ghost_used[g] = false,
            }
        }
        self.pending.clone_from(&f.pending);
        self.pos = f.pos;
        self.lin = f.lin;
        self.floor = f.floor;
    }

    /// Alternative `k` of the choice point at the return of `d`.
    fn alternative(&mut self, d: usize, k: usize) -> Alt {
        let o = self.op(d);
        if k == 0 {
            let mark = self.model.mark();
            self.steps += 1;
            match self.model.step(o) {
                Ok(()) => {
                    self.took_op(d);
                    self.take_reads();
                    return Alt::Taken;
                }
                Err(why) => {
                    self.model.undo(mark);
                    self.dead_end(d, why);
                    return Alt::Failed;
                }
            }
        }
        let k = k - 1;
        if let Some(&w) = self.pending.get(k) {
            let mark = self.model.mark();
            if w == d || self.reads[w] || !self.take(w) {
                return Alt::Failed;
            }
            // A lapse that changes nothing now may change something later,
            // and never makes an answer right: taken here it would only
            // double the states (every subset of such lapses taken early
            // is another one). The frame's restore puts it back.
            if matches!(self.op(w).call, Call::Lapse { .. }) && self.model.mark() == mark {
                return Alt::Failed;
            }
            self.take_reads();
            return Alt::Taken;
        }
        let g = k - self.pending.len();
        let Some(&gi) = self.ghosts.get(g) else { return Alt::Exhausted };
        let lost = &self.ops[gi];
        // Ghosts are in call order: none after this one was called in time.
        if lost.invoked > o.completed {
            return Alt::Exhausted;
        }
        // A lost op takes effect before its own lapse step, never after.
        if self.ghost_used[g]
            || lost.completed + SLACK_US < self.floor
            || self.ghost_lapse[g].is_some_and(|l| self.taken[l])
        {
            return Alt::Failed;
        }
        // Only a lost op that makes the returning op's answer right, or, for
        // a read of levels, brings the state closer to what it read (a read
        // may need several lost stock changes): one that merely makes some
        // other pending op possible would send the search down every dead
        // end of a wrong order among concurrent ops.
        let before = self.model.distance(o);
        let mark = self.model.mark();
        self.steps += 2;
        let changed = self.model.step(lost).is_ok() && self.model.mark() > mark;
        let explains = changed && {
            let m = self.model.mark();
            let ok = self.model.step(o).is_ok();
            self.model.undo(m);
            ok || before.zip(self.model.distance(o)).is_some_and(|(b, a)| a < b)
        };
        if !explains {
            self.model.undo(mark);
            return Alt::Failed;
        }
        self.ghost_used[g] = true;
        self.took.push(Took::Ghost(g));
        self.lin ^= zobrist(g, true);
        self.floor = self.floor.max(lost.invoked);
        self.take_reads();
        Alt::Taken
    }

    fn dead_end(&mut self, d: usize, why: String) {
        if self.worst.as_ref().is_some_and(|w| self.took.len() < w.taken) {
            return;
        }
        let before = self.took[self.took.len().saturating_sub(12)..]
            .iter()
            .map(|t| match *t {
                Took::Op(i) => self.definite[i],
                Took::Ghost(g) => self.ghosts[g],
            })
            .collect();
        let o = self.op(d);
        self.worst = Some(Worst {
            taken: self.took.len(),
            op: self.definite[d],
            why,
            state: self.model.describe(&items_of(&o.call)),
            before,
        });
    }

    fn violation(&self) -> Violation {
        let w = self.worst.as_ref().expect("a failed search met a dead end");
        let op = self.ops[w.op].clone();
        let concurrent = concurrent_with(self.ops, &op);
        let before = w.before.iter().map(|&i| self.ops[i].clone()).collect();
        Violation { op, why: w.why.clone(), state: w.state.clone(), before, concurrent, gave_up: false }
    }
}

fn zobrist(i: usize, ghost: bool) -> u64 {
    let mut z = (i as u64).wrapping_mul(2).wrapping_add(ghost as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Searches one group. Returns the steps taken, the verdict, and the time of
/// the furthest answer the search reached.
fn search(ops: &[Op]) -> (u64, Result<(), Box<Violation>>, i64) {
    let mut s = Search::new(ops);
    let mut memo: HashSet<(usize, u64, u64)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut furthest = i64::MIN;
    loop {
        let Some(d) = s.advance() else { return (s.steps, Ok(()), i64::MAX) };
        furthest = furthest.max(s.op(d).completed);
        if s.steps > STEP_BUDGET {
            let v = Violation {
                op: s.op(d).clone(),
                why: String::new(),
                state: String::new(),
                before: Vec::new(),
                concurrent: Vec::new(),
                gave_up: true,
            };
            return (s.steps, Err(Box::new(v)), furthest);
        }
        // A choice point met before in this state leads nowhere new.
        if memo.insert((s.pos, s.lin, s.model.hash())) {
            stack.push(s.frame(d));
        }
        loop {
            let Some(f) = stack.last_mut() else { return (s.steps, Err(Box::new(s.violation())), furthest) };
            let (d, k) = (f.d, f.next);
            f.next += 1;
            s.restore(f);
            match s.alternative(d, k) {
                Alt::Taken => break,
                Alt::Failed => {}
                Alt::Exhausted => {
                    stack.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The checker checks itself: hand-made histories with a known bug each
    //! must be refused, and correct ones that only some order explains must
    //! pass.
    use super::*;
    use crate::verify::history::{Alloc, Held, Line, Qty, Short};

    const S: i64 = 1_000_000;

    /// Builds a history; times are in milliseconds from an epoch far from
    /// any expiry.
    #[derive(Default)]
    struct H {
        events: Vec<Event>,
        n: u64,
    }

    impl H {
        /// `stock` units of `i` at `a`, then client 1's reserve `k1` of one
        /// of them answered with hold 7: where most histories here start.
        fn k1_holds_one(stock: i64) -> H {
            let mut h = H::with_stock(stock);
            h.op(1, 10, 12, reserve("k1", 1), held(7, 1, 10, true));
            h
        }

        /// `n` units of `i` at `a`, set before anything else runs.
        fn with_stock(n: i64) -> H {
            let mut h = H::default();
            h.stock(0, 1, n, q(n, 0, 0));
            h
        }

        fn op(&mut self, client: u32, from_ms: i64, to_ms: i64, call: Call, answer: Answer) -> &mut Self {
            self.n += 1;
            let at = |ms: i64| 1_000 * S + ms * 1_000;
            self.events.push(Event::Invoke { at: at(from_ms), op: self.n, client, call });
            self.events.push(Event::Complete { at: at(to_ms), op: self.n, answer });
            self
        }

        /// An operation whose answer was lost: it may or may not have taken
        /// effect.
        fn lost(&mut self, client: u32, from_ms: i64, call: Call) -> &mut Self {
            self.op(client, from_ms, from_ms, call, Answer::Unknown { reason: "lost".into() })
        }

        /// A read of `i`'s levels, answered `qty` at `a`.
        fn read(&mut self, client: u32, from_ms: i64, to_ms: i64, qty: Qty) -> &mut Self {
            let answer = Answer::Levels { locations: vec![("a".into(), qty)] };
            self.op(client, from_ms, to_ms, Call::Levels { item: "i".into() }, answer)
        }

        fn stock(&mut self, from: i64, to: i64, n: i64, after: Qty) -> &mut Self {
            self.op(
                0,
                from,
                to,
                Call::Stock { item: "i".into(), location: "a".into(), change: "set".into(), n },
                Answer::Level { location: "a".into(), qty: after },
            )
        }

        fn check(&mut self) -> Report {
            self.events.sort_by_key(|e| match e {
                Event::Invoke { at, .. } | Event::Complete { at, .. } | Event::Fault { at, .. } => *at,
            });
            check(&self.events)
        }
    }

    /// One unit; client 1's reserve `k1` sent at each of `lost` ms with its
    /// answer lost; `then` (client, call, answer) at 20 ms; `k1` again at
    /// 30 ms, answered `retry`.
    fn retried(lost: &[i64], then: (u32, Call, Answer), retry: Answer) -> Report {
        let mut h = H::with_stock(1);
        for &at in lost {
            h.lost(1, at, reserve("k1", 1));
        }
        let (client, call, answer) = then;
        h.op(client, 20, 22, call, answer).op(1, 30, 32, reserve("k1", 1), retry).check()
    }

    /// The check found exactly one violation, at op `n`.
    fn refused_at(r: &Report, n: u64) {
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations.iter().map(|v| v.op.n).collect::<Vec<_>>());
        assert_eq!(r.violations[0].op.n, n, "{}", r.violations[0]);
    }

    fn q(on_hand: i64, reserved: i64, committed: i64) -> Qty {
        Qty { on_hand, available: on_hand - reserved - committed, reserved, committed }
    }

    fn reserve(key: &str, qty: u32) -> Call {
        Call::Reserve {
            key: key.into(),
            lines: vec![Line { item: "i".into(), qty, locations: Some(vec!["a".into()]) }],
            ttl: 60,
            partial: false,
            split: false,
        }
    }

    /// A reserve of one unit of `i` at `a` held for one second.
    fn one_second(key: &str) -> Call {
        Call::Reserve {
            key: key.into(),
            lines: vec![Line { item: "i".into(), qty: 1, locations: Some(vec!["a".into()]) }],
            ttl: 1,
            partial: false,
            split: false,
        }
    }

    fn held(id: i64, qty: u32, from_ms: i64, created: bool) -> Answer {
        answer(id, "held", 1_000 * S + from_ms * 1_000 + 60 * S + 500, qty, Some(created))
    }

    /// A reservation of `qty` units of `i` at `a`.
    fn answer(id: i64, status: &str, expires_at: i64, qty: u32, created: Option<bool>) -> Answer {
        Answer::Reservation(Held {
            id,
            status: status.into(),
            expires_at,
            lines: vec![Alloc { item: "i".into(), location: "a".into(), qty }],
            created,
        })
    }

    fn short(requested: u32, available: u32) -> Answer {
        Answer::Refused {
            code: "insufficient_stock".into(),
            lines: vec![Short { item: "i".into(), requested, available }],
        }
    }

    #[test]
    fn a_correct_history_passes() {
        let r = H::k1_holds_one(2)
            .op(2, 20, 22, reserve("k2", 1), held(8, 1, 20, true))
            .op(3, 30, 32, reserve("k3", 1), short(1, 0))
            .op(1, 40, 41, reserve("k1", 1), held(7, 1, 10, false))
            .read(3, 50, 52, q(2, 2, 0))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        assert_eq!((r.operations, r.groups), (6, 1));
    }

    #[test]
    fn concurrent_answers_pass_in_the_order_that_explains_them() {
        // Invoked first, answered `insufficient`: only right if the other
        // reserve, concurrent with it, took the last unit first.
        let r = H::with_stock(1)
            .op(1, 10, 30, reserve("k1", 1), short(1, 0))
            .op(2, 11, 20, reserve("k2", 1), held(5, 1, 11, true))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
    }

    #[test]
    fn finds_an_undersell() {
        // A unit was free and nothing else ran: `insufficient` is wrong.
        let r = H::k1_holds_one(2).op(2, 20, 22, reserve("k2", 1), short(1, 0)).check();
        refused_at(&r, 3);
    }

    #[test]
    fn finds_an_oversell() {
        let r = H::k1_holds_one(1).op(2, 20, 22, reserve("k2", 1), held(8, 1, 20, true)).check();
        refused_at(&r, 3);
    }

    #[test]
    fn finds_a_wrong_replay() {
        // The replay of k1 answers another reservation's id.
        let r = H::k1_holds_one(5)
            .op(2, 20, 22, reserve("k2", 1), held(8, 1, 20, true))
            .op(1, 30, 32, reserve("k1", 1), held(8, 1, 20, false))
            .check();
        refused_at(&r, 4);
    }

    #[test]
    fn finds_a_stale_read() {
        // The read starts after the hold was answered, yet misses it.
        let r =
            H::with_stock(5).op(1, 10, 12, reserve("k1", 2), held(7, 2, 10, true)).read(2, 20, 22, q(5, 0, 0)).check();
        refused_at(&r, 3);
        // The same read concurrent with the reserve may see either side.
        let r =
            H::with_stock(5).op(1, 10, 30, reserve("k1", 2), held(7, 2, 10, true)).read(2, 20, 22, q(5, 0, 0)).check();
        assert!(r.ok(), "{}", r.violations[0]);
    }

    #[test]
    fn finds_a_reserve_that_missed_a_hold_lapsed_before_it() {
        // Hold 4 on i@a lapses at 1.01 s. Reserve "b" (i and j, partial) is
        // answered with j only, yet it became visible after a read that saw
        // i's unit free again: at that point it should have held both.
        let t0 = 1_000 * S;
        let level = |qty| Answer::Levels { locations: vec![("a".into(), qty)] };
        let history = |j_seen: Qty| {
            H::with_stock(1)
                .op(
                    0,
                    2,
                    3,
                    Call::Stock { item: "j".into(), location: "a".into(), change: "set".into(), n: 1 },
                    Answer::Level { location: "a".into(), qty: q(1, 0, 0) },
                )
                .op(1, 10, 12, one_second("a"), answer(4, "held", t0 + 1_010_000, 1, Some(true)))
                .op(
                    2,
                    900,
                    1_100,
                    Call::Reserve {
                        key: "b".into(),
                        lines: vec![
                            Line { item: "i".into(), qty: 1, locations: Some(vec!["a".into()]) },
                            Line { item: "j".into(), qty: 1, locations: Some(vec!["a".into()]) },
                        ],
                        ttl: 60,
                        partial: true,
                        split: false,
                    },
                    Answer::Reservation(Held {
                        id: 5,
                        status: "held".into(),
                        expires_at: t0 + 61_000_000,
                        lines: vec![Alloc { item: "j".into(), location: "a".into(), qty: 1 }],
                        created: Some(true),
                    }),
                )
                .op(3, 1_040, 1_045, Call::Levels { item: "i".into() }, level(q(1, 0, 0)))
                .op(4, 1_050, 1_055, Call::Levels { item: "j".into() }, level(j_seen))
                .check()
        };
        refused_at(&history(q(1, 0, 0)), 4);
        // Had the read of j seen the hold, it could have come before the lapse.
        let r = history(q(1, 1, 0));
        assert!(r.ok(), "{}", r.violations[0]);
    }

    #[test]
    fn a_lost_answer_may_have_taken_effect() {
        // The first attempt's answer was lost; it did hold the unit, as the
        // retry's replay shows, and the other buyer was rightly refused.
        let r = retried(&[10], (2, reserve("k2", 1), short(1, 0)), held(9, 1, 10, false));
        assert!(r.ok(), "{}", r.violations[0]);
        // Or it did not: then the unit was free for the other buyer.
        let r = H::with_stock(1)
            .lost(1, 10, reserve("k1", 1))
            .op(2, 20, 22, reserve("k2", 1), held(3, 1, 20, true))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // But a replay cannot answer a reservation nothing created.
        let r = retried(&[], (2, reserve("k2", 1), held(3, 1, 20, true)), held(9, 1, 10, false));
        assert_eq!(r.violations.len(), 1, "a replay of a key never used passed");
    }

    #[test]
    fn a_retry_settles_what_its_lost_attempts_did() {
        // Two lost attempts, then the retry finds the hold: one creation,
        // before the other buyer was refused.
        let r = retried(&[10, 15], (2, reserve("k2", 1), short(1, 0)), held(9, 1, 10, false));
        assert!(r.ok(), "{}", r.violations[0]);
        // The retry created the hold: the lost attempts made none, so a
        // refusal before it is wrong.
        let r = retried(&[10], (2, reserve("k2", 1), short(1, 0)), held(9, 1, 30, true));
        assert_eq!(r.violations.len(), 1, "a refusal while the unit was free passed");
    }

    #[test]
    fn expiry_is_checked() {
        let hold = |id, expires_at: i64| answer(id, "held", expires_at, 1, Some(true));
        let t0 = 1_000 * S;
        let claimed = answer(4, "claimed", t0 + 10_000 + S, 1, None);
        // Claimed two seconds after a 1 s hold expired: wrong.
        let r = H::with_stock(1)
            .op(1, 10, 11, one_second("k"), hold(4, t0 + 10_000 + S))
            .op(1, 3_000, 3_002, Call::Claim { id: 4 }, claimed.clone())
            .check();
        assert_eq!(r.violations.len(), 1, "a claim after expiry passed");
        // Refused as expired, and the unit is free again for the next buyer.
        let r = H::with_stock(1)
            .op(1, 10, 11, one_second("k"), hold(4, t0 + 10_000 + S))
            .op(
                1,
                3_000,
                3_002,
                Call::Claim { id: 4 },
                Answer::Refused { code: "reservation_expired".into(), lines: vec![] },
            )
            .op(2, 3_010, 3_012, one_second("k2"), hold(5, t0 + 3_010_000 + S))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // In time, the claim stands.
        let r = H::with_stock(1)
            .op(1, 10, 11, one_second("k"), hold(4, t0 + 10_000 + S))
            .op(1, 500, 502, Call::Claim { id: 4 }, claimed)
            .op(2, 3_010, 3_012, one_second("k2"), short(1, 0))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
    }

    #[test]
    fn a_settle_called_in_time_takes_back_a_hold_readers_saw_lapse() {
        let t0 = 1_000 * S;
        let hold = |status: &str, expires_at: i64| answer(4, status, expires_at, 1, Some(true));
        let expiry = t0 + 10_000 + S;
        let levels = |held: i64| {
            (Call::Levels { item: "i".into() }, Answer::Levels { locations: vec![("a".into(), q(2, held, 0))] })
        };
        // The extend is called 5 ms before the expiry and commits 45 ms
        // after it; a read in between sees the unit free. Nothing took it,
        // so the extend stands and the read after it sees the hold again.
        let (read, free) = levels(0);
        let (read_again, held_again) = levels(1);
        let r = H::with_stock(2)
            .op(1, 10, 11, one_second("k"), hold("held", expiry))
            .op(1, 1_005, 1_055, Call::Extend { id: 4, ttl: 1 }, hold("held", t0 + 1_050_000 + S))
            .op(2, 1_040, 1_042, read, free)
            .op(2, 1_060, 1_062, read_again, held_again)
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // A claim the same.
        let (read, free) = levels(0);
        let mut claimed = hold("claimed", expiry);
        if let Answer::Reservation(h) = &mut claimed {
            h.created = None;
        }
        let r = H::with_stock(2)
            .op(1, 10, 11, one_second("k"), hold("held", expiry))
            .op(1, 1_005, 1_055, Call::Claim { id: 4 }, claimed)
            .op(2, 1_040, 1_042, read, free)
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // But if another buyer took the units in between, the extend could
        // not have had them.
        let r = H::with_stock(2)
            .op(1, 10, 11, one_second("k"), hold("held", expiry))
            .op(1, 1_005, 1_055, Call::Extend { id: 4, ttl: 1 }, hold("held", t0 + 1_050_000 + S))
            .op(2, 1_040, 1_042, reserve("k2", 2), held(5, 2, 1_040, true))
            .check();
        assert_eq!(r.violations.len(), 1, "a hold taken back after its units were sold passed");
        // And an extend called after the expiry cannot take it back.
        let (read, free) = levels(0);
        let r = H::with_stock(2)
            .op(1, 10, 11, one_second("k"), hold("held", expiry))
            .op(2, 1_040, 1_042, read, free)
            .op(1, 1_100, 1_120, Call::Extend { id: 4, ttl: 1 }, hold("held", t0 + 1_100_000 + S))
            .check();
        assert_eq!(r.violations.len(), 1, "an extend called after the expiry passed");
    }

    #[test]
    fn a_reserve_answered_after_its_hold_lapsed_frees_the_units_at_the_lapse() {
        let t0 = 1_000 * S;
        let answer = |id, status: &str, expires_at| answer(id, status, expires_at, 1, Some(true));
        // Committed at 0.5 s, lapsed at 1.5 s, answered at 3 s as expired:
        // the unit was free for the buyer at 2 s.
        let r = H::with_stock(1)
            .op(1, 10, 3_000, one_second("slow"), answer(4, "expired", t0 + 1_500_000))
            .op(2, 2_000, 2_002, one_second("next"), answer(5, "held", t0 + 3_000_000))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // An `expired` answer that came before the time it names is wrong.
        let r = H::with_stock(1).op(1, 10, 1_000, one_second("slow"), answer(4, "expired", t0 + 1_500_000)).check();
        refused_at(&r, 2);
    }

    #[test]
    fn a_stock_change_answers_with_a_level_read_after_it() {
        let set = |n| Call::Stock { item: "i".into(), location: "a".into(), change: "set".into(), n };
        let level = |qty| Answer::Level { location: "a".into(), qty };
        // The level shows the change and a hold that committed meanwhile.
        let r = H::with_stock(2)
            .op(1, 10, 30, set(5), level(q(5, 1, 0)))
            .op(2, 12, 20, reserve("k1", 1), held(7, 1, 12, true))
            .check();
        assert!(r.ok(), "{}", r.violations[0]);
        // A level from before the change is wrong, even with nothing else
        // running...
        let r = H::with_stock(2).op(1, 10, 30, set(5), level(q(2, 0, 0))).check();
        refused_at(&r, 2);
        // ...and so is one that misses a hold answered before the change began.
        let r = H::with_stock(2)
            .op(2, 5, 8, reserve("k1", 1), held(7, 1, 5, true))
            .op(1, 10, 30, set(5), level(q(5, 0, 0)))
            .check();
        assert_eq!(r.violations.len(), 1, "a level missing an earlier hold passed");
    }

    #[test]
    fn a_lost_extend_moves_the_expiry_within_its_window() {
        let t0 = 1_000 * S;
        let hold = answer(4, "held", t0 + 10_000 + S, 1, Some(true));
        let levels = |reserved| Answer::Levels { locations: vec![("a".into(), q(1, reserved, 0))] };
        let read = || Call::Levels { item: "i".into() };
        let history = |late: i64| {
            H::with_stock(1)
                .op(1, 10, 11, one_second("k"), hold.clone())
                // An extend by 2 s, called before the 1 s hold ran out; its
                // answer was lost.
                .lost(1, 500, Call::Extend { id: 4, ttl: 2 })
                // After the first expiry the hold is still there: the
                // extend took effect.
                .op(2, 2_000, 2_001, read(), levels(1))
                .op(2, late, late + 1, read(), levels(1))
                .check()
        };
        // Still held 5 s after the call: the extend may have committed up to
        // 6 s after its call, 2 s before this.
        let r = history(5_000);
        assert!(r.ok(), "{}", r.violations[0]);
        // Held 9 s after: later than any moment the extend could have set.
        refused_at(&history(9_000), 5);

        // An extend may also shorten a hold: a 3 s hold extended by 1 s
        // half a second in. Held 9 s in is later than either expiry allows.
        let three = answer(4, "held", t0 + 10_000 + 3 * S, 1, Some(true));
        let shortened = |reserved| {
            let ttl3 = Call::Reserve {
                key: "k".into(),
                lines: vec![Line { item: "i".into(), qty: 1, locations: Some(vec!["a".into()]) }],
                ttl: 3,
                partial: false,
                split: false,
            };
            H::with_stock(1)
                .op(1, 10, 11, ttl3, three.clone())
                .lost(1, 500, Call::Extend { id: 4, ttl: 1 })
                .op(2, 9_000, 9_001, read(), levels(reserved))
                .check()
        };
        refused_at(&shortened(1), 4);
        let r = shortened(0);
        assert!(r.ok(), "{}", r.violations[0]);
    }

    #[test]
    fn a_lost_reserve_takes_effect_before_its_hold_lapses() {
        // A lost 1 s reserve and nothing else for 10 s: its lapse step is
        // taken at its return, so the reserve cannot come after it and leave
        // a hold that never lapses.
        let r = H::with_stock(1).lost(1, 10, one_second("k1")).read(2, 10_000, 10_001, q(1, 1, 0)).check();
        refused_at(&r, 3);
    }

    #[test]
    fn finds_a_hold_made_after_its_retry_was_refused() {
        // The first attempt's answer was lost; its retry was refused for lack
        // of stock; yet a later replay of the key finds a hold. A store that
        // refuses a key while its first attempt is still making the hold
        // answers this way: the buyer was told "no" and holds the unit.
        let r = retried(&[10], (1, reserve("k1", 1), short(1, 0)), held(9, 1, 10, false));
        // The retry says the lost attempt made no hold (a later attempt would
        // have found it), so the unit was free and the refusal is the wrong
        // answer.
        refused_at(&r, 3);
    }

    #[test]
    fn lost_replays_of_an_old_key_do_not_hide_an_oversell() {
        let t0 = 1_000 * S;
        let hold = |id, from_ms: i64, created| answer(id, "held", t0 + from_ms * 1_000 + S, 1, Some(created));
        let mut h = H::with_stock(2);
        h.op(1, 10, 11, one_second("k1"), hold(7, 10, true));
        // Replays of k1, which already has its hold: one client's end with an
        // answer, another's never do. Each may have taken effect (it changes
        // nothing) and brings a lapse step of its own.
        for i in 0..25 {
            h.lost(2, 20 + 10 * i, one_second("k1"));
            h.lost(3, 25 + 10 * i, one_second("k1"));
        }
        h.op(2, 400, 401, one_second("k1"), hold(7, 10, false));
        // After hold 7 lapsed, three buyers hold the two units.
        h.op(4, 3_000, 3_010, one_second("k2"), hold(8, 3_000, true))
            .op(5, 3_100, 3_110, one_second("k3"), hold(9, 3_100, true))
            .op(6, 3_200, 3_210, one_second("k4"), hold(10, 3_200, true));
        let r = h.check();
        refused_at(&r, h.n);
        assert!(!r.violations[0].gave_up);
        // Each subset of the no-op lapses taken early would be a state of
        // its own: 2^25 of them.
        assert!(r.steps < 10_000, "{} steps", r.steps);
    }

    #[test]
    fn a_read_may_need_several_lost_stock_changes() {
        let change = |location: &str, change: &str, n| Call::Stock {
            item: "i".into(),
            location: location.into(),
            change: change.into(),
            n,
        };
        let level = |location: &str, qty| Answer::Level { location: location.into(), qty };
        let history = |a: Qty| {
            H::default()
                .op(0, 0, 1, change("a", "set", 2), level("a", q(2, 0, 0)))
                .op(0, 2, 3, change("b", "set", 3), level("b", q(3, 0, 0)))
                // A `serve` killed with both in flight: neither answered.
                .lost(1, 10, change("a", "adjust", 2))
                .lost(2, 11, change("b", "adjust", 1))
                .op(
                    3,
                    50,
                    51,
                    Call::Levels { item: "i".into() },
                    Answer::Levels { locations: vec![("a".into(), a), ("b".into(), q(4, 0, 0))] },
                )
                .check()
        };
        // The read saw both take effect.
        let r = history(q(4, 0, 0));
        assert!(r.ok(), "{}", r.violations[0]);
        // No lost change explains 5 at a.
        refused_at(&history(q(5, 0, 0)), 5);
    }

    #[test]
    fn histories_round_trip_through_json_lines() {
        let h = H::k1_holds_one(2);
        let mut buf = Vec::new();
        crate::verify::history::write(&h.events, &mut buf).unwrap();
        let back = crate::verify::history::read(&buf[..]).unwrap();
        assert_eq!(back, h.events);
    }
}
