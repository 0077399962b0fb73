//! `serve --redis-url`: shops served in their migration mode, and the admin
//! routes for modes and the kill switch, against a real Redis.

use holdfast_core::Backend;
use holdfast_server::Settings;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::app::{no_tweak, stock, with_app};

pub fn with_redis(s: &mut Settings) {
    s.redis_url = Some(crate::support::shared_redis_url());
    // Each test on its own keys, so tests share the Redis server; the app
    // deletes them when it is dropped.
    s.redis_prefix = format!("{}:", crate::support::unique_name("hf_serve"));
}

pub async fn sql_primary_shop_keeps_reserving_across_the_kill_switch(b: Backend) {
    with_app(b, with_redis, |app| async move {
        let admin = app.admin.clone();
        let (status, ks) = app.get("/admin/kill-switch", &admin).await;
        assert_eq!((status, ks), (StatusCode::OK, json!({ "engaged": false })));

        let (status, view) = app.put("/admin/modes", &admin, json!({ "shop": "s1", "mode": "sql-primary" })).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(view["resolved"]["s1"], "sql-primary", "{view}");
        let (status, view) = app.get("/admin/modes?shops=s1,s2", &admin).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(view["resolved"]["s1"], "sql-primary", "{view}");
        assert_eq!(view["resolved"]["s2"], "redis", "{view}");
        assert!(view["shadow"].is_object(), "{view}");

        let t = app.s1.clone();
        stock(&app, &t, "s1", "sku-1", "wh", 10).await;
        let cart = |k: &str| json!({ "key": k, "lines": [{ "item": "sku-1", "quantity": 1 }] });
        let (status, r1) = app.post("/v1/shops/s1/reservations", &t, cart("before")).await;
        assert_eq!(status, StatusCode::CREATED, "{r1}");

        let (status, ks) = app.post("/admin/kill-switch", &admin, json!({ "engaged": true })).await;
        assert_eq!((status, ks), (StatusCode::OK, json!({ "engaged": true })));
        let (status, ks) = app.get("/admin/kill-switch", &admin).await;
        assert_eq!((status, ks), (StatusCode::OK, json!({ "engaged": true })));
        let (_, view) = app.get("/admin/modes?shops=s1", &admin).await;
        assert_eq!(view["resolved"]["s1"], "shadow", "{view}");

        let (status, r2) = app.post("/v1/shops/s1/reservations", &t, cart("after")).await;
        assert_eq!(status, StatusCode::CREATED, "{r2}");
        let (status, c) =
            app.call(Method::POST, &format!("/v1/shops/s1/reservations/{}/claim", r2["id"]), Some(&t), None).await;
        assert_eq!(status, StatusCode::OK, "{c}");

        // Bad bodies are refused and change nothing.
        for bad in [json!({ "engaged": "yes" }), json!({}), json!({ "engaged": true, "x": 1 })] {
            let (status, err) = app.post("/admin/kill-switch", &admin, bad).await;
            assert!(status.is_client_error(), "{status} {err}");
        }
        for bad in [json!({ "shop": "s1", "mode": "mongo" }), json!({ "rollout": "sql", "percent": 101 })] {
            let (status, err) = app.put("/admin/modes", &admin, bad).await;
            assert!(status.is_client_error(), "{status} {err}");
        }
        let (status, err) = app.post("/admin/kill-switch", &t, json!({ "engaged": false })).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{err}");
        let (_, ks) = app.get("/admin/kill-switch", &admin).await;
        assert_eq!(ks, json!({ "engaged": true }));

        let (status, ks) = app.post("/admin/kill-switch", &admin, json!({ "engaged": false })).await;
        assert_eq!((status, ks), (StatusCode::OK, json!({ "engaged": false })));
        let (_, view) = app.get("/admin/modes?shops=s1", &admin).await;
        assert_eq!(view["resolved"]["s1"], "sql-primary", "{view}");
        app.stop().await;
    })
    .await;
}

pub async fn mode_routes_answer_404_without_redis(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        let admin = app.admin.clone();
        for (method, path, body) in [
            (Method::GET, "/admin/modes", None),
            (Method::PUT, "/admin/modes", Some(json!({ "shop": "s1", "mode": "sql" }))),
            (Method::GET, "/admin/kill-switch", None),
            (Method::POST, "/admin/kill-switch", Some(json!({ "engaged": true }))),
        ] {
            let (status, err) = app.call(method, path, Some(&admin), body).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {err}");
            assert_eq!(err["error"], "not_found");
            assert!(err["message"].as_str().unwrap().contains("--redis-url"), "{err}");
        }
        app.stop().await;
    })
    .await;
}
