//! Request coalescing, an application-level group commit: concurrent
//! operations of one key (a shop, and the caller's conn tag) go to the
//! database together, one batch at a time, instead of one commit each.
//!
//! There is no timer. A request that finds fewer than `max_in_flight` batches
//! of its key running leads at once: it runs a batch of itself and whatever
//! queued up, so a lone request goes straight to the database and low load
//! adds no latency. A request that finds the key busy queues; when a leader's
//! batch is done, the first request still queued becomes the next leader and
//! takes the queue (up to `max_batch`) with it. Every batch runs on a caller's
//! own task, never on a background one, so nothing here needs `'static` data
//! or outlives the store.
//!
//! A caller that goes away while queued is dropped from its batch if it has
//! not started (nobody waits for its answer); one whose batch has started is
//! carried through, like a request whose client hung up mid-commit. Store
//! operations run detached (detach.rs), so "went away" is the flag
//! [`crate::detach::gone`] reads, and a batch, which answers others too,
//! runs to its end whoever leads it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::detach;

/// What a queued request hears: its answer, or that it leads now (with its
/// own item back).
enum Signal<T, R> {
    Done(R),
    Lead(T),
}

/// A queued request, its channel, and the flags that say its caller left.
type Queued<T, R> = (T, oneshot::Sender<Signal<T, R>>, Vec<Arc<AtomicBool>>);

struct Lane<T, R> {
    waiting: VecDeque<Queued<T, R>>,
    /// Batches of this key running now.
    running: usize,
}

/// The coalescer of one operation.
pub(crate) struct Coalescer<K, T, R> {
    lanes: Mutex<HashMap<K, Lane<T, R>>>,
    max_batch: usize,
    max_in_flight: usize,
    op: &'static str,
}

impl<K, T, R> std::fmt::Debug for Coalescer<K, T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("op", &self.op)
            .field("max_batch", &self.max_batch)
            .field("max_in_flight", &self.max_in_flight)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, T, R> Coalescer<K, T, R> {
    pub(crate) fn new(op: &'static str, max_batch: usize, max_in_flight: usize) -> Self {
        Self { lanes: Mutex::new(HashMap::new()), max_batch: max_batch.max(1), max_in_flight: max_in_flight.max(1), op }
    }

    /// Runs `item` in a batch of its key and returns its answer. `run` takes
    /// a batch, in arrival order, and answers each item, in the same order.
    /// `left`: the answer of a request whose caller went away before its
    /// batch started (nothing was done for it).
    pub(crate) async fn submit<F, Fut>(&self, key: K, item: T, run: F, left: impl FnOnce() -> R) -> R
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<R>>,
    {
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut lanes = self.lanes.lock().expect("coalescer lanes");
            let lane = lanes.entry(key.clone()).or_insert_with(|| Lane { waiting: VecDeque::new(), running: 0 });
            if lane.running < self.max_in_flight {
                lane.running += 1;
                Some(item)
            } else {
                lane.waiting.push_back((item, tx, detach::flags()));
                None
            }
        };
        let mine = match lead {
            Some(item) => item,
            None => match rx.await {
                Ok(Signal::Done(r)) => return r,
                Ok(Signal::Lead(item)) => item,
                // Passed over: its caller had gone when its turn came.
                Err(_) => return left(),
            },
        };
        self.lead(&key, mine, &run).await
    }

    /// Runs one batch led by `mine` (whose answer is returned), answers the
    /// others, and hands the lead to the first request still queued.
    async fn lead<F, Fut>(&self, key: &K, mine: T, run: &F) -> R
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<R>>,
    {
        let (mut batch, mut senders) = (vec![mine], Vec::new());
        {
            let mut lanes = self.lanes.lock().expect("coalescer lanes");
            let lane = lanes.get_mut(key).expect("a running lane");
            while batch.len() < self.max_batch {
                let Some((item, tx, flags)) = lane.waiting.pop_front() else { break };
                if tx.is_closed() || detach::any(&flags) {
                    continue; // its caller went away before the batch started
                }
                batch.push(item);
                senders.push(tx);
            }
        }
        metrics::histogram!("holdfast_coalesce_batch_size", "op" => self.op).record(batch.len() as f64);
        metrics::counter!("holdfast_coalesce_batches_total", "op" => self.op).increment(1);
        let n = batch.len();
        // Boxed: a batch's future is large, and every request's future would
        // otherwise carry room for it (and copy it as it moves), led or not.
        let mut answers = detach::shared(Box::pin(run(batch))).await.into_iter();
        assert_eq!(answers.len(), n, "a batch answers each of its requests");
        let mine = answers.next().expect("the leader's answer");
        for (tx, answer) in senders.into_iter().zip(answers) {
            let _ = tx.send(Signal::Done(answer));
        }
        self.hand_off(key);
        mine
    }

    /// The first request still queued leads the next batch; with none, the
    /// lane has one batch fewer running.
    fn hand_off(&self, key: &K) {
        let mut lanes = self.lanes.lock().expect("coalescer lanes");
        let lane = lanes.get_mut(key).expect("a running lane");
        while let Some((item, tx, flags)) = lane.waiting.pop_front() {
            if detach::any(&flags) {
                continue; // dropping `tx` answers it `left`
            }
            if tx.send(Signal::Lead(item)).is_ok() {
                return;
            }
        }
        lane.running -= 1;
        if lane.running == 0 {
            lanes.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    type Batches = Arc<Mutex<Vec<Vec<u32>>>>;
    type Answers = std::pin::Pin<Box<dyn Future<Output = Vec<(u32, usize)>> + Send>>;

    /// A batch runner that takes 20 ms, records each batch and answers each
    /// request with (itself, its batch's size).
    fn recorder(batches: &Batches) -> impl Fn(Vec<u32>) -> Answers {
        let batches = batches.clone();
        move |batch| {
            let batches = batches.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let n = batch.len();
                batches.lock().unwrap().push(batch.clone());
                batch.into_iter().map(|x| (x, n)).collect()
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_lone_request_goes_alone_and_a_crowd_goes_in_batches() {
        let c = Arc::new(Coalescer::<u8, u32, (u32, usize)>::new("test", 8, 1));
        let batches = Batches::default();
        let left = || unreachable!("no caller goes away here");
        assert_eq!(c.submit(1, 1000, recorder(&batches), left).await, (1000, 1), "a lone request is not held back");

        let mut tasks = Vec::new();
        for x in 0..40u32 {
            let (c, batches) = (c.clone(), batches.clone());
            tasks.push(tokio::spawn(async move { c.submit(1, x, recorder(&batches), left).await }));
        }
        for (x, t) in tasks.into_iter().enumerate() {
            let (got, _) = t.await.unwrap();
            assert_eq!(got, x as u32, "each request gets its own answer");
        }
        let batches = batches.lock().unwrap();
        assert!(batches.iter().all(|b| b.len() <= 8), "{batches:?}");
        assert!(batches.len() < 30, "40 concurrent requests should share batches: {batches:?}");
        let mut all: Vec<u32> = batches.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, [(0..40).collect(), vec![1000]].concat(), "every request ran exactly once");
        assert!(c.lanes.lock().unwrap().is_empty(), "an idle key leaves nothing behind");
    }
}
