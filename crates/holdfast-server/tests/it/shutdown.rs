//! Graceful shutdown: a request whose body is still arriving when shutdown
//! starts is finished and answered; new connections are then refused, and
//! the server returns.

use std::time::Duration;

use holdfast_core::Backend;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::app::{no_tweak, stock, with_app};

pub async fn graceful_shutdown_finishes_the_request_in_flight(b: Backend) {
    with_app(b, no_tweak, |mut app| async move {
        stock(&app, &app.s1, "s1", "a", "wh", 3).await;
        let addr = app.base.trim_start_matches("http://").to_string();
        let body = json!({ "key": "late", "lines": [{ "item": "a", "quantity": 2 }] }).to_string();
        let (head, tail) = body.split_at(body.len() / 2);
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        let request = format!(
            "POST /v1/shops/s1/reservations HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{head}",
            app.s1,
            body.len()
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;

        // Shutdown starts while the request is in flight.
        let served = app.begin_stop();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!served.is_finished(), "the server returned with a request in flight");
        assert!(TcpStream::connect(&addr).await.is_err(), "a new connection was accepted during shutdown");

        conn.write_all(tail.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        assert!(answer.contains("\"status\":\"held\""), "{answer}");

        tokio::time::timeout(Duration::from_secs(10), served).await.expect("server stops").unwrap().unwrap();
        let lvl = app.db.store.levels(&"s1".parse().unwrap(), &"a".parse().unwrap()).await.unwrap();
        assert_eq!(lvl.locations[0].quantities.reserved, 2);
        app.db.assert_audit_clean().await;
    })
    .await;
}
