//! In-process gates in front of the ledger locks: at most one slow-path
//! reserve of this process per (shop, item) goes to the ledger rows at a
//! time. (A coalesced batch's refill needs none: it skips ledger rows that
//! are taken and never waits.)
//!
//! The slow path takes its ledger rows without waiting (SKIP LOCKED): one
//! that finds them busy waits for their holder, then starts over from the
//! fast path, where the holder's refill put its units. Across processes that
//! wait is a shared lock on the ledger rows, held by a connection. Within one
//! process it is a gate here, waited for without a connection and without a
//! lock in the database: a reserve that finds the gate of one of its items
//! taken waits for it to come free and starts over (most then find units in
//! the refilled pool, all at once); one that comes back to a taken gate
//! queues, first come, first served, and on its turn looks at the pool and
//! the sold-out check again before it goes to the ledger. Waiting in the
//! database made every waiter hold a connection and a place in the row's lock
//! queue, and a waiter that was let through had to win the race for the
//! ledger again against newcomers: with a cart that only the slow path can
//! fill (its first location is empty), some reserves lost it dozens of times
//! and took seconds.
//!
//! Gates are taken in item order, so two carts with the same items in other
//! orders cannot wait for each other. A gate is dropped from the map once
//! nobody holds or waits for it.
//!
//! The same gates, keyed by idempotency key ([`KeyGates`]), put one key's
//! reserves of this process one after another: a retry sent while its key's
//! first attempt is still under way (its caller gave up waiting, the attempt
//! goes on) waits for that attempt and answers with what it made, instead of
//! looking for units the attempt is about to hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use std::hash::Hash;

use holdfast_core::{IdempotencyKey, ItemId, ShopId};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Gate = AsyncMutex<()>;
type GateMap<K> = HashMap<(ShopId, K), Weak<Gate>>;

/// Gates per (shop, `K`): per item in front of the ledger, per idempotency
/// key in front of a reserve.
#[derive(Debug)]
pub(crate) struct Gates<K = ItemId> {
    /// The gates, and the size at which the idle ones are next dropped.
    map: Mutex<(GateMap<K>, usize)>,
}

/// One reserve of an idempotency key at a time.
pub(crate) type KeyGates = Gates<IdempotencyKey>;

impl<K> Default for Gates<K> {
    fn default() -> Self {
        Self { map: Mutex::new((HashMap::new(), 1024)) }
    }
}

/// The gates of one slow path, held until dropped.
#[derive(Debug)]
pub(crate) struct Pass {
    _held: Vec<OwnedMutexGuard<()>>,
    waited: bool,
}

impl Pass {
    /// Whether another slow path had one of the gates first.
    pub(crate) fn waited(&self) -> bool {
        self.waited
    }
}

impl<K: Clone + Ord + Hash> Gates<K> {
    /// Takes the gates of `items` of `shop`, in order. With `queue`, it
    /// waits for each (first come, first served); without, when one is taken
    /// it waits for that gate to come free, takes nothing and says `None`.
    pub(crate) async fn enter<'a>(
        &self,
        shop: &ShopId,
        items: impl IntoIterator<Item = &'a K>,
        queue: bool,
    ) -> Option<Pass>
    where
        K: 'a,
    {
        let mut items: Vec<&K> = items.into_iter().collect();
        items.sort();
        items.dedup();
        let (mut held, mut waited) = (Vec::with_capacity(items.len()), false);
        for item in items {
            let gate = self.gate(shop, item);
            held.push(match gate.clone().try_lock_owned() {
                Ok(g) => g,
                Err(_) if queue => {
                    waited = true;
                    gate.lock_owned().await
                }
                Err(_) => {
                    drop(held);
                    drop(gate.lock_owned().await);
                    return None;
                }
            });
        }
        Some(Pass { _held: held, waited })
    }

    fn gate(&self, shop: &ShopId, item: &K) -> Arc<Gate> {
        let (map, limit) = &mut *self.map.lock().expect("ledger gates");
        let key = (shop.clone(), item.clone());
        if let Some(g) = map.get(&key).and_then(Weak::upgrade) {
            return g;
        }
        if map.len() >= *limit {
            // Twice what is still in use, so that many gates in use at once
            // do not make every new one scan them all.
            map.retain(|_, g| g.strong_count() > 0);
            *limit = (2 * map.len()).max(1024);
        }
        let g = Arc::new(Gate::new(()));
        map.insert(key, Arc::downgrade(&g));
        g
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn item(s: &str) -> ItemId {
        ItemId::new(s).unwrap()
    }

    #[tokio::test]
    async fn gates_are_taken_in_turn() {
        let gates: Arc<Gates> = Arc::new(Gates::default());
        let shop = ShopId::new("s").unwrap();
        let first = gates.enter(&shop, [&item("b"), &item("a")], true).await.expect("queued");
        assert!(!first.waited());
        // Another shop's item of the same name is another gate.
        assert!(!gates.enter(&ShopId::new("t").unwrap(), [&item("a")], true).await.unwrap().waited());
        // Not queueing: wait for the gate, hold nothing.
        let (g, s) = (gates.clone(), shop.clone());
        let passer = tokio::spawn(async move { g.enter(&s, [&item("a")], false).await.is_none() });
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for n in 0..3 {
            let (g, s, o) = (gates.clone(), shop.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let pass = g.enter(&s, [&item("a")], true).await.expect("queued");
                o.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
                pass.waited()
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(order.lock().unwrap().is_empty(), "all wait while the gate is held");
        drop(first);
        assert!(passer.await.unwrap(), "told to start over");
        for w in waiters {
            assert!(w.await.unwrap(), "each one waited");
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "first come, first served");
        assert!(!gates.enter(&shop, [&item("a"), &item("b")], false).await.expect("free").waited(), "free again");
    }

    #[tokio::test]
    async fn idle_gates_are_forgotten() {
        let gates: Gates = Gates::default();
        let shop = ShopId::new("s").unwrap();
        for n in 0..3000 {
            drop(gates.enter(&shop, [&item(&format!("i{n}"))], false).await);
        }
        assert!(gates.map.lock().unwrap().0.len() <= 1024);
    }
}
