//! Pods: `holdfast serve --pods` over three databases — two PostgreSQL
//! (the second reached through PgBouncer in transaction mode, behind a TCP
//! proxy the test can cut, as a pod that goes down) and one MariaDB. Sell-outs run in a shop of each pod at once;
//! every pod's books balance and holds only its own shops' rows; a pod that
//! goes down answers its own shops `503` while the other pods' shops sell
//! out at their usual latency.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_bench::proxy::{LatencyProxy, upstream_of};
use holdfast_core::{Backend, ItemId, ShopId};
use holdfast_testkit::{RedisPrefix, TestDb, shared_redis_url};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::serve::{Serve, Started, rand_u64};

/// Shop `a1` lives in the default pod p1, `b2` in p2, `c3` in p3.
const SHOPS: [(&str, &str); 3] = [("a1", "p1"), ("b2", "p2"), ("c3", "p3")];

struct Pods {
    /// p1, p2, p3.
    dbs: Vec<TestDb>,
    /// In front of p2's PgBouncer.
    proxy: LatencyProxy,
    file: PathBuf,
}

impl Pods {
    async fn new() -> Self {
        let dbs = vec![
            TestDb::new(Backend::Postgres).await,
            TestDb::through_pooler(Default::default()).await,
            TestDb::new(Backend::MySql).await,
        ];
        let proxy = LatencyProxy::start(upstream_of(&dbs[1].url).unwrap(), Duration::ZERO).unwrap();
        let file = std::env::temp_dir().join(format!("holdfast-pods-{:016x}.toml", rand_u64()));
        let text = format!(
            "default = \"p1\"\n\
             [pods.p1]\ndatabase_url = \"{}\"\n\
             [pods.p2]\ndatabase_url = \"{}\"\n\
             [pods.p3]\ndatabase_url = \"{}\"\n\
             [shops]\n\"b2\" = \"p2\"\n\"c3\" = \"p3\"\n",
            dbs[0].url,
            proxy.rewrite(&dbs[1].url),
            dbs[2].url
        );
        std::fs::write(&file, text).unwrap();
        Pods { dbs, proxy, file }
    }

    /// `holdfast --pods FILE ARGS…`: exit code and stdout.
    fn cli(&self, args: &[&str]) -> (Option<i32>, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .arg("--pods")
            .arg(&self.file)
            .args(args)
            .output()
            .expect("holdfast runs");
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn token(&self, args: &[&str]) -> String {
        let (code, out) = self.cli(&[&["token", "create", "--json"], args].concat());
        assert_eq!(code, Some(0), "{out}");
        serde_json::from_str::<Value>(&out).unwrap()["token"].as_str().unwrap().to_string()
    }

    /// A client of `serve` whose token may act on every pod's shop and on
    /// the admin routes (tokens are looked up per request, so one made after
    /// serve started is honoured).
    fn client(&self, serve: &Serve) -> Arc<Client> {
        let token = self.token(&["--shop", "a1", "--shop", "b2", "--shop", "c3", "--admin"]);
        Arc::new(Client { http: reqwest::Client::new(), base: serve.base.clone(), token })
    }

    fn serve(&self) -> Serve {
        self.serve_with(&[])
    }

    fn serve_with(&self, args: &[&str]) -> Serve {
        let file = self.file.to_str().unwrap();
        match Serve::launch(&[&["--pods", file, "--sweep-interval-ms", "200"], args].concat(), &[]) {
            Started::Serving(s) => s,
            Started::Exited(code, log) => panic!("holdfast serve exited ({code:?}): {log}"),
        }
    }
}

impl Drop for Pods {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.expect("request sent");
        let status = res.status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert!(res.headers().contains_key("retry-after"), "a 503 says when to come back");
        }
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn stock(&self, shop: &str, item: &str, on_hand: i64) {
        let path = format!("/v1/shops/{shop}/items/{item}/locations/wh");
        let (status, body) = self.call(reqwest::Method::PUT, &path, Some(json!({ "on_hand": on_hand }))).await;
        assert_eq!(status, StatusCode::OK, "{shop}: {body}");
    }
}

/// What the buyers of one shop got.
#[derive(Debug, Default)]
struct Sale {
    held: u64,
    refused: u64,
    unavailable: u64,
    /// Latency of every answered request, ms.
    latencies: Vec<f64>,
}

