//! `holdfast serve` killed with SIGKILL in the middle of coalesced batches,
//! then started again on the same database: every hold a buyer was told
//! about is there, no unit is held twice, and the books balance.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use holdfast_core::Backend;
use holdfast_testkit::{TestDb, per_backend};
use serde_json::{Value, json};

use crate::serve::Serve;

async fn acknowledged_holds_survive_a_sigkill_mid_batch(b: Backend) {
    let db = TestDb::new(b).await;
    let serve = Serve::start(&db.url);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    serve.set_stock(&client, "hot", 100_000).await;

    // Buyers reserve one unit each, as fast as they can; every 201 is a
    // promise. The server is killed once enough promises were made.
    let acked: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let unknown = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut buyers = Vec::new();
    for buyer in 0..48 {
        let (client, base, acked, unknown) = (client.clone(), serve.base.clone(), acked.clone(), unknown.clone());
        buyers.push(tokio::spawn(async move {
            for n in 0.. {
                let key = format!("b{buyer}-{n}");
                let body = json!({ "key": key, "lines": [{ "item": "hot", "quantity": 1 }] });
                match client.post(format!("{base}/v1/shops/s1/reservations")).json(&body).send().await {
                    Ok(res) if res.status() == 201 => {
                        let r: Value = res.json().await.unwrap();
                        acked.lock().unwrap().insert(key, r["id"].as_i64().unwrap());
                    }
                    Ok(res) => panic!("{key}: {} {}", res.status(), res.text().await.unwrap_or_default()),
                    // The server is gone: this request's fate is unknown.
                    Err(_) => {
                        unknown.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 500 {
        assert!(Instant::now() < deadline, "fewer than 500 holds in 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    serve.kill();
    for b in buyers {
        b.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let unknown = unknown.load(std::sync::atomic::Ordering::Relaxed);

    let serve = Serve::start(&db.url);
    let base = serve.base.clone();
    for (key, id) in &acked {
        let r: Value =
            client.get(format!("{base}/v1/shops/s1/reservations/{id}")).send().await.unwrap().json().await.unwrap();
        assert_eq!((r["key"].as_str(), r["status"].as_str()), (Some(key.as_str()), Some("held")), "{key}: {r}");
        // The same key again is the same hold, not a second one.
        let body = json!({ "key": key, "lines": [{ "item": "hot", "quantity": 1 }] });
        let res = client.post(format!("{base}/v1/shops/s1/reservations")).json(&body).send().await.unwrap();
        assert_eq!(res.status(), 200, "{key}: a replay");
        let again: Value = res.json().await.unwrap();
        assert_eq!(again["id"].as_i64(), Some(*id), "{key}");
    }
    let levels: Value = client.get(format!("{base}/v1/shops/s1/items/hot")).send().await.unwrap().json().await.unwrap();
    let reserved = levels["locations"][0]["reserved"].as_i64().unwrap() as u64;
    let promised = acked.len() as u64;
    assert!(
        promised <= reserved && reserved <= promised + unknown,
        "{promised} holds promised, {unknown} requests unanswered, {reserved} units held"
    );
    let audit: Value = client.get(format!("{base}/admin/audit")).send().await.unwrap().json().await.unwrap();
    assert_eq!(audit["ok"], true, "{audit}");
    eprintln!("[{}] {promised} promised, {unknown} unanswered, {reserved} held after SIGKILL", b.name());
    drop(serve);
    db.assert_audit_clean().await;
}

per_backend!(acknowledged_holds_survive_a_sigkill_mid_batch: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
