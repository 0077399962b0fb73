//! Tenant isolation and token handling over HTTP.

use holdfast_core::Backend;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::app::{hold, mint, no_tweak, stock, with_app};

/// A shop token cannot see or touch another shop's reservation, by that
/// shop's path or by its own: both answer 404, and nothing changes.
pub async fn another_shops_reservation_answers_404(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        stock(&app, &app.s2, "s2", "x", "wh", 5).await;
        let r = hold(&app, &app.s2, "s2", "x", 1).await;
        let id = r["id"].as_i64().unwrap();
        for shop in ["s2", "s1"] {
            let r = format!("/v1/shops/{shop}/reservations/{id}");
            for (method, path) in
                [(Method::GET, r.clone()), (Method::POST, format!("{r}/claim")), (Method::POST, format!("{r}/release"))]
            {
                let (status, err) = app.call(method.clone(), &path, Some(&app.s1), None).await;
                assert_eq!(
                    (status, err["error"].as_str()),
                    (StatusCode::NOT_FOUND, Some("not_found")),
                    "{method} {path}"
                );
            }
        }
        let (status, _) = app.put("/v1/shops/s2/items/x/locations/wh", &app.s1, json!({ "on_hand": 0 })).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = app.get("/v1/shops/s2/items/x", &app.s1).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        // Untouched.
        let (_, still) = app.get(&format!("/v1/shops/s2/reservations/{id}"), &app.s2).await;
        assert_eq!(still, r);
        let (_, lvl) = app.get("/v1/shops/s2/items/x", &app.s2).await;
        assert_eq!(
            (lvl["locations"][0]["on_hand"].as_i64(), lvl["locations"][0]["reserved"].as_i64()),
            (Some(5), Some(1))
        );
        // A token for both shops reaches both.
        let both = mint(&*app.tokens, &["s1", "s2"], false).await;
        assert_eq!(app.get(&format!("/v1/shops/s2/reservations/{id}"), &both).await.0, StatusCode::OK);
        app.stop().await;
    })
    .await;
}

pub async fn missing_wrong_and_revoked_tokens_are_refused(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        let path = "/v1/shops/s1/items/a";
        assert_eq!(app.get(path, &app.s1).await.0, StatusCode::OK);
        let (status, err) = app.call(Method::GET, path, None, None).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
        // Right id, wrong secret; garbage; another shape entirely.
        let forged = format!("{}0", &app.s1[..app.s1.len() - 1]);
        let forged = if forged == app.s1 { format!("{}1", &app.s1[..app.s1.len() - 1]) } else { forged };
        for bad in [forged.as_str(), "hf_", "hf_zz_zz", "not-a-token", &"x".repeat(5000)] {
            let (status, err) = app.get(path, bad).await;
            assert_eq!((status, err["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")), "{bad:.40}");
        }
        // Only admin tokens reach /admin.
        assert_eq!(app.get("/admin/audit", &app.s1).await.0, StatusCode::FORBIDDEN);
        assert_eq!(app.get("/admin/audit", &app.admin).await.0, StatusCode::OK);
        // An admin token without shops reaches no shop.
        assert_eq!(app.get(path, &app.admin).await.0, StatusCode::NOT_FOUND);

        let id = app.s1.split('_').nth(1).unwrap();
        assert!(app.tokens.revoke_token(id).await.unwrap());
        let (status, err) = app.get(path, &app.s1).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
        assert!(!app.tokens.revoke_token(id).await.unwrap(), "a revoked token cannot be revoked again");
        assert_eq!(app.get("/v1/shops/s2/items/a", &app.s2).await.0, StatusCode::OK, "other tokens still work");
        app.stop().await;
    })
    .await;
}
