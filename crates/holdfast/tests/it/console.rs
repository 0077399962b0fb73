//! The operators' console (`/admin/ui`) in a real browser: Debian's
//! Chromium, headless, over WebDriver, against `holdfast serve` on
//! PostgreSQL with the Redis migration on. The test logs in (after a wrong
//! token and a shop's token are refused), watches an item sell out while a
//! sale runs, engages and releases the kill switch through the confirmation
//! and sees every view follow, runs the audit, and takes the screenshots in
//! `docs/console/` (so they show the console as it is).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use holdfast_core::Backend;
use holdfast_testkit::browser::Browser;
use holdfast_testkit::{RedisPrefix, TestDb, shared_redis_url};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::serve::{Serve, Started};

const STOCK: u64 = 240;
const BUYERS: usize = 12;
const WAIT: Duration = Duration::from_secs(30);

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/console")
}

fn token(db: &TestDb, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(["--database-url", &db.url, "token", "create", "--json"])
        .args(args)
        .output()
        .expect("holdfast runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"].as_str().unwrap().to_string()
}

async fn call(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = http.request(method, format!("{base}{path}")).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.expect("request sent");
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Buyers of one unit each, reserving and claiming until the item is gone.
/// Once half the stock is sold they wait until the test has seen the item
/// in the console (`watched`), so the console is seen during the sale
/// however slow the machine is.
async fn sale(
    http: reqwest::Client,
    base: String,
    token: String,
    sold: Arc<AtomicU64>,
    mut watched: watch::Receiver<bool>,
    buyer: usize,
) {
    for n in 0.. {
        let body = json!({"key": format!("b{buyer}-{n}"), "lines": [{"item": "hoodie", "quantity": 1, "locations": ["wh"]}], "ttl_seconds": 60});
        let (status, r) =
            call(&http, &base, &token, reqwest::Method::POST, "/v1/shops/s1/reservations", Some(body)).await;
        match status {
            StatusCode::CREATED => {
                let path = format!("/v1/shops/s1/reservations/{}/claim", r["id"]);
                let (status, r) = call(&http, &base, &token, reqwest::Method::POST, &path, None).await;
                assert_eq!(status, StatusCode::OK, "{r}");
                if sold.fetch_add(1, Ordering::Relaxed) + 1 >= STOCK / 2 {
                    watched.wait_for(|seen| *seen).await.expect("the test is still watching");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            StatusCode::CONFLICT if r["error"] == "insufficient_stock" => return,
            StatusCode::SERVICE_UNAVAILABLE => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("reserve answered {other}: {r}"),
        }
    }
}

/// The text of `column` (1-based) in the row of `table` whose dataset
/// `key` is `value`.
const ROW_CELL: &str = "const row = document.querySelector(`#${arguments[0]} tbody tr[data-${arguments[1]}=\"${arguments[2]}\"]`); \
                        return row ? row.children[arguments[3] - 1].textContent : null;";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_shows_a_sale_and_drives_the_kill_switch_in_a_browser() {
    let db = TestDb::new(Backend::Postgres).await;
    let admin = token(&db, &["--admin"]);
    let shop = token(&db, &["--shop", "s1"]);
    let redis = RedisPrefix::new(&shared_redis_url());
    let args = ["--database-url", &db.url, "--redis-url", &redis.url, "--redis-prefix", &redis.prefix];
    let serve = match Serve::launch(&args, &[]) {
        Started::Serving(s) => s,
        Started::Exited(code, log) => panic!("holdfast serve exited ({code:?}): {log}"),
    };
    let base = serve.base.clone();
    let http = reqwest::Client::new();
    let put = |body: Value| {
        let (http, base, admin) = (http.clone(), base.clone(), admin.clone());
        async move { call(&http, &base, &admin, reqwest::Method::PUT, "/admin/modes", Some(body)).await }
    };
    let (status, body) = put(json!({"shop": "s1", "mode": "sql-primary"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let path = "/v1/shops/s1/items/hoodie/locations/wh";
    let (status, body) = call(&http, &base, &shop, reqwest::Method::PUT, path, Some(json!({"on_hand": STOCK}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let browser = Browser::start(1280, 1000).await;
    browser.goto(&format!("{base}/admin/ui")).await;
    browser.wait_text("#login h2", "Admin token", WAIT).await;
    browser.screenshot(&shots().join("login.png")).await;

    // A wrong token, then a shop's token: refused, and the console stays shut.
    for (typed, refusal) in [("hf_0000_wrong", "401"), (shop.as_str(), "403")] {
        browser.find("#token").await.type_text(typed).await;
        browser.find("#login-button").await.click().await;
        browser.wait_text("#login-error", refusal, WAIT).await;
        assert!(!browser.visible("#console").await, "a refused token opens nothing");
        assert_eq!(browser.eval("return sessionStorage.length;", json!([])).await, json!(0));
    }

    browser.find("#token").await.type_text(&admin).await;
    browser.find("#login-button").await.click().await;
    browser.wait_text("#modes-view", "Kill switch", WAIT).await;
    assert!(!browser.visible("#login").await);
    // The token is in no URL, no cookie, and not left in the form.
    let page = browser
        .eval("return [location.href, document.cookie, document.getElementById('token').value];", json!([]))
        .await;
    assert_eq!(page, json!([format!("{base}/admin/ui"), "", ""]));

    // The sale: the item shows up while it sells, then as sold out.
    let sold = Arc::new(AtomicU64::new(0));
    let (watching, watched) = watch::channel(false);
    let buyers: Vec<_> = (0..BUYERS)
        .map(|b| tokio::spawn(sale(http.clone(), base.clone(), shop.clone(), sold.clone(), watched.clone(), b)))
        .collect();
    let available_cell = "const row = document.querySelector('#items tbody tr[data-item=\"hoodie\"]'); \
                          const n = row ? Number(row.children[4].textContent.replace(/,/g, '')) : 0; return n > 0 ? n : null;";
    let available = browser.wait("the hoodie row with units still available", WAIT, available_cell, json!([])).await;
    assert!(available.as_u64().is_some_and(|n| n < STOCK), "shown while it sells: {available} available");
    watching.send(true).unwrap();
    for b in buyers {
        b.await.unwrap();
    }
    assert_eq!(sold.load(Ordering::Relaxed), STOCK, "every unit sold, none twice");
    // One snapshot of the row: sold out, every unit claimed in the last
    // minute, none held (the last holds may show held for a refresh).
    let sold_out = "const row = document.querySelector('#items tbody tr[data-item=\"hoodie\"]'); \
                    if (!row || !row.textContent.includes('sold out')) return null; \
                    const cells = [...row.children].map((c) => c.textContent); \
                    return JSON.stringify([cells[3], cells[4], cells[5], cells[6]]) === JSON.stringify(arguments[0]) ? cells : null;";
    let stock = STOCK.to_string();
    browser
        .wait(
            "hoodie sold out: on hand, available 0, held 0, all sold",
            WAIT,
            sold_out,
            json!([[stock, "0", "0", stock]]),
        )
        .await;
    // Rates and connection hold come from samples every 5 s: the sale shows
    // in both once a sample after it is taken.
    browser
        .wait(
            "a hold rate",
            WAIT,
            "return /peak [1-9]/.test(document.getElementById('rates-legend').textContent);",
            json!([]),
        )
        .await;
    browser.wait("the reserve tag's connections", WAIT, ROW_CELL, json!(["connections", "tag", "reserve", 3])).await;
    browser.wait_text("#hold-legend", "reserve", WAIT).await;
    browser.find("#audit-button").await.click().await;
    browser.wait_text("#audit-result", "OK:", WAIT).await;
    browser.screenshot(&shots().join("console.png")).await;

    // The kill switch: asked first; cancelling changes nothing.
    let engaged = || {
        let (http, base, admin) = (http.clone(), base.clone(), admin.clone());
        async move {
            call(&http, &base, &admin, reqwest::Method::GET, "/admin/kill-switch", None).await.1["engaged"].clone()
        }
    };
    let mode_of_s1 = json!(["shops", "shop", "s1", 3]);
    assert_eq!(browser.eval(ROW_CELL, mode_of_s1.clone()).await, json!("sql-primary"));
    browser.find("#kill-toggle").await.click().await;
    assert!(browser.visible("#kill-confirm").await, "a confirmation comes first");
    browser.find("#kill-confirm-no").await.click().await;
    assert!(!browser.visible("#kill-confirm").await);
    assert_eq!(engaged().await, json!(false), "cancel changes nothing");

    browser.find("#kill-toggle").await.click().await;
    browser.wait_text("#kill-confirm-text", "Engage the kill switch?", WAIT).await;
    browser.eval("document.getElementById('modes-view').scrollIntoView();", json!([])).await;
    browser.screenshot(&shots().join("kill-switch.png")).await;
    browser.find("#kill-confirm-yes").await.click().await;
    browser.wait_text("#kill-state", "engaged", WAIT).await;
    assert!(browser.visible("#kill-badge").await, "the header says so on every view");
    browser.wait_text("#shops tbody tr[data-shop=\"s1\"] td.mode", "shadow", WAIT).await;
    browser.wait_text("#kill-toggle", "Release", WAIT).await;
    assert_eq!(engaged().await, json!(true));

    browser.find("#kill-toggle").await.click().await;
    browser.wait_text("#kill-confirm-text", "Release the kill switch?", WAIT).await;
    browser.find("#kill-confirm-yes").await.click().await;
    browser.wait_text("#kill-state", "released", WAIT).await;
    assert!(!browser.visible("#kill-badge").await);
    browser.wait_text("#shops tbody tr[data-shop=\"s1\"] td.mode", "sql-primary", WAIT).await;
    assert_eq!(engaged().await, json!(false));

    // A phone's width: one column, tables scroll within their cards.
    browser.resize(390, 844).await;
    browser.eval("window.scrollTo(0, 0);", json!([])).await;
    let overflow = browser.eval("return document.documentElement.scrollWidth - window.innerWidth;", json!([])).await;
    assert!(overflow.as_i64().unwrap_or(1) <= 0, "the page fits a phone's width (overflow {overflow} px)");
    browser.screenshot(&shots().join("phone.png")).await;

    // Logging out forgets the token.
    browser.resize(1280, 1000).await;
    browser.find("#logout").await.click().await;
    assert!(browser.visible("#login").await);
    assert_eq!(browser.eval("return sessionStorage.length;", json!([])).await, json!(0));

    let (status, audit) = call(&http, &base, &admin, reqwest::Method::GET, "/admin/audit", None).await;
    assert_eq!((status, audit["ok"].clone()), (StatusCode::OK, json!(true)), "{audit}");
    let secret = admin.rsplit('_').next().unwrap();
    assert!(!serve.output().contains(secret), "the admin token never reaches serve's log");
}
