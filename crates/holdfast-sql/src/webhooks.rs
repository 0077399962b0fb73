//! Events and webhooks on the SQL stores (docs/design.md, "Events and
//! webhooks"): the subscriptions, the outbox the engine writes inside the
//! transactions that cause events, and the delivery queue that workers lease
//! from with `SKIP LOCKED`.
//!
//! The engine asks [`Outbox::wanted`] which subscriptions of a shop want a
//! topic before it writes anything: the answer comes from this process's
//! view of the enabled subscriptions, read again at most every
//! [`REFRESH`], so a shop without subscriptions costs no statement at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, Utc};
use holdfast_core::{
    Attempt, Delivery, DeliveryStatus, Error, Leased, QueueStats, Reservation, ReservationId, ShopId, Subscription,
    Topic, Topics, WebhookStore,
};
use rand::RngCore;
use serde_json::json;

use crate::detach::Detached;
use crate::dialect::{Conn, Dialect, Gone, Stmt, TxMode};
use crate::driver::{Arg, Driver};
use crate::engine::SqlStore;
use crate::engine::reservation;
use crate::run::{self, Row, plain};
use crate::tag;

/// How stale this process's view of the subscriptions may get: a
/// subscription added on another replica (or by the CLI) is written to
/// from then on within this time.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Subscriptions of one shop: (id, topics).
type ShopSubs = Arc<Vec<(String, Topics)>>;

#[derive(Debug, Default)]
struct View {
    loaded: Option<Instant>,
    shops: HashMap<ShopId, ShopSubs>,
}

/// This process's view of who wants which events.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    view: RwLock<View>,
    refreshing: AtomicBool,
    /// Serialises the first load, so concurrent first callers wait for it.
    first: tokio::sync::Mutex<()>,
}

/// An event the engine is about to write: its topic, shop and data.
#[derive(Debug)]
pub(crate) struct Event {
    pub topic: Topic,
    pub shop: ShopId,
    pub data: serde_json::Value,
}

impl Event {
    pub(crate) fn reservation(topic: Topic, shop: &ShopId, r: &Reservation) -> Self {
        Event { topic, shop: shop.clone(), data: serde_json::to_value(r).expect("a reservation serializes") }
    }
}

impl Outbox {
    /// The subscriptions of `shop` that want `topic` (usually none). `c`: a
    /// connection the caller holds (its transaction), for the first read of
    /// the subscriptions; without one, one is taken from the pool. Fails only
    /// while the subscriptions were never read (the database is down):
    /// nothing is written without knowing who wants it.
    pub(crate) async fn wanted<D: Dialect>(
        &self,
        store: &SqlStore<D>,
        c: Option<&mut Conn<D>>,
        shop: &ShopId,
        topic: Topic,
    ) -> sqlx::Result<Vec<String>> {
        self.fresh(store, c).await?;
        let view = self.view.read().expect("outbox view");
        Ok(view
            .shops
            .get(shop)
            .map(|subs| subs.iter().filter(|(_, t)| t.contains(topic)).map(|(id, _)| id.clone()).collect())
            .unwrap_or_default())
    }

    /// Whether any subscription of `shop` wants one of `topics`.
    pub(crate) async fn wants<D: Dialect>(
        &self,
        store: &SqlStore<D>,
        c: Option<&mut Conn<D>>,
        shop: &ShopId,
        topics: &[Topic],
    ) -> sqlx::Result<bool> {
        self.fresh(store, c).await?;
        let view = self.view.read().expect("outbox view");
        Ok(view.shops.get(shop).is_some_and(|subs| subs.iter().any(|(_, t)| topics.iter().any(|&x| t.contains(x)))))
    }

