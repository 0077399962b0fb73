//! The console over plain HTTP (its browser test is in the `holdfast`
//! crate): the page and its assets are served from the binary under a strict
//! Content-Security-Policy and name nothing outside the server; the data
//! route is for admin tokens only and says what the books say.

use holdfast_core::Backend;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::app::{no_tweak, stock, with_app};

pub async fn the_console_is_built_in_and_its_overview_is_admin_only(b: Backend) {
    with_app(b, no_tweak, move |app| async move {
        for (path, kind) in [
            ("/admin/ui", "text/html"),
            ("/admin/ui/console.js", "text/javascript"),
            ("/admin/ui/console.css", "text/css"),
        ] {
            let res = app.client.get(format!("{}{path}", app.base)).send().await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{path} needs no token: it holds no data");
            let h = res.headers();
            assert!(h["content-type"].to_str().unwrap().starts_with(kind), "{path}: {:?}", h["content-type"]);
            let csp = h["content-security-policy"].to_str().unwrap();
            assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"), "{csp}");
            assert_eq!(h["x-frame-options"], "DENY");
            assert_eq!(h["x-content-type-options"], "nosniff");
            let body = res.text().await.unwrap();
            for outside in ["src=\"http", "href=\"http", "src=\"//", "href=\"//", "url(http", "@import", "fetch(\"http"]
            {
                assert!(!body.contains(outside), "{path} loads something from elsewhere: {outside}");
            }
        }

        let (status, err) = app.call(Method::GET, "/admin/overview", None, None).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
        let (status, err) = app.get("/admin/overview", &app.s1).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")));

        stock(&app, &app.s1, "s1", "tee", "wh", 10).await;
        stock(&app, &app.s1, "s1", "idle", "wh", 10).await;
        let mut ids = Vec::new();
        for k in 0..4 {
            let body = json!({"key": format!("k{k}"), "lines": [{"item": "tee", "quantity": 2}]});
            let (status, r) = app.post("/v1/shops/s1/reservations", &app.s1, body).await;
            assert_eq!(status, StatusCode::CREATED, "{r}");
            ids.push(r["id"].as_i64().unwrap());
        }
        for id in &ids[..3] {
            let (status, r) = app.post(&format!("/v1/shops/s1/reservations/{id}/claim"), &app.s1, json!({})).await;
            assert_eq!(status, StatusCode::OK, "{r}");
        }
        let (status, o) = app.get("/admin/overview", &app.admin).await;
        assert_eq!(status, StatusCode::OK, "{o}");
        assert_eq!(o["items"].as_array().unwrap().len(), 1, "only the busy item: {o}");
        let tee = &o["items"][0];
        assert_eq!(
            (&tee["shop"], &tee["item"], &tee["on_hand"], &tee["available"], &tee["held"], &tee["sold_recently"]),
            (&json!("s1"), &json!("tee"), &json!(10), &json!(2), &json!(2), &json!(6)),
            "{tee}"
        );
        assert_eq!(o["pods"], json!([{"name": "default", "backend": b.name(), "ready": true}]));
        assert_eq!(o["migration"], json!(null), "no --redis-url, no modes");
        assert_eq!(o["deliveries"]["pending"], json!(0));
        assert_eq!(o["sold_window_seconds"], json!(60));
        let tags: Vec<&str> = o["connections"].as_array().unwrap().iter().filter_map(|r| r["tag"].as_str()).collect();
        assert!(tags.contains(&"reserve") && tags.contains(&"console"), "{tags:?}");
        // Nothing about the books changed by looking.
        let (_, audit) = app.get("/admin/audit", &app.admin).await;
        assert_eq!(audit["ok"], json!(true), "{audit}");
        app.stop().await;
    })
    .await;
}
