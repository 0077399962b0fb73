//! Events and webhooks against a real HTTP receiver in this process, on
//! every backend: each topic fires once per change and only for shops that
//! subscribe; signatures verify; failures are retried with the same
//! `webhook-id`; `410` disables; a worker killed mid-batch loses nothing;
//! several workers never send one delivery at once and lose none.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use holdfast_core::{
    Backend, DeliveryStatus, ReservationId, ReservationStatus, ReserveRequest, StockChange, Topic, Topics, Ttl,
    WebhookStore,
};
use holdfast_server::webhooks::{Deliverer, WorkerConfig, sign, subscribe};
use holdfast_sql::StoreConfig;
use serde_json::Value;
use tokio::sync::watch;

use crate::support::receiver::{Got, Receiver, ok};
use crate::support::*;

fn config(workers: u32) -> WorkerConfig {
    WorkerConfig {
        workers,
        batch: 16,
        lease: Duration::from_secs(30),
        timeout: Duration::from_secs(5),
        idle: Duration::from_millis(20),
        unit: Duration::from_millis(1),
        retention: None,
    }
}

/// Rounds of one worker until nothing is pending.
async fn drain(hooks: &Arc<dyn WebhookStore>, cfg: WorkerConfig) {
    let d = Deliverer::new(hooks.clone(), cfg).unwrap();
    for _ in 0..10_000 {
        if d.round().await.unwrap() == 0 {
            if hooks.queue_stats().await.unwrap().pending == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    panic!("deliveries still pending: {:?}", hooks.queue_stats().await);
}

fn hold(shop: &str, k: &str, qty: i64, ttl: i64) -> ReserveRequest {
    ReserveRequest::new(
        crate::support::shop(shop),
        key(k),
        vec![line("a", qty, None)],
        Ttl::from_secs(ttl).unwrap(),
        false,
        false,
    )
    .unwrap()
}

/// (type, reservation id) of each `reservation.*` event a path got, with
/// the event ids.
fn events(got: &[Got]) -> BTreeMap<(String, i64), Vec<String>> {
    let mut out: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    for g in got {
        let v = g.json();
        let kind = v["type"].as_str().unwrap().to_string();
        if !kind.starts_with("reservation.") {
            continue;
        }
        out.entry((kind, v["data"]["id"].as_i64().unwrap())).or_default().push(g.id.clone());
    }
    out
}

pub async fn each_topic_fires_once_per_change_and_only_when_subscribed(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let rx = Receiver::start(ok, 0).await;
        let hooks = db.db.webhooks.clone();
        let s1 = shop("s1");
        let (all, secret) = subscribe(&*hooks, &s1, &rx.url("/all"), Topics::default()).await.unwrap();
        assert_eq!(all.topics, Topics::all());
        let claims: Topics = [Topic::ReservationClaimed].into_iter().collect();
        let (only, _) = subscribe(&*hooks, &s1, &rx.url("/claimed"), claims).await.unwrap();
        stock(&*db.store, "s1", "a", "wh", 60).await;
        stock(&*db.store, "s2", "a", "wh", 60).await;
        // 24 buyers in each shop at once: a third claim, a third release,
        // a third leave their hold; four more holds of 1 s run out.
        let mut tasks = Vec::new();
        for i in 0..24 {
            for s in ["s1", "s2"] {
                let store = db.store.clone();
                tasks.push(tokio::spawn(async move {
                    let r = store.reserve(&hold(s, &format!("k{i}"), 1, 60)).await.unwrap().reservation;
                    match i % 3 {
                        0 => store.claim(&shop(s), r.id).await.unwrap(),
                        1 => store.release(&shop(s), r.id).await.unwrap(),
                        _ => r,
                    };
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        for i in 0..4 {
            db.store.reserve(&hold("s1", &format!("short{i}"), 1, 1)).await.unwrap();
        }
        // A replay is no new hold.
        db.store.reserve(&hold("s1", "k2", 1, 60)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(db.store.expire(100).await.unwrap(), 4);
        drain(&hooks, config(1)).await;

        let (got, inventory): (Vec<Got>, Vec<Got>) =
            rx.at("/all").into_iter().partition(|g| g.json()["type"].as_str().unwrap().starts_with("reservation."));
        // Stocked from nothing, never sold out: one inventory event.
        let inventory: Vec<Value> = inventory.iter().map(Got::json).collect();
        assert_eq!(inventory.len(), 1, "{inventory:?}");
        assert_eq!(
            (&inventory[0]["type"], &inventory[0]["data"]["location"]),
            (&"inventory.restocked".into(), &"wh".into())
        );
        let by_event = events(&got);
        let count = |kind: &str| by_event.keys().filter(|(k, _)| k == kind).count();
        assert_eq!(
            (count("reservation.held"), count("reservation.claimed"), count("reservation.released")),
            (28, 8, 8),
            "{by_event:?}"
        );
        assert_eq!(count("reservation.expired"), 4);
        for ((kind, id), ids) in &by_event {
            assert_eq!(ids.len(), 1, "{kind} of {id} sent {} times", ids.len());
        }
        let unique: HashSet<&str> = got.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(unique.len(), got.len(), "event ids are unique");
        for g in &got {
            let v = g.json();
            assert_eq!(v["id"], g.id.as_str());
            assert_eq!(v["shop"], "s1");
            assert!(v["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
            assert_eq!(sign(&secret, &g.id, g.timestamp, &g.body).unwrap(), g.signature, "signature of {}", g.id);
            assert!((chrono::Utc::now().timestamp() - g.timestamp).abs() < 60);
            // The data is the reservation as the API answers it, in the state
            // the event names.
            let id = ReservationId::new(v["data"]["id"].as_i64().unwrap()).unwrap();
            let now = db.store.get(&s1, id).await.unwrap();
            let status = v["type"].as_str().unwrap().strip_prefix("reservation.").unwrap();
            assert_eq!(v["data"]["status"], status);
            let mut want = serde_json::to_value(&now).unwrap();
            want["status"] = status.into();
            if status == "held" && now.status != ReservationStatus::Held {
                want["expires_at"] = v["data"]["expires_at"].clone();
            }
            assert_eq!(v["data"], want);
        }
        // The claims-only subscription got the same claim events, nothing else.
        let claimed = rx.at("/claimed");
        assert_eq!(claimed.len(), 8);
        let claim_ids: HashSet<&String> =
            by_event.iter().filter(|((k, _), _)| k == "reservation.claimed").flat_map(|(_, ids)| ids).collect();
        assert!(claimed.iter().all(|g| claim_ids.contains(&g.id)));
        // s2 subscribed to nothing: nothing was written for it.
        assert!(hooks.list_deliveries(&shop("s2"), None, 100).await.unwrap().is_empty());
        assert!(got.iter().all(|g| !g.body.contains("\"s2\"")));
        let listed = hooks.list_deliveries(&s1, Some(DeliveryStatus::Delivered), 1_000).await.unwrap();
        assert_eq!(listed.len(), got.len() + inventory.len() + claimed.len());
        assert!(listed.iter().all(|d| d.attempts == 1 && d.last_status == Some(200) && d.delivered_at.is_some()));

        // Removed, a subscription gets nothing more.
        assert!(hooks.remove_subscription(&s1, &only.id).await.unwrap());
        assert!(!hooks.remove_subscription(&s1, &only.id).await.unwrap());
        let r = db.store.reserve(&hold("s1", "after", 1, 60)).await.unwrap().reservation;
        db.store.claim(&s1, r.id).await.unwrap();
        drain(&hooks, config(1)).await;
        assert_eq!(rx.at("/claimed").len(), 8);
        assert_eq!(rx.at("/all").len(), got.len() + inventory.len() + 2);
        let subs = hooks.list_subscriptions(&s1).await.unwrap();
        assert_eq!(subs.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [all.id.as_str()]);
        db.assert_audit_clean().await;
    })
    .await;
}

/// One inventory event as written: (type, item, location, what its data
/// says is available at that location).
type Inv = (String, String, String, i64);

/// The inventory events of `shop` in the order they were written (the
/// outbox's ids: each was written under its (item, location)'s watch lock).
async fn inventory_events(hooks: &Arc<dyn WebhookStore>, s: &str) -> Vec<Inv> {
    let mut ds = hooks.list_deliveries(&shop(s), None, 100_000).await.unwrap();
    ds.retain(|d| Topic::INVENTORY.contains(&d.topic));
    ds.sort_by_key(|d| d.id);
    ds.iter()
        .map(|d| {
            let v: Value = serde_json::from_str(&d.payload).unwrap();
            let data = &v["data"];
            let location = data["location"].as_str().unwrap().to_string();
            let at = data["locations"].as_array().unwrap().iter().find(|l| l["location"] == location.as_str());
            let available = at.map_or(0, |l| l["available"].as_i64().unwrap());
            (v["type"].as_str().unwrap().to_string(), data["item"].as_str().unwrap().to_string(), location, available)
        })
        .collect()
}

/// The events written since the last call.
async fn new_events(hooks: &Arc<dyn WebhookStore>, s: &str, seen: &mut usize) -> Vec<(String, i64)> {
    let all = inventory_events(hooks, s).await;
    let new = all[*seen..].iter().map(|(t, _, _, n)| (t.trim_start_matches("inventory.").to_string(), *n)).collect();
    *seen = all.len();
    new
}

/// `n` buyers of one unit of `item` at once; the reservations that were held.
async fn buyers(
    store: &Arc<dyn holdfast_core::Store>,
    item: &str,
    tag: &str,
    n: usize,
    ttl: i64,
) -> Vec<ReservationId> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            let req = ReserveRequest::new(
                shop("s1"),
                key(&format!("{tag}-{i}")),
                vec![line(item, 1, Some(&["wh"]))],
                Ttl::from_secs(ttl).unwrap(),
                false,
                false,
            )
            .unwrap();
            tokio::spawn(async move { store.reserve(&req).await.ok().map(|r| r.reservation.id) })
        })
        .collect();
    let mut held = Vec::new();
    for t in tasks {
        held.extend(t.await.unwrap());
    }
    held
}

/// `inventory.sold_out` and `inventory.restocked` follow what is available,
/// once per change, under concurrent buyers, releases, expiries and stock
/// changes; shops without the subscription get none.
pub async fn inventory_events_follow_availability(b: Backend) {
    inventory_events_with(b, StoreConfig::default()).await
}

/// The same without request coalescing (one transaction per request).
pub async fn inventory_events_follow_availability_uncoalesced(b: Backend) {
    inventory_events_with(b, StoreConfig { coalesce: false, ..StoreConfig::default() }).await
}

async fn inventory_events_with(b: Backend, cfg: StoreConfig) {
    with_db(b, cfg, |db| async move {
        let hooks = db.db.webhooks.clone();
        let store = db.store.clone();
        let s1 = shop("s1");
        let inventory: Topics = Topic::INVENTORY.into_iter().collect();
        subscribe(&*hooks, &s1, "http://127.0.0.1:9/inv", inventory).await.unwrap();
        let mut seen = 0;
        let ev = |t: &str, n: i64| (t.to_string(), n);

        stock(&*store, "s1", "a", "wh", 20).await;
        stock(&*store, "s2", "a", "wh", 20).await;
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("restocked", 20)]);
        // 32 buyers for 20 units: one "sold out", whoever took the last one.
        let held = buyers(&store, "a", "first", 32, 60).await;
        assert_eq!(held.len(), 20);
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("sold_out", 0)]);
        // Four releases at once: available rose from 0 once.
        let releases: Vec<_> = held[..4]
            .iter()
            .map(|&id| {
                let store = store.clone();
                tokio::spawn(async move { store.release(&shop("s1"), id).await.unwrap() })
            })
            .collect();
        for r in releases {
            r.await.unwrap();
        }
        let new = new_events(&hooks, "s1", &mut seen).await;
        assert_eq!(new.len(), 1, "{new:?}");
        assert_eq!(new[0].0, "restocked");
        assert!((1..=4).contains(&new[0].1), "{new:?}");
        let mut live: Vec<ReservationId> = held[4..].to_vec();
        live.extend(buyers(&store, "a", "second", 8, 60).await);
        assert_eq!(live.len(), 20);
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("sold_out", 0)]);
        // Two more units, held for a second, run out: the sweep that
        // releases them says so.
        change(&*store, "s1", "a", "wh", StockChange::Adjust(2)).await.unwrap();
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("restocked", 2)]);
        assert_eq!(buyers(&store, "a", "short", 2, 1).await.len(), 2);
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("sold_out", 0)]);
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(store.expire(100).await.unwrap(), 2);
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("restocked", 2)]);
        // A stock change that removes the free units.
        change(&*store, "s1", "a", "wh", StockChange::Set(20)).await.unwrap();
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, [ev("sold_out", 0)]);
        // The data is the item's levels as the API answers them.
        let last = hooks.list_deliveries(&s1, None, 1).await.unwrap().remove(0);
        let mut data = serde_json::from_str::<Value>(&last.payload).unwrap()["data"].take();
        assert_eq!(data.as_object_mut().unwrap().remove("location"), Some("wh".into()));
        assert_eq!(data, serde_json::to_value(store.levels(&s1, &item("a")).await.unwrap()).unwrap());
        // Claims and shipping change nothing that is available.
        for &id in &live {
            store.claim(&s1, id).await.unwrap();
        }
        change(&*store, "s1", "a", "wh", StockChange::Fulfil(5)).await.unwrap();
        assert_eq!(new_events(&hooks, "s1", &mut seen).await, []);

        // Many buyers and releases at once on 6 units: every change of
        // "any left?" said once, alternating, each with what its data says.
        stock(&*store, "s1", "b", "wh", 6).await;
        stock(&*store, "s2", "b", "wh", 6).await;
        let tasks: Vec<_> = (0..24)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    for round in 0..6 {
                        for s in ["s1", "s2"] {
                            let req = request(s, &format!("b-{t}-{round}"), vec![line("b", 1, Some(&["wh"]))]);
                            if let Ok(r) = store.reserve(&req).await {
                                tokio::time::sleep(Duration::from_millis((t % 4) as u64)).await;
                                store.release(&shop(s), r.reservation.id).await.unwrap();
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let b_events: Vec<Inv> = inventory_events(&hooks, "s1").await.into_iter().filter(|e| e.1 == "b").collect();
        assert!(b_events.len() >= 3, "the sale never sold out: {b_events:?}");
        for (i, (kind, _, location, available)) in b_events.iter().enumerate() {
            let want = if i % 2 == 0 { "inventory.restocked" } else { "inventory.sold_out" };
            assert_eq!((kind.as_str(), location.as_str()), (want, "wh"), "event {i} of {b_events:?}");
            assert_eq!(*available == 0, kind == "inventory.sold_out", "event {i} of {b_events:?}");
        }
        // Everything was released: the last word is "restocked".
        assert_eq!(b_events.last().unwrap().0, "inventory.restocked");
        assert_eq!(qty(&*store, "s1", "b", "wh").await.available, 6);
        // s2 subscribed to nothing: nothing was written for it.
        assert!(hooks.list_deliveries(&shop("s2"), None, 100).await.unwrap().is_empty());
        db.assert_audit_clean().await;
    })
    .await;
}

