//! `X-Conn-Tag` over HTTP, `/admin/connections`, and every statement tagged
//! as the servers themselves log them (docs/design.md, "Connection tags").

use std::collections::BTreeSet;

use holdfast_core::Backend;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::app::{TestApp, no_tweak, stock, with_app};
use crate::support::{StatementLog, assert_all_tagged};

async fn reserve_tagged(app: &TestApp, tag: &[u8], key: &str) -> (StatusCode, Value) {
    let res = app
        .client
        .post(format!("{}/v1/shops/s1/reservations", app.base))
        .bearer_auth(&app.s1)
        .header("x-conn-tag", reqwest::header::HeaderValue::from_bytes(tag).unwrap())
        .json(&json!({ "key": key, "lines": [{ "item": "sku-1", "quantity": 1 }] }))
        .send()
        .await
        .expect("request sent");
    let status = res.status();
    (status, res.json().await.unwrap_or(Value::Null))
}

fn row<'a>(report: &'a Value, tag: &str) -> Option<&'a Value> {
    report["tags"].as_array()?.iter().find(|r| r["tag"] == tag)
}

pub async fn a_callers_tag_shows_in_the_connection_report(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        stock(&app, &app.s1.clone(), "s1", "sku-1", "wh", 10).await;
        let (status, held) = reserve_tagged(&app, b"checkout_completion", "k1").await;
        assert_eq!(status, StatusCode::CREATED, "{held}");

        let (status, report) = app.get("/admin/connections", &app.admin).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        let r = row(&report, "checkout_completion").expect("the caller's tag is reported");
        assert!(r["checkouts"].as_u64().unwrap() > 0, "{r}");
        assert!(r["statements"].as_u64().unwrap() > 0, "{r}");
        assert!(r["hold_seconds_total"].as_f64().unwrap() > 0.0, "{r}");
        // Sorted by total hold time, longest first.
        let totals: Vec<f64> =
            report["tags"].as_array().unwrap().iter().map(|r| r["hold_seconds_total"].as_f64().unwrap()).collect();
        assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");

        // The CLI's table shows the same rows.
        let table = holdfast_server::cli::conn_table(&report);
        assert!(table.lines().next().unwrap().starts_with("TAG"));
        assert!(table.contains("checkout_completion"), "{table}");

        // Admin only, and documented.
        let (status, _) = app.get("/admin/connections", &app.s1).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, doc) = app.call(reqwest::Method::GET, "/openapi.json", None, None).await;
        assert_eq!(status, StatusCode::OK);
        for path in ["/admin/connections", "/admin/modes", "/admin/kill-switch"] {
            assert!(doc["paths"][path].is_object(), "{path} missing from the OpenAPI document");
        }
        app.stop().await;
    })
    .await;
}

pub async fn hostile_conn_tags_are_refused_and_change_nothing(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        stock(&app, &app.s1.clone(), "s1", "sku-1", "wh", 10).await;
        let hostile: [&[u8]; 8] = [b"x*/", b"a b", "é".as_bytes(), b"it's", b"\"quoted\"", b"", b"UPPER", &[b'a'; 65]];
        for (n, tag) in hostile.iter().enumerate() {
            let (status, err) = reserve_tagged(&app, tag, &format!("hostile-{n}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{:?}: {err}", String::from_utf8_lossy(tag));
            assert_eq!(err["error"], "invalid_conn_tag", "{err}");
        }
        // Nothing was held.
        let (status, levels) = app.get("/v1/shops/s1/items/sku-1", &app.s1).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(levels["locations"][0]["available"], 10, "{levels}");
        // No key of a refused request exists: a well-tagged replay creates it.
        let (status, _) = reserve_tagged(&app, b"checkout_completion", "hostile-0").await;
        assert_eq!(status, StatusCode::CREATED);
        let (_, report) = app.get("/admin/connections", &app.admin).await;
        for r in report["tags"].as_array().unwrap() {
            let tag = r["tag"].as_str().unwrap();
            assert!(
                !tag.is_empty()
                    && tag.len() <= 64
                    && tag.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'),
                "{tag:?}"
            );
        }
        app.db.assert_audit_clean().await;
        app.stop().await;
    })
    .await;
}

