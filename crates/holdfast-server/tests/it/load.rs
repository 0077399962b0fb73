//! Over HTTP: 200 concurrent buyers of one unit on stock 100
//! get exactly 100 `201` and 100 `409 insufficient_stock`; the invariant holds.

use holdfast_core::Backend;
use reqwest::StatusCode;
use serde_json::json;

use crate::app::{no_tweak, stock, with_app};

pub async fn two_hundred_http_buyers_for_one_hundred_units(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        stock(&app, &app.s1, "s1", "hot", "wh", 100).await;
        let app = std::sync::Arc::new(app);
        let buyers: Vec<_> = (0..200)
            .map(|n| {
                let app = app.clone();
                tokio::spawn(async move {
                    let cart = json!({ "key": format!("buyer-{n}"), "lines": [{ "item": "hot", "quantity": 1 }] });
                    app.post("/v1/shops/s1/reservations", &app.s1, cart).await
                })
            })
            .collect();
        let (mut held, mut refused) = (0, 0);
        for buyer in buyers {
            match buyer.await.unwrap() {
                (StatusCode::CREATED, _) => held += 1,
                (StatusCode::CONFLICT, body) => {
                    assert_eq!(body["error"], "insufficient_stock");
                    assert_eq!(body["lines"], json!([{ "item": "hot", "requested": 1, "available": 0 }]));
                    refused += 1;
                }
                (status, body) => panic!("unexpected {status}: {body}"),
            }
        }
        assert_eq!((held, refused), (100, 100));
        let (_, lvl) = app.get("/v1/shops/s1/items/hot", &app.s1).await;
        assert_eq!(
            lvl["locations"][0],
            json!({ "location": "wh", "on_hand": 100, "available": 0, "reserved": 100, "committed": 0 })
        );
        let (status, audit) = app.get("/admin/audit", &app.admin).await;
        assert_eq!((status, audit["ok"].as_bool()), (StatusCode::OK, Some(true)), "{audit}");
        app.db.assert_audit_clean().await;
        let app = std::sync::Arc::into_inner(app).expect("buyers are done");
        app.stop().await;
    })
    .await;
}
