//! Connection visibility (docs/design.md, "Connection tags"): every
//! statement holdfast sends starts with
//! a comment naming the business process that sent it, and holdfast adds up,
//! per tag, how long connections are held, and how many statements and
//! transactions they carried.
//!
//! The format is `/* conn_tag:<tag> */ ` where `<tag>` is the operation
//! (`reserve`, `claim`, `release`, `extend`, `get`, `expire`, `replenish`,
//! `stock`, `levels`, `audit`, `migrate`); when the caller names its own
//! process (`with_conn_tag`, HTTP `X-Conn-Tag`, CLI `--conn-tag`) that name is
//! the tag and the operation follows as a second comment:
//! `/* conn_tag:checkout_completion */ /* op:reserve */ `. Tags are
//! `[a-z0-9_]{1,64}` ([`ConnTag`]), so a tag can never close the comment.
//!
//! One mechanism does it: every statement text goes through [`sql`] (the
//! dialects' `q!` macro and `begin` call it), which reads the tags from
//! task-locals set by the engine and the caller.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use holdfast_core::{ConnHold, ConnTag};

tokio::task_local! {
    static CALLER: ConnTag;
    static OP: &'static str;
}

/// Runs `fut` with `tag` naming the caller's business process: every
/// statement holdfast sends for it carries `/* conn_tag:<tag> */`, and its
/// connection time is counted under that tag.
pub async fn with_conn_tag<F: Future>(tag: ConnTag, fut: F) -> F::Output {
    CALLER.scope(tag, fut).await
}

/// Runs `fut` as holdfast operation `name` (the tag when the caller gave none).
pub(crate) async fn op<F: Future>(name: &'static str, fut: F) -> F::Output {
    OP.scope(name, fut).await
}

/// `fut` with the task-locals of the task that calls this (the caller's tag,
/// the operation), for running it on another task.
pub(crate) fn carried<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let caller = caller();
    let op = OP.try_with(|o| *o).ok();
    async move {
        let fut = async move {
            match op {
                Some(op) => OP.scope(op, fut).await,
                None => fut.await,
            }
        };
        match caller {
            Some(tag) => CALLER.scope(tag, fut).await,
            None => fut.await,
        }
    }
}

pub(crate) fn caller() -> Option<ConnTag> {
    CALLER.try_with(|t| t.clone()).ok()
}

fn operation() -> &'static str {
    OP.try_with(|o| *o).unwrap_or("holdfast")
}

/// The tag connection time and statements are counted under.
fn effective() -> String {
    caller().map(|c| c.as_str().to_string()).unwrap_or_else(|| operation().to_string())
}

/// Statement texts already prefixed, so the same statement from the same
/// process is the same string (prepared-statement caches stay warm) and is
/// built once. Bounded: past the cap a text is built per call.
type InternKey = (Option<ConnTag>, &'static str, usize);
static INTERNED: LazyLock<Mutex<HashMap<InternKey, &'static str>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
const INTERN_CAP: usize = 20_000;

/// `text` with the comment naming who sends it. Counts a statement under
/// the effective tag.
pub(crate) fn sql(text: &'static str) -> Cow<'static, str> {
    let caller = caller();
    let op = operation();
    record(|s| s.statements += 1);
    metrics::counter!("holdfast_db_statements_total", "tag" => effective()).increment(1);
    let key = (caller.clone(), op, text.as_ptr() as usize);
    let mut map = INTERNED.lock().expect("tag map");
    if let Some(s) = map.get(&key) {
        return Cow::Borrowed(s);
    }
    let prefixed = match &caller {
        Some(c) => format!("/* conn_tag:{c} */ /* op:{op} */ {text}"),
        None => format!("/* conn_tag:{op} */ {text}"),
    };
    if map.len() >= INTERN_CAP {
        return Cow::Owned(prefixed);
    }
    let leaked: &'static str = Box::leak(prefixed.into_boxed_str());
    map.insert(key, leaked);
    Cow::Borrowed(leaked)
}

/// A statement text built at run time, with the same comment as [`sql`].
pub(crate) fn owned(text: String) -> String {
    let prefix = sql("");
    format!("{prefix}{text}")
}

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    checkouts: u64,
    transactions: u64,
    statements: u64,
    hold: Duration,
    hold_max: Duration,
}

static TOTALS: LazyLock<Mutex<HashMap<String, Totals>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn record(f: impl FnOnce(&mut Totals)) {
    let tag = effective();
    let mut map = TOTALS.lock().expect("tag totals");
    f(map.entry(tag).or_default());
}

/// Per-tag totals since the process started, sorted by total hold time.
pub fn connection_report() -> Vec<ConnHold> {
    let map = TOTALS.lock().expect("tag totals");
    let mut rows: Vec<ConnHold> = map
        .iter()
        .map(|(tag, t)| ConnHold {
            tag: tag.clone(),
            checkouts: t.checkouts,
            transactions: t.transactions,
            statements: t.statements,
            hold_seconds_total: t.hold.as_secs_f64(),
            hold_seconds_max: Some(t.hold_max.as_secs_f64()),
            hold_seconds_mean: if t.checkouts == 0 { 0.0 } else { t.hold.as_secs_f64() / t.checkouts as f64 },
        })
        .collect();
    rows.sort_by(|a, b| b.hold_seconds_total.total_cmp(&a.hold_seconds_total).then(a.tag.cmp(&b.tag)));
    rows
}

/// A connection held by this task, from when the pool handed it out (the
/// guard is made right after) until the guard drops, after the commit or
/// rollback that gives it back.
#[derive(Debug)]
pub(crate) struct Lease {
    tag: String,
    start: Instant,
}

impl Lease {
    pub(crate) fn transaction() -> Self {
        record(|s| s.transactions += 1);
        metrics::counter!("holdfast_db_transactions_total", "tag" => effective()).increment(1);
        Self::start()
    }

    pub(crate) fn start() -> Self {
        Self { tag: effective(), start: Instant::now() }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = self.start.elapsed();
        metrics::histogram!("holdfast_db_connection_hold_seconds", "tag" => self.tag.clone())
            .record(held.as_secs_f64());
        let mut map = TOTALS.lock().expect("tag totals");
        let t = map.entry(std::mem::take(&mut self.tag)).or_default();
        t.checkouts += 1;
        t.hold += held;
        t.hold_max = t.hold_max.max(held);
    }
}
