//! Inventory events: `inventory.sold_out` when what is available of an
//! (item, location) reached 0, `inventory.restocked` when it rose from 0
//! (docs/design.md, "Inventory events").
//!
//! Availability changes in transactions that do not otherwise meet: fast-path
//! holds take pool rows with SKIP LOCKED and never touch the ledger row, and
//! releases take it shared. Two holds taking the last two units each see the
//! other's unit as still there, so neither alone can tell that 0 was reached.
//! For a shop subscribed to an inventory topic, each such transaction
//! therefore takes one more lock as its very last step: the (item,
//! location)'s row in `inventory_watch` (lock order step 5). In turn, under
//! that lock, it reads the item's levels — which now include every
//! transaction that held the lock before it, since each held it to its
//! commit — and compares what is available with what the events last said,
//! kept on the same row. A transaction whose changes are not visible yet
//! takes the lock later and compares then. So the comparisons happen one at a
//! time, each one sees all the changes before it, and "reached 0" and "rose
//! from 0" are each said once per change, in the order they happened.
//!
//! Nothing waits while holding a watch row but for its own commit: the levels
//! are a plain read, the events an insert. Shops without such a subscription
//! never come here.

use std::collections::BTreeMap;

use holdfast_core::{ItemId, ItemLevels, LocationId, ReservationId, ShopId, Topic};
use serde_json::json;

use super::SqlStore;
use crate::dialect::{Conn, Dialect, Gone, Stmt};
use crate::driver::Driver;
use crate::run;
use crate::webhooks::Event;

/// An (item, location) whose availability a transaction changed, and by how
/// many units (negative: it took them; 0: it may have, as an expiry does,
/// whose units counted as available from the moment the hold ran out).
pub(crate) type Touch = (ItemId, LocationId, i64);

impl<D: Dialect> SqlStore<D> {
    /// Whether any subscription of `shop` wants an inventory topic.
    pub(crate) async fn wants_inventory(&self, c: Option<&mut Conn<D>>, shop: &ShopId) -> sqlx::Result<bool> {
        self.outbox.wants(self, c, shop, &Topic::INVENTORY).await
    }

    /// The last step of a transaction that changed the availability of
    /// `touched` in `shop`, before its commit: for a shop subscribed to an
    /// inventory topic, take the watch rows, compare, and write the events
    /// (see the module doc). Nothing at all for other shops.
    pub(crate) async fn watch(
        &self,
        tx: &mut Conn<D>,
        shop: &ShopId,
        touched: impl IntoIterator<Item = Touch>,
    ) -> sqlx::Result<()> {
        let mut raised: BTreeMap<(ItemId, LocationId), i64> = BTreeMap::new();
        for (item, location, n) in touched {
            *raised.entry((item, location)).or_default() += n;
        }
        if raised.is_empty() || !self.wants_inventory(Some(&mut *tx), shop).await? {
            return Ok(());
        }
        // In byte order: the order every transaction locks them in.
        let keys = key_list(raised.keys());
        let mut said = watch_lock::<D>(tx, shop, &keys).await?;
        // Every ledger row has its watch row from its first stock change;
        // one missing (a row written by hand) is added here.
        if said.len() < raised.len() {
            let missing = key_list(raised.keys().filter(|k| !said.contains_key(*k)));
            run::exec::<D>(tx, Stmt::WatchAdd, &[shop.as_str().into(), missing.as_str().into()]).await?;
            said = watch_lock::<D>(tx, shop, &keys).await?;
        }
        let now = available::<D>(tx, shop, &raised).await?;
        let (mut changed, mut set) = (Vec::new(), Vec::new());
        for ((item, location), &n) in &raised {
            let now = now.get(&(item.clone(), location.clone())).copied().unwrap_or(0);
            let last = said.get(&(item.clone(), location.clone())).copied().flatten();
            // Nothing said yet: what there was before this transaction.
            let was_out = last.unwrap_or(now - n <= 0);
            let is_out = now <= 0;
            if is_out != was_out {
                let topic = if is_out { Topic::InventorySoldOut } else { Topic::InventoryRestocked };
                changed.push((topic, item, location));
            }
            if last != Some(is_out) {
                set.push(json!({"item": item.as_str(), "location": location.as_str(), "sold_out": i32::from(is_out)}));
            }
        }
        // The item's levels, for the events' data: read only when there is an
        // event to write (summing a hot item's live holds is not free).
        let mut events = Vec::with_capacity(changed.len());
        let mut levels: BTreeMap<&ItemId, ItemLevels> = BTreeMap::new();
        for (topic, item, location) in changed {
            if let std::collections::btree_map::Entry::Vacant(e) = levels.entry(item) {
                e.insert(item_levels::<D>(tx, shop, item).await?);
            }
            events.push(Event { topic, shop: shop.clone(), data: inventory_data(&levels[item], location) });
        }
        if !set.is_empty() {
            let set = serde_json::Value::Array(set).to_string();
            run::exec::<D>(tx, Stmt::WatchSet, &[shop.as_str().into(), set.as_str().into()]).await?;
        }
        self.write_events(tx, &events).await
    }
}