fn flaky(path: &str, before: u32) -> u16 {
    match path {
        "/flaky" if before < 2 => 500,
        "/gone" => 410,
        _ => 200,
    }
}

pub async fn failures_are_retried_with_the_same_id_and_410_disables(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let rx = Receiver::start(flaky, 0).await;
        let hooks = db.db.webhooks.clone();
        let s1 = shop("s1");
        let held: Topics = [Topic::ReservationHeld].into_iter().collect();
        subscribe(&*hooks, &s1, &rx.url("/flaky"), held).await.unwrap();
        let (gone, _) = subscribe(&*hooks, &s1, &rx.url("/gone"), held).await.unwrap();
        stock(&*db.store, "s1", "a", "wh", 10).await;
        for i in 0..3 {
            db.store.reserve(&hold("s1", &format!("k{i}"), 1, 60)).await.unwrap();
        }
        drain(&hooks, config(1)).await;
        // Three attempts each (5 and 300 schedule units apart), one id.
        let flaky_got = rx.at("/flaky");
        assert_eq!(flaky_got.len(), 9);
        let per_id = events(&flaky_got);
        assert_eq!(per_id.len(), 3);
        assert!(per_id.values().all(|ids| ids.len() == 3 && ids.iter().all(|i| *i == ids[0])), "{per_id:?}");
        let delivered = hooks.list_deliveries(&s1, Some(DeliveryStatus::Delivered), 100).await.unwrap();
        assert_eq!(delivered.len(), 3);
        assert!(delivered.iter().all(|d| d.attempts == 3));
        // 410 on the first attempt: the subscription is disabled, all of its
        // deliveries dead, and it is written to no more.
        let subs = hooks.list_subscriptions(&s1).await.unwrap();
        assert!(subs.iter().find(|s| s.id == gone.id).unwrap().disabled_at.is_some());
        let dead = hooks.list_deliveries(&s1, Some(DeliveryStatus::Dead), 100).await.unwrap();
        assert_eq!(dead.len(), 3, "{dead:?}");
        assert!(dead.iter().all(|d| d.subscription == gone.id));
        assert!(rx.at("/gone").len() <= 3);
        db.store.reserve(&hold("s1", "later", 1, 60)).await.unwrap();
        let pending = hooks.list_deliveries(&s1, Some(DeliveryStatus::Pending), 100).await.unwrap();
        assert_eq!(pending.len(), 1);
        assert!(pending[0].subscription != gone.id);
        // A dead delivery can be sent again by hand.
        assert!(hooks.retry_delivery(&s1, dead[0].id).await.unwrap());
        assert!(!hooks.retry_delivery(&s1, dead[0].id).await.unwrap());
        assert!(!hooks.retry_delivery(&shop("other"), dead[1].id).await.unwrap());
        let pending = hooks.list_deliveries(&s1, Some(DeliveryStatus::Pending), 100).await.unwrap();
        assert_eq!(pending.len(), 2);
        // Retention removes delivered deliveries only, older ones first.
        assert_eq!(hooks.purge_deliveries(Duration::from_secs(3_600), 100).await.unwrap(), 0);
        assert_eq!(hooks.purge_deliveries(Duration::ZERO, 2).await.unwrap(), 2);
        assert_eq!(hooks.purge_deliveries(Duration::ZERO, 100).await.unwrap(), 1);
        let left = hooks.list_deliveries(&s1, None, 100).await.unwrap();
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(left.iter().all(|d| d.status != DeliveryStatus::Delivered));
    })
    .await;
}

