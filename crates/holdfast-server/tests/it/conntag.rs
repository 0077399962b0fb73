//! `X-Conn-Tag` over HTTP and `/admin/connections` (SPEC §8).

use holdfast_core::Backend;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::app::{TestApp, no_tweak, stock, with_app};

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
    use sqlx::Connection;
    crate::support::with_db(Backend::Postgres, holdfast_sql::StoreConfig::default(), |db| async move {
        let name = db.url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
        let mut admin = sqlx::PgConnection::connect(&crate::support::server_url(Backend::Postgres)).await.unwrap();
        sqlx::query(&format!("ALTER DATABASE {name} SET log_statement = 'all'")).execute(&mut admin).await.unwrap();
        let log = std::env::var("HOLDFAST_TEST_POSTGRES_LOG").map(std::path::PathBuf::from).unwrap_or_else(|_| {
            std::fs::read_dir("/var/log/postgresql")
                .expect("cannot read /var/log/postgresql: set HOLDFAST_TEST_POSTGRES_LOG")
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
                .expect("no PostgreSQL log file; set HOLDFAST_TEST_POSTGRES_LOG")
        });
        let from = std::fs::metadata(&log).unwrap().len() as usize;
        let app = TestApp::start(db.clone(), crate::app::test_settings(&db)).await;
        stock(&app, &app.s1.clone(), "s1", "sku-1", "wh", 10).await;
        for (n, tag) in [&b"x*/"[..], b"a b", "é".as_bytes(), b"q'uote", b"d\"q"].iter().enumerate() {
            let (status, _) = reserve_tagged(&app, tag, &format!("hostile-key-{n}")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
        }
        let (status, _) = reserve_tagged(&app, b"checkout_completion", "friendly-key").await;
        assert_eq!(status, StatusCode::CREATED);
        // Read the log once it has caught up: a marker statement sent on a
        // new session after every request is logged after all of theirs,
        // whether each backend writes the log itself or the logging
        // collector writes it later. A fixed pause would be a guess, and the
        // "never reached the database" checks below would pass on a log
        // that had not caught up.
        let marker = format!("hf_log_marker_{:016x}", rand::random::<u64>());
        let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query(&format!("SELECT '{marker}'")).execute(&mut c).await.unwrap();
        c.close().await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let text = loop {
            let text = std::fs::read(&log).unwrap();
            let text = String::from_utf8_lossy(&text[from..]).into_owned();
            if text.contains(&marker) {
                break text;
            }
            assert!(std::time::Instant::now() < deadline, "{log:?} never showed the marker {marker:?} (30 s)");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let mine: Vec<&str> = text.lines().filter(|l| l.contains(&format!("@{name} "))).collect();
        assert!(
            mine.iter().any(|l| l.contains("/* conn_tag:checkout_completion */ /* op:reserve */")),
            "no statement with the caller's tag in {} lines",
            mine.len()
        );
        assert!(!text.contains("hostile-key"), "a refused request reached the database");
        for bad in ["x*/", "a b */", "é", "q'uote", "d\"q */"] {
            assert!(!mine.iter().any(|l| l.contains(&format!("conn_tag:{bad}"))), "{bad:?} reached the SQL text");
        }
        app.stop().await;
    })
    .await;
}
