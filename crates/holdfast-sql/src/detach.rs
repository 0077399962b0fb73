//! Database work that a caller's cancellation never cuts short.
//!
//! sqlx's futures are not cancel-safe: a future dropped between sending a
//! statement and reading its answer leaves the connection out of step with
//! the server, and back in the pool it fails whatever uses it next. A
//! caller's future is dropped all the time — a request timeout, a client that
//! hangs up, a `tokio::time::timeout` around a store call — and a batch of
//! coalesced requests runs on one caller's task, answering the others.
//!
//! So every store operation runs on a task of its own ([`detach`]), which the
//! caller's going away does not stop: the attempt under way finishes (commits
//! or rolls back) on its own connection. It does not start another: the
//! retry loop asks [`gone`] before each attempt and gives up with
//! `unavailable` once its caller has gone. A coalesced batch, which answers
//! several callers, runs to its end whoever led it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tracing::Instrument;

use crate::tag;

tokio::task_local! {
    /// Set when a caller of the work on this task went away; one per
    /// [`detach`] the work is nested in.
    static GONE: Vec<Arc<AtomicBool>>;
}

/// Sets the flag when the waiting future is dropped, answered or not (once
/// answered, nothing reads it).
struct OnDrop(Arc<AtomicBool>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` on a task of its own, with the caller's connection tag and
/// tracing span, and waits for it. Dropping the returned future does not
/// cancel `work`; it marks it [`gone`]. A panic in `work` resumes in the
/// caller.
pub async fn detach<F>(work: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let flag = Arc::new(AtomicBool::new(false));
    let mut flags = GONE.try_with(|f| f.clone()).unwrap_or_default();
    flags.push(flag.clone());
    let handle = tokio::spawn(tag::carried(GONE.scope(flags, work)).in_current_span());
    let _mark = OnDrop(flag);
    match handle.await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime shutting down cancels a spawned task.
        Err(e) => panic!("detached database work was cancelled: {e}"),
    }
}

/// A store that keeps a `Weak` to itself, so that its operations can run
/// [`detach`]ed with the store as an `Arc`, outliving the caller's borrow.
pub trait Detached: Send + Sync + Sized + 'static {
    fn weak_self(&self) -> &Weak<Self>;

    /// Runs `work` on this store on a task of its own ([`detach`]): a caller
    /// that goes away never cancels it mid-statement or mid-batch.
    fn detached<T, F, Fut>(&self, work: F) -> impl Future<Output = T> + Send
    where
        T: Send + 'static,
        F: FnOnce(Arc<Self>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
    {
        let me = self.weak_self().upgrade().expect("a store lives in an Arc");
        // Boxed at once: an operation's future holds every path it may take
        // (a whole coalesced batch, the slow path) and is large; from here on
        // only a pointer moves, through the caller's futures and the task's.
        detach(Box::pin(work(me)))
    }
}

/// Whether a caller of the work on this task has gone away.
pub(crate) fn gone() -> bool {
    GONE.try_with(|f| f.iter().any(|g| g.load(Ordering::Relaxed))).unwrap_or(false)
}

/// The flags [`gone`] reads, to ask later from another task.
pub(crate) fn flags() -> Vec<Arc<AtomicBool>> {
    GONE.try_with(|f| f.clone()).unwrap_or_default()
}

/// Whether any of `flags` is set.
pub(crate) fn any(flags: &[Arc<AtomicBool>]) -> bool {
    flags.iter().any(|g| g.load(Ordering::Relaxed))
}

/// Runs `fut` as work no single caller owns (a batch answering several):
/// [`gone`] is false within it.
pub(crate) async fn shared<F: Future>(fut: F) -> F::Output {
    GONE.scope(Vec::new(), fut).await
}