pub async fn a_worker_killed_mid_batch_loses_nothing(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let rx = Receiver::start(ok, 0).await;
        let hooks = db.db.webhooks.clone();
        let s1 = shop("s1");
        subscribe(&*hooks, &s1, &rx.url("/x"), [Topic::ReservationHeld].into_iter().collect()).await.unwrap();
        stock(&*db.store, "s1", "a", "wh", 100).await;
        for i in 0..40 {
            db.store.reserve(&hold("s1", &format!("k{i}"), 1, 600)).await.unwrap();
        }
        // The first worker leases a batch and sends it; the receiver holds
        // the requests; the worker is killed with them in flight.
        rx.stall();
        let lease = Duration::from_millis(1_500);
        let first = Deliverer::new(hooks.clone(), WorkerConfig { lease, ..config(1) }).unwrap();
        let leased = std::time::Instant::now();
        let task = tokio::spawn(async move { first.round().await });
        while rx.got().len() < 16 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        let in_flight: HashSet<String> = rx.got().iter().map(|g| g.id.clone()).collect();
        assert_eq!(in_flight.len(), 16);
        rx.unstall();
        // Another worker: the other 24 at once, the killed worker's 16 when
        // their lease has run out.
        drain(&hooks, WorkerConfig { lease, ..config(1) }).await;
        assert!(leased.elapsed() >= lease, "the lease was not waited for");
        let got = rx.got();
        let mut times: HashMap<&str, u32> = HashMap::new();
        for g in &got {
            *times.entry(g.id.as_str()).or_default() += 1;
        }
        assert_eq!(times.len(), 40, "every event delivered");
        for (id, n) in &times {
            let expected = if in_flight.contains(*id) { 2 } else { 1 };
            assert_eq!(*n, expected, "{id}");
        }
        let delivered = hooks.list_deliveries(&s1, Some(DeliveryStatus::Delivered), 100).await.unwrap();
        assert_eq!(delivered.len(), 40);
        assert_eq!(delivered.iter().filter(|d| d.attempts == 2).count(), 16);
    })
    .await;
}

