//! Graceful shutdown: a request whose body is still arriving when shutdown
//! starts is finished and answered; new connections are then refused, and
//! the server returns.

use std::time::{Duration, Instant};

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
        // `expect: 100-continue`: the server answers `100 Continue` when the
        // handler starts reading the body, so the test knows the request is
        // in flight instead of hoping a pause was long enough for it.
        let request = format!(
            "POST /v1/shops/s1/reservations HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
            app.s1,
            body.len()
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        let interim = tokio::time::timeout(Duration::from_secs(30), read_head(&mut conn))
            .await
            .expect("no 100 Continue within 30 s");
        assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
        conn.write_all(head.as_bytes()).await.unwrap();

        // Shutdown starts while the request is in flight.
        let served = app.begin_stop();
        // The listener closes once the server task sees the signal: wait for
        // that (a fixed pause could end first on a loaded machine).
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(&addr).await.is_ok() {
            assert!(Instant::now() < deadline, "new connections still accepted 10 s into the shutdown");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Give a server that wrongly stops with a request in flight the time to.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!served.is_finished(), "the server returned with a request in flight");

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

/// Reads one response head (through the blank line), byte by byte so that
/// nothing after it is consumed.
async fn read_head(conn: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = conn.read_u8().await.expect("the server closed the connection");
        head.push(byte);
    }
    String::from_utf8_lossy(&head).into_owned()
}