/// `buyers` buyers of one unit each of `item` in `shop`, all at once, with
/// idempotency keys `{item}-{round}-{n}`.
async fn sell(client: Arc<Client>, shop: &'static str, item: &str, round: u32, buyers: usize) -> Sale {
    let tasks: Vec<_> = (0..buyers)
        .map(|n| {
            let (client, item) = (client.clone(), item.to_string());
            tokio::spawn(async move {
                let cart = json!({ "key": format!("{item}-{round}-{n}"), "lines": [{ "item": item, "quantity": 1 }] });
                let started = Instant::now();
                let (status, body) =
                    client.call(reqwest::Method::POST, &format!("/v1/shops/{shop}/reservations"), Some(cart)).await;
                (status, body, started.elapsed().as_secs_f64() * 1000.0)
            })
        })
        .collect();
    let mut sale = Sale::default();
    for t in tasks {
        let (status, body, ms) = t.await.unwrap();
        match status {
            StatusCode::CREATED => sale.held += 1,
            StatusCode::CONFLICT => {
                assert_eq!(body["error"], "insufficient_stock", "{shop}: {body}");
                sale.refused += 1;
            }
            StatusCode::SERVICE_UNAVAILABLE => sale.unavailable += 1,
            other => panic!("{shop}: {other} {body}"),
        }
        sale.latencies.push(ms);
    }
    sale
}

fn p99(latencies: &mut [f64]) -> f64 {
    latencies.sort_by(f64::total_cmp);
    latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)]
}