/// `subscriptions` × `holds` deliveries by four workers at once.
pub async fn many_workers_send_each_delivery_once(b: Backend, holds: usize, subscriptions: usize) {
    with_db(b, StoreConfig::default(), move |db| async move {
        let rx = Receiver::start(ok, 3).await;
        let hooks = db.db.webhooks.clone();
        let s1 = shop("s1");
        let held: Topics = [Topic::ReservationHeld].into_iter().collect();
        for n in 0..subscriptions {
            subscribe(&*hooks, &s1, &rx.url(&format!("/{n}")), held).await.unwrap();
        }
        stock(&*db.store, "s1", "a", "wh", holds as i64).await;
        let mut tasks = Vec::new();
        for c in 0..16 {
            let store = db.store.clone();
            tasks.push(tokio::spawn(async move {
                for i in (c..holds).step_by(16) {
                    store.reserve(&hold("s1", &format!("k{i}"), 1, 600)).await.unwrap();
                }
            }));
        }
        let (stop, stopped) = watch::channel(false);
        let workers = tokio::spawn(Deliverer::new(hooks.clone(), config(4)).unwrap().run(stopped));
        for t in tasks {
            t.await.unwrap();
        }
        let want = holds * subscriptions;
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while rx.got().len() < want && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let any duplicate arrive before counting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.send(true).unwrap();
        workers.await.unwrap();
        let got = rx.got();
        let distinct: HashSet<(String, String)> = got.iter().map(|g| (g.path.clone(), g.id.clone())).collect();
        assert_eq!(distinct.len(), want, "deliveries lost");
        assert_eq!(got.len(), want, "a delivery was sent twice");
        assert_eq!(rx.overlaps.load(Ordering::SeqCst), 0, "two workers sent one delivery at once");
        assert_eq!(hooks.queue_stats().await.unwrap().pending, 0);
    })
    .await;
}

