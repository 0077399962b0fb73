//! A webhook receiver in the test process: an HTTP server on a free port
//! that records every request (path, `webhook-id`, timestamp, signature,
//! body), answers as a policy says, can hold requests back, and notices a
//! delivery sent again while it is still in flight.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use rand::Rng;
use serde_json::Value;
use tokio::sync::Notify;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Got {
    pub path: String,
    pub id: String,
    pub timestamp: i64,
    pub signature: String,
    pub body: String,
}

impl Got {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// How the receiver answers: given the path and how many times it has seen
/// this (path, webhook-id) before, a status.
pub type Policy = fn(&str, u32) -> u16;

#[derive(Debug)]
pub struct Receiver {
    url: String,
    got: Mutex<Vec<Got>>,
    seen: Mutex<HashMap<(String, String), u32>>,
    in_flight: Mutex<HashSet<(String, String)>>,
    /// A request that arrived while the same (path, webhook-id) was in flight.
    pub overlaps: AtomicU64,
    /// While set, requests wait for `release` before they are answered.
    pub stall: AtomicBool,
    pub release: Notify,
    policy: Policy,
    /// Most random delay before answering, ms.
    jitter_ms: u64,
}

impl Receiver {
    /// Starts one; `jitter_ms`: most random delay before each answer.
    pub async fn start(policy: Policy, jitter_ms: u64) -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let rx = Arc::new(Receiver {
            url,
            got: Mutex::default(),
            seen: Mutex::default(),
            in_flight: Mutex::default(),
            overlaps: AtomicU64::new(0),
            stall: AtomicBool::new(false),
            release: Notify::new(),
            policy,
            jitter_ms,
        });
        let app = axum::Router::new().fallback(hit).with_state(rx.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        rx
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    pub fn at(&self, path: &str) -> Vec<Got> {
        self.got().into_iter().filter(|g| g.path == path).collect()
    }
}

/// Removes its (path, id) from the in-flight set however the handler ends
/// (also when the sender goes away mid-request).
struct InFlight(Arc<Receiver>, (String, String));

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.lock().unwrap().remove(&self.1);
    }
}

async fn hit(State(rx): State<Arc<Receiver>>, uri: Uri, headers: HeaderMap, body: String) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let got = Got {
        path: uri.path().to_string(),
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp").parse().unwrap_or(-1),
        signature: header("webhook-signature"),
        body,
    };
    let key = (got.path.clone(), got.id.clone());
    if !rx.in_flight.lock().unwrap().insert(key.clone()) {
        rx.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    let _guard = InFlight(rx.clone(), key.clone());
    let before = {
        let mut seen = rx.seen.lock().unwrap();
        let n = seen.entry(key).or_default();
        *n += 1;
        *n - 1
    };
    rx.got.lock().unwrap().push(got.clone());
    while rx.stall.load(Ordering::SeqCst) {
        rx.release.notified().await;
    }
    if rx.jitter_ms > 0 {
        let ms = rand::thread_rng().gen_range(0..=rx.jitter_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    StatusCode::from_u16((rx.policy)(&got.path, before)).unwrap()
}

/// Answers 200 to everything.
pub fn ok(_: &str, _: u32) -> u16 {
    200
}

impl Receiver {
    /// Holds every request back from now on, until [`Receiver::unstall`].
    pub fn stall(&self) {
        self.stall.store(true, Ordering::SeqCst);
    }

    /// Answers the requests held back, and the later ones at once.
    pub fn unstall(&self) {
        self.stall.store(false, Ordering::SeqCst);
        self.release.notify_waiters();
    }
}