/// PostgreSQL's own statement log: a request with `X-Conn-Tag` sends
/// statements that start with the caller's tag, and requests with hostile
/// tags send nothing at all (their idempotency keys never reach the server).
pub async fn postgres_log_shows_http_caller_tags_and_no_hostile_request() {
    crate::support::with_db(Backend::Postgres, holdfast_sql::StoreConfig::default(), |db| async move {
        let log = StatementLog::start(&db).await;
        let app = TestApp::start(db.clone(), crate::app::test_settings(&db)).await;
        stock(&app, &app.s1.clone(), "s1", "sku-1", "wh", 10).await;
        for (n, tag) in [&b"x*/"[..], b"a b", "é".as_bytes(), b"q'uote", b"d\"q"].iter().enumerate() {
            let (status, _) = reserve_tagged(&app, tag, &format!("hostile-key-{n}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
        }
        let (status, _) = reserve_tagged(&app, b"checkout_completion", "friendly-key").await;
        assert_eq!(status, StatusCode::CREATED);
        app.stop().await;
        let statements = log.statements().await;
        assert!(
            statements.iter().any(|l| l.starts_with("/* conn_tag:checkout_completion */ /* op:reserve */")),
            "no statement with the caller's tag in {} statements",
            statements.len()
        );
        assert!(!statements.iter().any(|l| l.contains("hostile-key")), "a refused request reached the database");
        assert_all_tagged(&statements, &["checkout_completion"].into());
    })
    .await;
}

/// `serve --redis-url` with one shop in shadow and one in sql-primary: every
/// statement the server logged — the shops' requests on both stores, the
/// shadow mirror, the legacy ledger, the mode rules' poller and admin
/// writes, tokens, the sweeper — starts with a valid tag.
pub async fn every_statement_is_tagged_with_shops_in_shadow_and_sql_primary(b: Backend) {
    crate::support::with_db(b, holdfast_sql::StoreConfig::default(), |db| async move {
        let log = StatementLog::start(&db).await;
        let mut settings = crate::app::test_settings(&db);
        crate::modes::with_redis(&mut settings);
        settings.sweep_interval_ms = 100;
        let app = TestApp::start(db.clone(), settings).await;
        let admin = app.admin.clone();
        for (shop, mode) in [("s1", "shadow"), ("s2", "sql-primary")] {
            let (status, view) = app.put("/admin/modes", &admin, json!({ "shop": shop, "mode": mode })).await;
            assert_eq!(status, StatusCode::OK, "{view}");
        }
        for (shop, token) in [("s1", app.s1.clone()), ("s2", app.s2.clone())] {
            stock(&app, &token, shop, "sku-1", "wh", 10).await;
            let base = format!("/v1/shops/{shop}");
            let cart = |k: &str, ttl: i64| json!({ "key": k, "ttl_seconds": ttl, "lines": [{ "item": "sku-1", "quantity": 1 }] });
            for (key, verb) in [("claimed", "claim"), ("released", "release"), ("extended", "extend")] {
                let (status, r) = app.post(&format!("{base}/reservations"), &token, cart(key, 600)).await;
                assert_eq!(status, StatusCode::CREATED, "{r}");
                let path = format!("{base}/reservations/{}/{verb}", r["id"]);
                let body = (verb == "extend").then(|| json!({ "ttl_seconds": 900 }));
                let (status, done) = app.call(Method::POST, &path, Some(&token), body).await;
                assert_eq!(status, StatusCode::OK, "{verb}: {done}");
                let (status, _) = app.get(&format!("{base}/reservations/{}", r["id"]), &token).await;
                assert_eq!(status, StatusCode::OK);
            }
            // Left to expire: the sweeper and a short reserve release it.
            let (status, _) = app.post(&format!("{base}/reservations"), &token, cart("short", 1)).await;
            assert_eq!(status, StatusCode::CREATED);
            let (status, levels) = app.get(&format!("{base}/items/sku-1"), &token).await;
            assert_eq!(status, StatusCode::OK, "{levels}");
            let at = format!("{base}/items/sku-1/locations/wh");
            let (status, _) = app.post(&format!("{at}/adjust"), &token, json!({ "delta": 2 })).await;
            assert_eq!(status, StatusCode::OK);
            let (status, _) = app.post(&format!("{at}/fulfil"), &token, json!({ "quantity": 1 })).await;
            assert_eq!(status, StatusCode::OK);
        }
        for engaged in [true, false] {
            let (status, _) = app.post("/admin/kill-switch", &admin, json!({ "engaged": engaged })).await;
            assert_eq!(status, StatusCode::OK);
        }
        // The rule poller rereads the rules every half second and the short
        // holds expire after one: let both happen at least once.
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        let (status, _) = app.get("/admin/connections", &admin).await;
        assert_eq!(status, StatusCode::OK);
        app.stop().await;
        let statements = log.statements().await;
        let tags = assert_all_tagged(&statements, &BTreeSet::new());
        for expected in ["modes", "legacy_ledger", "token", "reserve", "claim", "release", "extend", "stock", "levels"] {
            assert!(tags.contains(expected), "no statement tagged {expected}: saw {tags:?}");
        }
    })
    .await;
}