pub async fn four_workers_share_the_queue(b: Backend) {
    many_workers_send_each_delivery_once(b, 200, 5).await
}

/// 10,000 deliveries: 2,000 holds to five subscriptions.
pub async fn ten_thousand_deliveries_by_four_workers(b: Backend) {
    many_workers_send_each_delivery_once(b, 2_000, 5).await
}

fn fast_retries(s: &mut holdfast_server::Settings) {
    s.webhook_retry_unit_ms = 10;
}

/// The HTTP routes, and `serve`'s own workers delivering: a subscription
/// made over HTTP gets the events of reservations made over HTTP, signed,
/// with the reservation exactly as the API answers it. What a careless or
/// hostile caller sends is refused with a 4xx and changes nothing.
pub async fn subscriptions_over_http_and_serves_own_workers(b: Backend) {
    crate::app::with_app(b, fast_retries, |app| async move {
        use reqwest::Method;
        use serde_json::json;
        let rx = Receiver::start(ok, 0).await;
        let hooks = "/v1/shops/s1/webhooks";
        let (status, all) = app.post(hooks, &app.s1, json!({ "url": rx.url("/all") })).await;
        assert_eq!(status, StatusCode::CREATED, "{all}");
        assert_eq!(all["topics"].as_array().unwrap().len(), 6);
        let secret = all["secret"].as_str().unwrap().to_string();
        assert!(secret.starts_with("whsec_"));
        let (status, claims) =
            app.post(hooks, &app.s1, json!({ "url": rx.url("/claims"), "topics": ["reservation.claimed"] })).await;
        assert_eq!((status, claims["topics"].clone()), (StatusCode::CREATED, json!(["reservation.claimed"])));
        // Refused, each with nothing created.
        let long = format!("https://x.example/{}", "a".repeat(2_100));
        for (body, token, want) in [
            (json!({ "url": "ftp://x.example/h" }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (json!({ "url": "https://user:pw@x.example/h" }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (json!({ "url": "http:///nohost" }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (json!({ "url": long }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (
                json!({ "url": "https://x.example/h", "topics": ["reservation.nope"] }),
                Some(&app.s1),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (
                json!({ "url": "https://x.example/h", "secret": "mine" }),
                Some(&app.s1),
                StatusCode::UNPROCESSABLE_ENTITY,
            ),
            (json!({ "topics": [] }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (json!({ "url": 7 }), Some(&app.s1), StatusCode::UNPROCESSABLE_ENTITY),
            (json!({ "url": "https://x.example/h" }), None, StatusCode::UNAUTHORIZED),
        ] {
            let (status, err) = app.call(Method::POST, hooks, token.map(|t| t.as_str()), Some(body.clone())).await;
            assert_eq!(status, want, "{body} answered {err}");
            assert!(err["error"].is_string(), "{err}");
        }
        // Another shop's token reaches neither the list nor the subscriptions.
        let (status, _) = app.post(hooks, &app.s2, json!({ "url": "https://x.example/h" })).await;
        assert!(status.is_client_error(), "{status}");
        let (status, _) = app.get(hooks, &app.s2).await;
        assert!(status.is_client_error(), "{status}");
        let path = format!("{hooks}/{}", claims["id"].as_str().unwrap());
        let (status, _) = app.call(Method::DELETE, &path, Some(&app.s2), None).await;
        assert!(status.is_client_error(), "{status}");
        let (status, list) = app.get(hooks, &app.s1).await;
        assert_eq!(status, StatusCode::OK);
        let listed = list["webhooks"].as_array().unwrap();
        assert_eq!(listed.len(), 2, "{list}");
        assert!(listed.iter().all(|w| w.get("secret").is_none() && w["disabled_at"].is_null()), "{list}");

        crate::app::stock(&app, &app.s1, "s1", "a", "wh", 5).await;
        let r = crate::app::hold(&app, &app.s1, "s1", "a", 2).await;
        let id = r["id"].as_i64().unwrap();
        let (status, claimed) = app.post(&format!("/v1/shops/s1/reservations/{id}/claim"), &app.s1, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{claimed}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while (rx.at("/all").len(), rx.at("/claims").len()) != (3, 1) {
            assert!(std::time::Instant::now() < deadline, "not delivered: {:?}", rx.got());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let got = rx.at("/all");
        let by_type: HashMap<String, Value> =
            got.iter().map(|g| (g.json()["type"].as_str().unwrap().into(), g.json())).collect();
        assert_eq!(by_type["reservation.held"]["data"], r);
        assert_eq!(by_type["reservation.claimed"]["data"], claimed);
        // Stocked from nothing: the item's levels as GET answered them then.
        let levels = json!({"item": "a", "location": "wh",
            "locations": [{"location": "wh", "on_hand": 5, "available": 5, "reserved": 0, "committed": 0}]});
        assert_eq!(by_type["inventory.restocked"]["data"], levels);
        for g in got {
            assert_eq!(sign(&secret, &g.id, g.timestamp, &g.body).unwrap(), g.signature);
        }
        let (status, _) = app.call(Method::DELETE, &path, Some(&app.s1), None).await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, err) = app.call(Method::DELETE, &path, Some(&app.s1), None).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
        let (_, list) = app.get(hooks, &app.s1).await;
        assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
        app.stop().await;
    })
    .await;
}
