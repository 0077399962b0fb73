//! Reserve throughput over HTTP: N clients, each reserving one unit of one
//! hot item in a loop with fresh idempotency keys, for a fixed time. Prints
//! requests/s and latency percentiles. Loopback only.
//!
//! cargo run --release -p holdfast-server --example http_reserve_load -- \
//!     http://127.0.0.1:7878 TOKEN SHOP [CLIENTS=64] [SECONDS=20]

use std::time::{Duration, Instant};

use serde_json::json;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, base, token, shop, rest @ ..] = args.as_slice() else {
        eprintln!("usage: http_reserve_load BASE_URL TOKEN SHOP [CLIENTS] [SECONDS]");
        std::process::exit(2);
    };
    let clients: usize = rest.first().map(|s| s.parse().unwrap()).unwrap_or(64);
    let secs: u64 = rest.get(1).map(|s| s.parse().unwrap()).unwrap_or(20);
    let client = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    let item = format!("load-{}", std::process::id());
    let res = client
        .put(format!("{base}/v1/shops/{shop}/items/{item}/locations/wh"))
        .bearer_auth(token)
        .json(&json!({ "on_hand": 100_000_000 }))
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "stock: {}", res.text().await.unwrap());
    let until = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, base, token, shop, item) =
                (client.clone(), base.clone(), token.clone(), shop.clone(), item.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut other = 0u64;
                let mut n = 0u64;
                while Instant::now() < until {
                    n += 1;
                    let body = json!({ "key": format!("{item}-{c}-{n}"), "lines": [{ "item": item, "quantity": 1 }] });
                    let t = Instant::now();
                    let res = client
                        .post(format!("{base}/v1/shops/{shop}/reservations"))
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    let ok = res.status().as_u16() == 201;
                    let _ = res.bytes().await;
                    lat.push(t.elapsed());
                    if !ok {
                        other += 1;
                    }
                }
                (lat, other)
            })
        })
        .collect();
    let started = Instant::now();
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (lat, other) = t.await.unwrap();
        all.extend(lat);
        failed += other;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)].as_secs_f64() * 1e3;
    println!(
        "{} clients, {:.1} s: {} requests, {:.0} req/s, non-201 {}, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        clients,
        elapsed,
        all.len(),
        all.len() as f64 / elapsed,
        failed,
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
}
