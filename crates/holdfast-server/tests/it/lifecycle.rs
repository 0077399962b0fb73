//! A reservation's whole life over HTTP, and the service's own endpoints.

use std::time::Duration;

use holdfast_core::Backend;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::app::{no_tweak, stock, with_app};

pub async fn reserve_claim_release_extend_expire_over_http(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        let t = app.s1.clone();
        stock(&app, &t, "s1", "sku-1", "wh", 10).await;
        let cart = json!({ "key": "checkout-1", "lines": [{ "item": "sku-1", "quantity": 2 }] });

        let (status, held) = app.post("/v1/shops/s1/reservations", &t, cart.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{held}");
        assert_eq!(held["status"], "held");
        assert_eq!(held["key"], "checkout-1");
        assert_eq!(held["lines"], json!([{ "item": "sku-1", "location": "wh", "quantity": 2 }]));
        let id = held["id"].as_i64().unwrap();
        assert!(held["expires_at"].is_string());

        // A replay answers 200 with the same body and takes nothing more.
        let (status, again) = app.post("/v1/shops/s1/reservations", &t, cart).await;
        assert_eq!((status, &again), (StatusCode::OK, &held));
        let other = json!({ "key": "checkout-1", "lines": [{ "item": "sku-1", "quantity": 3 }] });
        let (status, err) = app.post("/v1/shops/s1/reservations", &t, other).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::CONFLICT, Some("idempotency_conflict")));

        let r = format!("/v1/shops/s1/reservations/{id}");
        assert_eq!(app.get(&r, &t).await, (StatusCode::OK, held.clone()));
        let (status, ext) = app.post(&format!("{r}/extend"), &t, json!({ "ttl_seconds": 3600 })).await;
        assert_eq!(status, StatusCode::OK, "{ext}");
        assert!(ext["expires_at"].as_str() > held["expires_at"].as_str());

        let (status, claimed) = app.call(Method::POST, &format!("{r}/claim"), Some(&t), None).await;
        assert_eq!((status, claimed["status"].as_str()), (StatusCode::OK, Some("claimed")));
        // Claiming twice answers the same; releasing a claimed hold is refused.
        assert_eq!(app.call(Method::POST, &format!("{r}/claim"), Some(&t), None).await, (StatusCode::OK, claimed));
        let (status, err) = app.call(Method::POST, &format!("{r}/release"), Some(&t), None).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::CONFLICT, Some("invalid_state")));

        let (status, levels) = app.get("/v1/shops/s1/items/sku-1", &t).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            levels,
            json!({ "item": "sku-1", "locations": [
                { "location": "wh", "on_hand": 10, "available": 8, "reserved": 0, "committed": 2 }
            ]})
        );

        // Stock: adjust, fulfil, and a refusal that changes nothing.
        let at = "/v1/shops/s1/items/sku-1/locations/wh";
        let (status, lvl) = app.post(&format!("{at}/adjust"), &t, json!({ "delta": -3 })).await;
        assert_eq!((status, lvl["on_hand"].as_i64(), lvl["item"].as_str()), (StatusCode::OK, Some(7), Some("sku-1")));
        let (status, lvl) = app.post(&format!("{at}/fulfil"), &t, json!({ "quantity": 2 })).await;
        assert_eq!((status, lvl["on_hand"].as_i64(), lvl["committed"].as_i64()), (StatusCode::OK, Some(5), Some(0)));
        let (status, err) = app.post(&format!("{at}/fulfil"), &t, json!({ "quantity": 1 })).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::CONFLICT, Some("stock_conflict")));

        // Released holds go back; a short hold expires, is swept, and can no
        // longer be claimed.
        let (_, r2) = app
            .post(
                "/v1/shops/s1/reservations",
                &t,
                json!({ "key": "c2", "lines": [{ "item": "sku-1", "quantity": 1 }] }),
            )
            .await;
        let (status, rel) =
            app.call(Method::POST, &format!("/v1/shops/s1/reservations/{}/release", r2["id"]), Some(&t), None).await;
        assert_eq!((status, rel["status"].as_str()), (StatusCode::OK, Some("released")));
        let (status, r3) = app
            .post(
                "/v1/shops/s1/reservations",
                &t,
                json!({ "key": "c3", "ttl_seconds": 1, "lines": [{ "item": "sku-1", "quantity": 4 }] }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{r3}");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(app.sweeper.drain().await.unwrap(), 1);
        let r3 = format!("/v1/shops/s1/reservations/{}", r3["id"]);
        assert_eq!(app.get(&r3, &t).await.1["status"], "expired");
        let (status, err) = app.call(Method::POST, &format!("{r3}/claim"), Some(&t), None).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::CONFLICT, Some("reservation_expired")));

        let (status, lvl) = app.get("/v1/shops/s1/items/sku-1", &t).await;
        assert_eq!((status, lvl["locations"][0]["available"].as_i64()), (StatusCode::OK, Some(5)));
        let (status, audit) = app.get("/admin/audit", &app.admin).await;
        assert_eq!((status, audit["ok"].as_bool()), (StatusCode::OK, Some(true)), "{audit}");
        app.db.assert_audit_clean().await;
        app.stop().await;
    })
    .await;
}