/// Asserts that each pod's books balance and that it holds the rows of its
/// own shops only: stock of `item` where the shop lives, none elsewhere.
async fn assert_each_pod_keeps_its_own(pods: &Pods, item: &str, on_hand: i64) {
    let item = ItemId::new(item).unwrap();
    for (i, db) in pods.dbs.iter().enumerate() {
        db.assert_audit_clean().await;
        for (shop, pod) in SHOPS {
            let levels = db.store.levels(&ShopId::new(shop).unwrap(), &item).await.unwrap();
            let here: i64 = levels.locations.iter().map(|l| l.quantities.on_hand).sum();
            let expected = if pod == format!("p{}", i + 1) { on_hand } else { 0 };
            assert_eq!(here, expected, "shop {shop}'s stock of {item} in pod p{}", i + 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_pods_sell_out_at_once_each_keeping_its_own_shops() {
    let pods = Pods::new().await;
    let serve = pods.serve();
    let client = pods.client(&serve);

    let (status, ready) = client.call(reqwest::Method::GET, "/readyz", None).await;
    assert_eq!((status, ready["status"].as_str()), (StatusCode::OK, Some("ready")), "{ready}");
    assert_eq!(ready["pods"].as_array().map(|p| p.len()), Some(3), "{ready}");

    for (shop, _) in SHOPS {
        client.stock(shop, "hot", 100).await;
    }
    let sales: Vec<_> = SHOPS.iter().map(|(shop, _)| tokio::spawn(sell(client.clone(), shop, "hot", 0, 300))).collect();
    for (sale, (shop, pod)) in sales.into_iter().zip(SHOPS) {
        let mut sale = sale.await.unwrap();
        assert_eq!((sale.held, sale.refused, sale.unavailable), (100, 200, 0), "shop {shop} on {pod}");
        eprintln!("shop {shop} on pod {pod}: 300 buyers, p99 {:.1} ms", p99(&mut sale.latencies));
    }
    assert_each_pod_keeps_its_own(&pods, "hot", 100).await;

    // A reservation is found through its own shop only, on its own pod.
    let (status, r) = client.call(reqwest::Method::GET, "/v1/shops/c3/reservations/1", None).await;
    assert_eq!((status, r["status"].as_str()), (StatusCode::OK, Some("held")), "{r}");

    // The connection report names each pod.
    let (_, report) = client.call(reqwest::Method::GET, "/admin/connections", None).await;
    let mut seen: Vec<&str> = report["tags"].as_array().unwrap().iter().filter_map(|r| r["pod"].as_str()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["p1", "p2", "p3"], "{report}");

    // The CLI sees the same pods.
    let (code, out) = pods.cli(&["pod", "list", "--json"]);
    assert_eq!(code, Some(0), "{out}");
    let list: Value = serde_json::from_str(&out).unwrap();
    for (p, backend) in list["pods"].as_array().unwrap().iter().zip(["postgres", "postgres", "mysql"]) {
        assert_eq!((p["reachable"].as_bool(), p["backend"].as_str()), (Some(true), Some(backend)), "{p}");
        assert_eq!(p["schema_version"], p["schema_latest"], "{p}");
    }
    let (code, out) = pods.cli(&["pod", "of", "--shop", "c3", "--json"]);
    assert_eq!((code, serde_json::from_str::<Value>(&out).unwrap()["pod"].as_str()), (Some(0), Some("p3")), "{out}");
    let (code, out) = pods.cli(&["audit", "--json"]);
    let audit: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((code, audit["ok"].as_bool(), audit["checked"].as_u64()), (Some(0), Some(true), Some(3)), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_that_goes_down_takes_only_its_own_shops() {
    let pods = Pods::new().await;
    let serve = pods.serve();
    let client = pods.client(&serve);

    // Connections made and statements prepared on every pod first.
    for (shop, _) in SHOPS {
        client.stock(shop, "warm", 50).await;
        sell(client.clone(), shop, "warm", 0, 100).await;
    }

    // Without an outage: a shop of every pod sells out; the latencies of
    // the shops of p1 and p3 are the yardstick.
    for (shop, _) in SHOPS {
        client.stock(shop, "calm", 100).await;
    }
    let calm: Vec<_> = SHOPS.iter().map(|(shop, _)| tokio::spawn(sell(client.clone(), shop, "calm", 0, 300))).collect();
    let mut before = Vec::new();
    for (sale, (shop, _)) in calm.into_iter().zip(SHOPS) {
        let s = sale.await.unwrap();
        assert_eq!((s.held, s.refused, s.unavailable), (100, 200, 0), "shop {shop}");
        if shop != "b2" {
            before.extend(s.latencies);
        }
    }

    // The same with every shop selling and p2 going down meanwhile.
    for (shop, _) in SHOPS {
        client.stock(shop, "storm", 100).await;
    }
    let storm: Vec<_> =
        SHOPS.iter().map(|(shop, _)| tokio::spawn(sell(client.clone(), shop, "storm", 0, 300))).collect();
    // Down mid-sale: once b2 has sold a few.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, levels) = client.call(reqwest::Method::GET, "/v1/shops/b2/items/storm", None).await;
        if levels["locations"][0]["reserved"].as_i64().unwrap_or(0) >= 5 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    pods.proxy.refuse(true);
    pods.proxy.cut();
    let mut during = Vec::new();
    let mut down = Sale::default();
    for (sale, (shop, _)) in storm.into_iter().zip(SHOPS) {
        let s = sale.await.unwrap();
        if shop == "b2" {
            down = s;
        } else {
            assert_eq!((s.held, s.refused, s.unavailable), (100, 200, 0), "shop {shop} on a healthy pod");
            during.extend(s.latencies);
        }
    }
    // Whatever was still in flight when p2 went, a sale started while it is
    // down is answered 503, every request of it.
    let after = sell(client.clone(), "b2", "storm", 2, 20).await;
    assert_eq!(after.unavailable, 20, "the shop of the pod that is down: {after:?}");
    let (p99_before, p99_during) = (p99(&mut before), p99(&mut during));
    eprintln!(
        "healthy pods: p99 {p99_before:.1} ms without an outage, {p99_during:.1} ms with p2 down; \
         b2: {} held, {} answered 503",
        down.held, down.unavailable
    );
    // Twice the calm run's p99, and some slack for a machine that serves,
    // buys and runs three databases and a pooler on two cores.
    assert!(p99_during <= 2.0 * p99_before + 50.0, "p99 {p99_during:.1} ms with p2 down vs {p99_before:.1} ms");

    let (status, ready) = client.call(reqwest::Method::GET, "/readyz", None).await;
    assert_eq!((status, ready["status"].as_str()), (StatusCode::OK, Some("degraded")), "{ready}");
    assert_eq!(ready["pods"][1]["ready"], false, "{ready}");
    let (code, out) = pods.cli(&["pod", "list"]);
    assert_eq!(code, Some(5), "a pod that does not answer fails `pod list`: {out}");
    // The console's overview: the pod that is down is shown down, the
    // others' busy items are shown with their pods.
    let (status, o) = client.call(reqwest::Method::GET, "/admin/overview", None).await;
    assert_eq!(status, StatusCode::OK, "{o}");
    let ready: Vec<(&str, bool)> =
        o["pods"].as_array().unwrap().iter().map(|p| (p["name"].as_str().unwrap(), p["ready"] == true)).collect();
    assert_eq!(ready, [("p1", true), ("p2", false), ("p3", true)], "{o}");
    let items: Vec<(&str, &str, &str)> = o["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["shop"].as_str().unwrap(), i["item"].as_str().unwrap(), i["pod"].as_str().unwrap()))
        .collect();
    assert!(items.contains(&("a1", "storm", "p1")) && items.contains(&("c3", "storm", "p3")), "{items:?}");
    assert!(items.iter().all(|(_, _, pod)| *pod != "p2"), "nothing from the pod that is down: {items:?}");

    // Back up: b2 sells again, and every pod's books balance.
    pods.proxy.refuse(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = client.call(reqwest::Method::GET, "/v1/shops/b2/items/storm", None).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "p2 did not come back: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Requests cut mid-transaction may have held units nobody was told
    // about; those holds are real and count against the stock.
    let rest = sell(client.clone(), "b2", "storm", 1, 150).await;
    assert_eq!((rest.unavailable, rest.refused > 0), (0, true), "{rest:?}");
    let (_, levels) = client.call(reqwest::Method::GET, "/v1/shops/b2/items/storm", None).await;
    assert_eq!(levels["locations"][0]["available"], 0, "b2 sold out once p2 was back: {levels}");
    assert!(down.held + rest.held <= 100, "no unit of b2 sold twice: {down:?} then {rest:?}");
    for db in &pods.dbs {
        db.assert_audit_clean().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_move_off_redis_rolls_out_pod_by_pod_and_the_kill_switch_reaches_every_pod() {
    let pods = Pods::new().await;
    let redis = RedisPrefix::new(&shared_redis_url());
    let serve = pods.serve_with(&["--redis-url", &redis.url, "--redis-prefix", &redis.prefix]);
    let client = pods.client(&serve);
    let modes = || async {
        let (status, view) = client.call(reqwest::Method::GET, "/admin/modes?shops=a1,b2,c3", None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let resolved = &view["resolved"];
        ["a1", "b2", "c3"].map(|s| resolved[s].as_str().unwrap_or("?").to_string())
    };

    // Released from the command line, the kill switch is cleared in every
    // pod and serve sends c3 back to sql-primary.
    let release_kill_switch = || async {
        let (code, out) = pods.cli(&["mode", "kill-switch", "off"]);
        assert_eq!(code, Some(0), "{out}");
        for db in &pods.dbs {
            assert!(!db.db.modes.load_rules().await.unwrap().kill_switch, "released in {}", db.url);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while modes().await != ["redis", "redis", "sql-primary"] {
            assert!(Instant::now() < deadline, "serve followed the released kill switch");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    // Every shop starts on Redis; then p3, and only p3, goes to sql-primary.
    assert_eq!(modes().await, ["redis", "redis", "redis"]);
    let change = json!({ "rollout": "sql-primary", "percent": 100, "pod": "p3" });
    let (status, body) = client.call(reqwest::Method::PUT, "/admin/modes", Some(change)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(modes().await, ["redis", "redis", "sql-primary"]);
    let unknown = json!({ "rollout": "sql", "percent": 100, "pod": "p9" });
    let (status, body) = client.call(reqwest::Method::PUT, "/admin/modes", Some(unknown)).await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")), "{body}");

    // c3 now holds in its pod's SQL; a1 still in Redis, nothing in p1's SQL.
    for shop in ["a1", "c3"] {
        client.stock(shop, "hot", 10).await;
        let cart = json!({ "key": "k1", "lines": [{ "item": "hot", "quantity": 1 }] });
        let (status, body) =
            client.call(reqwest::Method::POST, &format!("/v1/shops/{shop}/reservations"), Some(cart)).await;
        assert_eq!(status, StatusCode::CREATED, "{shop}: {body}");
    }
    let reserved = |db: &TestDb, shop: &str| {
        let (store, shop) = (db.store.clone(), ShopId::new(shop).unwrap());
        async move {
            let levels = store.levels(&shop, &ItemId::new("hot").unwrap()).await.unwrap();
            levels.locations.iter().map(|l| l.quantities.reserved).sum::<i64>()
        }
    };
    assert_eq!(reserved(&pods.dbs[2], "c3").await, 1, "sql-primary: the hold is in p3's SQL");
    assert_eq!(reserved(&pods.dbs[0], "a1").await, 0, "redis: no hold in p1's SQL");

    // The kill switch is stored in every pod and sends c3 back to shadow.
    let (status, body) =
        client.call(reqwest::Method::POST, "/admin/kill-switch", Some(json!({ "engaged": true }))).await;
    assert_eq!((status, body["engaged"].as_bool()), (StatusCode::OK, Some(true)), "{body}");
    for db in &pods.dbs {
        assert!(db.db.modes.load_rules().await.unwrap().kill_switch, "engaged in {}", db.url);
    }
    assert_eq!(modes().await, ["redis", "redis", "shadow"]);
    release_kill_switch().await;

    // With p2 down, the kill switch still reaches the other pods (the
    // command names the pod it missed) and serve follows it.
    pods.proxy.refuse(true);
    pods.proxy.cut();
    let (code, out) = pods.cli(&["mode", "kill-switch", "on"]);
    assert_ne!(code, Some(0), "a pod was missed: {out}");
    for i in [0, 2] {
        assert!(pods.dbs[i].db.modes.load_rules().await.unwrap().kill_switch, "engaged in p{}", i + 1);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while modes().await[2] != "shadow" {
        assert!(Instant::now() < deadline, "serve followed the kill switch with p2 down");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pods.proxy.refuse(false);
    release_kill_switch().await;
}