impl<D: Dialect> SqlStore<D> {
    /// [`Self::watch`] for the holds a sweep expired, shop by shop in byte
    /// order (the order two sweeps lock their watch rows in).
    pub(crate) async fn watch_expired(&self, tx: &mut Conn<D>, gone: &Gone) -> sqlx::Result<()> {
        let mut by_shop: BTreeMap<&ShopId, Vec<ReservationId>> = BTreeMap::new();
        for (shop, id) in gone {
            by_shop.entry(shop).or_default().push(*id);
        }
        for (shop, mut ids) in by_shop {
            if !self.wants_inventory(Some(&mut *tx), shop).await? {
                continue;
            }
            ids.sort();
            ids.dedup();
            let lines = run::lines_of_each::<D>(tx, shop, &ids).await?;
            let touched = lines.into_values().flatten().map(|a| (a.item, a.location, i64::from(a.quantity)));
            self.watch(tx, shop, touched).await?;
        }
        Ok(())
    }
}

/// What is available at each (item, location) of `raised`, counted as the
/// API counts it: from the pool, the ledger row, units returned and not yet
/// folded, and the units of holds past their expiry (the lock-free sold-out
/// check's statement, which never sums the live holds).
async fn available<D: Dialect>(
    tx: &mut Conn<D>,
    shop: &ShopId,
    raised: &BTreeMap<(ItemId, LocationId), i64>,
) -> sqlx::Result<BTreeMap<(ItemId, LocationId), i64>> {
    let spec: Vec<(ItemId, Option<LocationId>)> = raised.keys().map(|(i, l)| (i.clone(), Some(l.clone()))).collect();
    Ok(D::available(tx, shop, &spec).await?.0.into_iter().map(|(i, l, n)| ((i, l), n)).collect())
}

async fn item_levels<D: Dialect>(tx: &mut Conn<D>, shop: &ShopId, item: &ItemId) -> sqlx::Result<ItemLevels> {
    let (locations, _) = run::levels_of::<D>(tx, shop.as_str(), item.as_str(), chrono::Utc::now()).await?;
    Ok(ItemLevels { item: item.clone(), locations })
}

/// An inventory event's `data`: the item's levels as `GET
/// /v1/shops/{shop}/items/{item}` answers them, and the location the event
/// is about.
fn inventory_data(levels: &ItemLevels, location: &LocationId) -> serde_json::Value {
    let mut data = serde_json::to_value(levels).expect("levels serialize");
    data["location"] = json!(location.as_str());
    data
}

/// The watch row of a ledger row just created.
pub(super) async fn add_watch_row<D: Dialect>(
    tx: &mut Conn<D>,
    shop: &ShopId,
    item: &ItemId,
    location: &LocationId,
) -> sqlx::Result<()> {
    let key = key_list([(item.clone(), location.clone())].iter());
    run::exec::<D>(tx, Stmt::WatchAdd, &[shop.as_str().into(), key.as_str().into()]).await?;
    Ok(())
}

fn key_list<'a>(keys: impl Iterator<Item = &'a (ItemId, LocationId)>) -> String {
    let keys: Vec<_> = keys.map(|(i, l)| json!({"item": i.as_str(), "location": l.as_str()})).collect();
    serde_json::Value::Array(keys).to_string()
}

/// The watch rows of `keys` that exist, locked, with what was last said
/// (`None`: nothing yet).
async fn watch_lock<D: Dialect>(
    tx: &mut Conn<D>,
    shop: &ShopId,
    keys: &str,
) -> sqlx::Result<BTreeMap<(ItemId, LocationId), Option<bool>>> {
    let rows = run::rows::<D>(tx, Stmt::WatchLock, &[shop.as_str().into(), keys.into()]).await?;
    rows.iter()
        .map(|r| {
            Ok((
                (run::name::<D::Db, _>(r, "item_id")?, run::name::<D::Db, _>(r, "location_id")?),
                D::Db::maybe_int(r, "sold_out")?.map(|n| n != 0),
            ))
        })
        .collect()
}
