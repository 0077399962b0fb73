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
    static POD: std::sync::Arc<str>;
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

/// Runs `fut`, a call of pod `name`: its connection time is counted under
/// that pod as well as its tag.
pub async fn in_pod<F: Future>(name: impl Into<std::sync::Arc<str>>, fut: F) -> F::Output {
    POD.scope(name.into(), Box::pin(fut)).await
}

/// The pod the running task works in ([`in_pod`]), if any.
pub(crate) fn pod() -> Option<std::sync::Arc<str>> {
    POD.try_with(|p| p.clone()).ok()
}

/// The labels of a connection metric: its tag, and its pod when there is one.
fn labels(tag: String, pod: Option<std::sync::Arc<str>>) -> Vec<metrics::Label> {
    let mut labels = vec![metrics::Label::new("tag", tag)];
    if let Some(pod) = pod {
        labels.push(metrics::Label::new("pod", pod.to_string()));
    }
    labels
}

/// `fut` with the task-locals of the task that calls this (the caller's tag,
/// the operation), for running it on another task.
pub(crate) fn carried<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let caller = caller();
    let op = OP.try_with(|o| *o).ok();
    let pod = pod();
    // Boxed: the three scopes below then move a pointer, not the whole
    // future (debug builds copy a future at each level it is wrapped in).
    let fut = Box::pin(fut);
    async move {
        let fut = async move {
            let fut = async move {
                match pod {
                    Some(pod) => POD.scope(pod, fut).await,
                    None => fut.await,
                }
            };
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
    metrics::counter!("holdfast_db_statements_total", labels(effective(), pod())).increment(1);
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

/// Keyed by (pod, tag).
type TotalsKey = (Option<std::sync::Arc<str>>, String);
static TOTALS: LazyLock<Mutex<HashMap<TotalsKey, Totals>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn record(f: impl FnOnce(&mut Totals)) {
    let key = (pod(), effective());
    let mut map = TOTALS.lock().expect("tag totals");
    f(map.entry(key).or_default());
}

/// Per-tag totals since the process started, sorted by total hold time.
pub fn connection_report() -> Vec<ConnHold> {
    let map = TOTALS.lock().expect("tag totals");
    let mut rows: Vec<ConnHold> = map
        .iter()
        .map(|((pod, tag), t)| ConnHold {
            tag: tag.clone(),
            pod: pod.as_deref().map(str::to_string),
            checkouts: t.checkouts,
            transactions: t.transactions,
            statements: t.statements,
            hold_seconds_total: t.hold.as_secs_f64(),
            hold_seconds_max: Some(t.hold_max.as_secs_f64()),
            hold_seconds_mean: if t.checkouts == 0 { 0.0 } else { t.hold.as_secs_f64() / t.checkouts as f64 },
        })
        .collect();
    rows.sort_by(|a, b| {
        b.hold_seconds_total.total_cmp(&a.hold_seconds_total).then(a.tag.cmp(&b.tag)).then(a.pod.cmp(&b.pod))
    });
    rows
}

/// A connection held by this task, from when the pool handed it out (the
/// guard is made right after) until the guard drops, after the commit or
/// rollback that gives it back.
#[derive(Debug)]
pub(crate) struct Lease {
    key: TotalsKey,
    start: Instant,
}

impl Lease {
    pub(crate) fn transaction() -> Self {
        record(|s| s.transactions += 1);
        metrics::counter!("holdfast_db_transactions_total", labels(effective(), pod())).increment(1);
        Self::start()
    }

    pub(crate) fn start() -> Self {
        Self { key: (pod(), effective()), start: Instant::now() }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let held = self.start.elapsed();
        let tag = self.key.1.clone();
        match &self.key.0 {
            Some(pod) => {
                metrics::histogram!("holdfast_db_connection_hold_seconds", "tag" => tag, "pod" => pod.to_string())
                    .record(held.as_secs_f64())
            }
            None => metrics::histogram!("holdfast_db_connection_hold_seconds", "tag" => tag).record(held.as_secs_f64()),
        }
        let mut map = TOTALS.lock().expect("tag totals");
        let t = map.entry(std::mem::take(&mut self.key)).or_default();
        t.checkouts += 1;
        t.hold += held;
        t.hold_max = t.hold_max.max(held);
    }
}