pub async fn probes_metrics_and_openapi(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        assert_eq!(app.call(Method::GET, "/healthz", None, None).await.0, StatusCode::OK);
        assert_eq!(app.call(Method::GET, "/readyz", None, None).await, (StatusCode::OK, json!({ "status": "ready" })));

        let (status, doc) = app.call(Method::GET, "/openapi.json", None, None).await;
        assert_eq!(status, StatusCode::OK);
        for path in [
            "/v1/shops/{shop}/reservations",
            "/v1/shops/{shop}/reservations/{id}/claim",
            "/v1/shops/{shop}/items/{item}/locations/{location}/fulfil",
            "/admin/audit",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} missing from the OpenAPI document");
        }

        stock(&app, &app.s1, "s1", "a", "wh", 1).await;
        let res = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let text = res.text().await.unwrap();
        for name in [
            "holdfast_http_requests_total{",
            "holdfast_http_request_duration_seconds_bucket{",
            "holdfast_store_retries_total",
            "holdfast_db_pool_connections{",
        ] {
            assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
        }
        // Every answer carries a request id.
        let res = app.client.get(format!("{}/healthz", app.base)).send().await.unwrap();
        assert!(res.headers().contains_key("x-request-id"));
        app.stop().await;
    })
    .await;
}

/// `serve --retention 1`: the background sweeper removes a finished
/// reservation a second old, folding its units into the ledger first; its id
/// then answers 404 and its key makes a new reservation. A live hold stays,
/// and so do the books.
pub async fn the_sweeper_applies_retention(b: Backend) {
    let tweak = |s: &mut holdfast_server::Settings| {
        s.retention = 1;
        s.sweep_interval_ms = 100;
    };
    with_app(b, tweak, |app| async move {
        let t = app.s1.clone();
        stock(&app, &t, "s1", "sku-1", "wh", 10).await;
        let cart = |k: &str| json!({ "key": k, "lines": [{ "item": "sku-1", "quantity": 2 }] });
        let (_, sold) = app.post("/v1/shops/s1/reservations", &t, cart("sold")).await;
        let (_, live) = app.post("/v1/shops/s1/reservations", &t, cart("live")).await;
        let sold_at = format!("/v1/shops/s1/reservations/{}", sold["id"]);
        let (status, _) = app.call(Method::POST, &format!("{sold_at}/claim"), Some(&t), None).await;
        assert_eq!(status, StatusCode::OK);
        // Nothing else happens to the item: the sweeper's retention folds the
        // claim into the ledger itself before removing the reservation.
        let (_, levels) = app.get("/v1/shops/s1/items/sku-1", &t).await;

        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while app.get(&sold_at, &t).await.0 != StatusCode::NOT_FOUND {
            assert!(std::time::Instant::now() < deadline, "the claimed reservation was not removed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (status, still) = app.get(&format!("/v1/shops/s1/reservations/{}", live["id"]), &t).await;
        assert_eq!((status, still["status"].as_str()), (StatusCode::OK, Some("held")));
        assert_eq!(app.get("/v1/shops/s1/items/sku-1", &t).await.1, levels, "retention moves no quantity");
        let (status, again) = app.post("/v1/shops/s1/reservations", &t, cart("sold")).await;
        assert_eq!(status, StatusCode::CREATED, "a removed reservation's key makes a new one: {again}");
        assert!(again["id"].as_i64() > live["id"].as_i64());
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("holdfast_retention_purged_total"), "{metrics}");
        let (status, audit) = app.get("/admin/audit", &app.admin).await;
        assert_eq!((status, audit["ok"].as_bool()), (StatusCode::OK, Some(true)), "{audit}");
    })
    .await;
}