    /// Makes sure the view is loaded; starts a reload in the background when
    /// it is older than [`REFRESH`] (a failed one keeps the view it had).
    async fn fresh<D: Dialect>(&self, store: &SqlStore<D>, c: Option<&mut Conn<D>>) -> sqlx::Result<()> {
        let loaded = self.view.read().expect("outbox view").loaded;
        match loaded {
            None => {
                let _first = self.first.lock().await;
                if self.view.read().expect("outbox view").loaded.is_none() {
                    match c {
                        // Tagged as what it is, not as the caller's operation.
                        Some(c) => tag::op("webhook", self.load::<D>(c)).await?,
                        None => self.reload(store).await?,
                    }
                }
            }
            Some(at) if at.elapsed() >= REFRESH => {
                if !self.refreshing.swap(true, Ordering::AcqRel)
                    && let Some(me) = store.weak_self().upgrade()
                {
                    tokio::spawn(tag::carried(async move {
                        if let Err(e) = me.outbox.reload(&*me).await {
                            tracing::debug!(error = %e, "could not read the webhook subscriptions again");
                        }
                        me.outbox.refreshing.store(false, Ordering::Release);
                    }));
                }
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Reads every enabled subscription again, on a connection of its own.
    pub(crate) async fn reload<D: Dialect>(&self, store: &SqlStore<D>) -> sqlx::Result<()> {
        tag::op("webhook", async {
            let mut c = run::Solo::<D>::acquire(&store.pool).await?;
            let _lease = tag::Lease::start();
            self.load::<D>(&mut c).await?;
            c.done().await
        })
        .await
    }

    async fn load<D: Dialect>(&self, c: &mut Conn<D>) -> sqlx::Result<()> {
        let rows = run::all::<D, _>(c, Stmt::WebhookSubsLive, &[], |r| {
            Ok((
                run::name::<D::Db, ShopId>(r, "shop_id")?,
                D::Db::text(r, "id")?,
                Topics::parse_list(&D::Db::text(r, "topics")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
            ))
        })
        .await?;
        let mut shops: HashMap<ShopId, Vec<(String, Topics)>> = HashMap::new();
        for (shop, id, topics) in rows {
            shops.entry(shop).or_default().push((id, topics));
        }
        let mut view = self.view.write().expect("outbox view");
        view.shops = shops.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        view.loaded = Some(Instant::now());
        Ok(())
    }
}

impl<D: Dialect> SqlStore<D> {
    /// Writes `events` into the outbox, in `tx`, for every subscription that
    /// wants each; one statement for all of them, none when nobody does.
    pub(crate) async fn write_events(&self, tx: &mut Conn<D>, events: &[Event]) -> sqlx::Result<()> {
        let now = Utc::now();
        let (mut rows, mut written) = (Vec::new(), 0u64);
        for e in events {
            let subs = self.outbox.wanted(self, Some(&mut *tx), &e.shop, e.topic).await?;
            if subs.is_empty() {
                continue;
            }
            written += 1;
            let id = event_id();
            let payload = json!({
                "id": id,
                "type": e.topic.as_str(),
                "shop": e.shop.as_str(),
                "created_at": now.to_rfc3339_opts(SecondsFormat::Micros, true),
                "data": e.data,
            })
            .to_string();
            for sub in subs {
                rows.push(json!({
                    "event_id": id,
                    "shop_id": e.shop.as_str(),
                    "subscription_id": sub,
                    "topic": e.topic.as_str(),
                    "payload": payload,
                }));
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let list = serde_json::Value::Array(rows).to_string();
        run::exec::<D>(tx, Stmt::OutboxInsert, &[Arg::Text(&list), Arg::Time(now)]).await?;
        metrics::counter!("holdfast_webhook_events_total").increment(written);
        Ok(())
    }
}

impl<D: Dialect> SqlStore<D> {
    /// `reservation.expired` for the holds a statement of `tx` expired (the
    /// sweep, a refill's expiry), for the shops that want it.
    pub(crate) async fn expired_events(&self, tx: &mut Conn<D>, gone: &Gone) -> sqlx::Result<()> {
        let mut by_shop: BTreeMap<&ShopId, Vec<ReservationId>> = BTreeMap::new();
        for (shop, id) in gone {
            by_shop.entry(shop).or_default().push(*id);
        }
        let mut events = Vec::new();
        for (shop, mut ids) in by_shop {
            if !self.outbox.wants(self, Some(&mut *tx), shop, &[Topic::ReservationExpired]).await? {
                continue;
            }
            ids.sort();
            ids.dedup();
            let mut lines = run::lines_of_each::<D>(tx, shop, &ids).await?;
            for head in run::heads_for_update::<D>(tx, shop, &ids).await? {
                let of = lines.remove(&head.id).unwrap_or_default();
                events.push(Event::reservation(Topic::ReservationExpired, shop, &reservation(head, of)));
            }
        }
        self.write_events(tx, &events).await
    }
}

/// `evt_` and 26 characters of randomness (lower-case base32), unique
/// without coordination.
fn event_id() -> String {
    prefixed("evt_", 16)
}

fn prefixed(prefix: &str, bytes: usize) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut raw = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut raw);
    let mut out = String::from(prefix);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in raw {
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// A new subscription's id: `wh_` and 16 characters of randomness.
pub fn subscription_id() -> String {
    prefixed("wh_", 10)
}

fn subscription<D: Dialect>(r: &Row<D>) -> sqlx::Result<Subscription> {
    Ok(Subscription {
        id: D::Db::text(r, "id")?,
        shop: run::name::<D::Db, _>(r, "shop_id")?,
        url: D::Db::text(r, "url")?,
        topics: Topics::parse_list(&D::Db::text(r, "topics")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        created_at: D::Db::time(r, "created_at")?,
        disabled_at: D::Db::maybe_time(r, "disabled_at")?,
    })
}

fn delivery<D: Dialect>(r: &Row<D>) -> sqlx::Result<Delivery> {
    let parse = |e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e));
    let last_status = D::Db::maybe_int(r, "last_status")?.map(|s| s as u16);
    Ok(Delivery {
        id: D::Db::int(r, "id")?,
        event_id: D::Db::text(r, "event_id")?,
        shop: run::name::<D::Db, _>(r, "shop_id")?,
        subscription: D::Db::text(r, "subscription_id")?,
        topic: D::Db::text(r, "topic")?.parse().map_err(parse)?,
        payload: D::Db::text(r, "payload")?,
        status: D::Db::text(r, "status")?.parse().map_err(parse)?,
        attempts: run::count::<D::Db>(r, "attempts")?,
        created_at: D::Db::time(r, "created_at")?,
        next_attempt_at: D::Db::time(r, "next_attempt_at")?,
        last_status,
        last_error: D::Db::maybe_text(r, "last_error")?,
        delivered_at: D::Db::maybe_time(r, "delivered_at")?,
    })
}

#[async_trait]
impl<D: Dialect> WebhookStore for SqlStore<D> {
    async fn add_subscription(&self, sub: &Subscription, secret: &str) -> Result<(), Error> {
        let topics = sub.topics.to_list();
        let args = [
            Arg::Text(&sub.id),
            Arg::Text(sub.shop.as_str()),
            Arg::Text(&sub.url),
            Arg::Text(&topics),
            Arg::Text(secret),
            Arg::Time(sub.created_at),
        ];
        plain!(self, "webhook", |c| run::exec::<D>(c, Stmt::WebhookSubInsert, &args))?;
        // This process writes its events at once; other replicas within REFRESH.
        self.outbox.reload(self).await.map_err(run::plain_error::<D>)
    }

    async fn list_subscriptions(&self, shop: &ShopId) -> Result<Vec<Subscription>, Error> {
        let args = [Arg::Text(shop.as_str())];
        plain!(self, "webhook", |c| run::all::<D, _>(c, Stmt::WebhookSubList, &args, subscription::<D>))
    }

    async fn remove_subscription(&self, shop: &ShopId, id: &str) -> Result<bool, Error> {
        let args = [Arg::Text(shop.as_str()), Arg::Text(id)];
        let n = tag::op("webhook", async {
            let mut tx = D::begin(&self.pool, TxMode::Write).await.map_err(run::plain_error::<D>)?;
            let _lease = tag::Lease::transaction();
            let work = async {
                run::exec::<D>(&mut tx, Stmt::WebhookDropPending, &args).await?;
                run::exec::<D>(&mut tx, Stmt::WebhookSubDelete, &args).await
            };
            let n = work.await.map_err(run::plain_error::<D>)?;
            tx.commit().await.map_err(run::plain_error::<D>)?;
            Ok::<_, Error>(n)
        })
        .await?;
        self.outbox.reload(self).await.map_err(run::plain_error::<D>)?;
        Ok(n > 0)
    }

    async fn list_deliveries(
        &self,
        shop: &ShopId,
        status: Option<DeliveryStatus>,
        limit: u32,
    ) -> Result<Vec<Delivery>, Error> {
        let args = [Arg::Text(shop.as_str()), Arg::MaybeText(status.map(|s| s.as_str())), Arg::Int(limit.into())];
        plain!(self, "webhook", |c| run::all::<D, _>(c, Stmt::WebhookList, &args, delivery::<D>))
    }

    async fn retry_delivery(&self, shop: &ShopId, id: i64) -> Result<bool, Error> {
        let args = [Arg::Text(shop.as_str()), Arg::Int(id), Arg::Time(Utc::now())];
        Ok(plain!(self, "webhook", |c| run::exec::<D>(c, Stmt::WebhookRetry, &args))? > 0)
    }

    async fn lease_deliveries(&self, limit: u32, lease: Duration) -> Result<Vec<Leased>, Error> {
        let now = Utc::now();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
        tag::op("webhook", async {
            let work = async {
                let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                let _lease = tag::Lease::transaction();
                let due = run::all::<D, _>(&mut tx, Stmt::WebhookDue, &[Arg::Time(now), Arg::Int(limit.into())], |r| {
                    Ok((D::Db::int(r, "id")?, D::Db::maybe_time(r, "lease_until")?.is_some()))
                })
                .await?;
                if due.is_empty() {
                    tx.commit().await?;
                    return Ok(Vec::new());
                }
                let ids = serde_json::to_string(&due.iter().map(|d| d.0).collect::<Vec<_>>()).expect("integers");
                run::exec::<D>(&mut tx, Stmt::WebhookLease, &[Arg::Text(&ids), Arg::Time(until)]).await?;
                let leased = run::all::<D, _>(&mut tx, Stmt::WebhookLeased, &[Arg::Text(&ids)], |r| {
                    Ok((delivery::<D>(r)?, D::Db::text(r, "url")?, D::Db::text(r, "secret")?))
                })
                .await?;
                tx.commit().await?;
                let reclaimed: HashMap<i64, bool> = due.into_iter().collect();
                Ok(leased
                    .into_iter()
                    .map(|(delivery, url, secret)| {
                        let reclaimed = reclaimed.get(&delivery.id).copied().unwrap_or(false);
                        Leased { delivery, url, secret, reclaimed }
                    })
                    .collect())
            };
            work.await.map_err(run::plain_error::<D>)
        })
        .await
    }

    async fn record_attempts(&self, outcomes: &[(i64, u32, Attempt)]) -> Result<(), Error> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let now = Utc::now();
        let gone = tag::op("webhook", async {
            let work = async {
                let mut tx = D::begin(&self.pool, TxMode::Write).await?;
                let _lease = tag::Lease::transaction();
                // Every outcome but 410 in one statement; a 410 also
                // disables its subscription, so it goes alone (rare).
                let mut many = Vec::new();
                let mut gone = false;
                for (id, attempt, outcome) in outcomes {
                    let (status, at, http, error) = match outcome {
                        Attempt::Delivered { status } => (DeliveryStatus::Delivered, now, i64::from(*status), None),
                        Attempt::Failed { status, error, at } => (
                            if at.is_some() { DeliveryStatus::Pending } else { DeliveryStatus::Dead },
                            at.unwrap_or(now),
                            status.map_or(-1, i64::from),
                            Some(error.as_str()),
                        ),
                        Attempt::Gone => (DeliveryStatus::Dead, now, 410, Some("410 Gone: subscription disabled")),
                    };
                    if *outcome != Attempt::Gone {
                        many.push(json!({
                            "id": id,
                            "attempt": attempt,
                            "status": status.as_str(),
                            "at_ms": at.timestamp_millis(),
                            "http": http,
                            "error": error,
                        }));
                        continue;
                    }
                    let args = [
                        Arg::Int(*id),
                        Arg::Int((*attempt).into()),
                        Arg::Text(status.as_str()),
                        Arg::Time(at),
                        Arg::Int(http),
                        Arg::MaybeText(error),
                    ];
                    if run::exec::<D>(&mut tx, Stmt::WebhookRecord, &args).await? == 0 {
                        continue;
                    }
                    gone = true;
                    let subs = run::all::<D, _>(&mut tx, Stmt::WebhookSubOf, &[Arg::Int(*id)], |r| {
                        D::Db::text(r, "subscription_id")
                    })
                    .await?;
                    for sub in &subs {
                        run::exec::<D>(&mut tx, Stmt::WebhookDisable, &[Arg::Text(sub), Arg::Time(now)]).await?;
                        run::exec::<D>(&mut tx, Stmt::WebhookKillPending, &[Arg::Text(sub)]).await?;
                    }
                }
                if !many.is_empty() {
                    let list = serde_json::Value::Array(many).to_string();
                    run::exec::<D>(&mut tx, Stmt::WebhookRecordMany, &[Arg::Text(&list)]).await?;
                }
                tx.commit().await?;
                Ok(gone)
            };
            work.await.map_err(run::plain_error::<D>)
        })
        .await?;
        if gone {
            self.outbox.reload(self).await.map_err(run::plain_error::<D>)?;
        }
        Ok(())
    }

    async fn queue_stats(&self) -> Result<QueueStats, Error> {
        let now = Utc::now();
        let mut rows = plain!(self, "webhook", |c| run::all::<D, _>(c, Stmt::WebhookStats, &[], |r| {
            Ok((D::Db::int(r, "pending")?, D::Db::int(r, "dead")?, D::Db::maybe_time(r, "oldest_pending")?))
        }))?;
        let rows = rows.drain(..).map(|(pending, dead, oldest): (i64, i64, Option<DateTime<Utc>>)| QueueStats {
            pending: pending as u64,
            dead: dead as u64,
            oldest_pending: oldest.map(|t| (now - t).to_std().unwrap_or_default()),
        });
        let mut rows: Vec<QueueStats> = rows.collect();
        Ok(rows.pop().unwrap_or_default())
    }

    async fn purge_deliveries(&self, older_than: Duration, limit: u32) -> Result<u64, Error> {
        let before = Utc::now() - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
        let args = [Arg::Time(before), Arg::Int(limit.into())];
        plain!(self, "webhook", |c| run::exec::<D>(c, Stmt::WebhookPurge, &args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_and_distinct() {
        let (a, b) = (event_id(), event_id());
        assert!(a.starts_with("evt_") && a.len() == 4 + 26, "{a}");
        assert_ne!(a, b);
        let s = subscription_id();
        assert!(s.starts_with("wh_") && s.len() == 3 + 16, "{s}");
    }
}
