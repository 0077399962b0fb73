//! `holdfast bench verify --serve`: the workload against a `holdfast serve`
//! child process over HTTP, which the `kill` fault ends with SIGKILL and
//! starts again on the same address.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use holdfast_core::{
    Allocation, AuditReport, Backend, Error, IdempotencyKey, ItemId, ItemLevels, LocationId, LocationLevel, Quantities,
    Reservation, ReservationId, ReservationStatus, ReserveRequest, Reserved, ShopId, Shortfall, StockChange,
    StockRequest, Store, StoreStats, Ttl,
};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// A `holdfast serve` child on a fixed local address.
#[derive(Debug)]
pub struct Served {
    args: Vec<String>,
    pub base: String,
    child: Mutex<Option<Child>>,
}

impl Served {
    /// Starts `holdfast serve` (this very executable) on a free local port
    /// against `database_url`, and waits until it answers `/readyz`.
    /// `redis`: the Redis URL and key prefix for the migration modes.
    pub async fn start(database_url: &str, coalesce: bool, redis: Option<(&str, String)>) -> Result<Self, Error> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::Internal(format!("no free local port: {e}")))?
            .port();
        let mut args: Vec<String> = [
            "serve",
            "--insecure-no-auth",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            database_url,
            "--sweep-interval-ms",
            "200",
            // Shorter than the workload's 3 s wait for an answer: a request
            // whose client gave up is rolled back soon after (the checker
            // counts on it).
            "--request-timeout-ms",
            "2500",
            "--log-format",
            "json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !coalesce {
            args.push("--no-coalesce".into());
        }
        if let Some((url, prefix)) = redis {
            args.extend(["--redis-url".into(), url.to_string(), "--redis-prefix".into(), prefix]);
        }
        let served = Self { args, base: format!("http://127.0.0.1:{port}"), child: Mutex::new(None) };
        served.launch().await?;
        Ok(served)
    }

    async fn launch(&self) -> Result<(), Error> {
        let exe = std::env::current_exe().map_err(|e| Error::Internal(format!("cannot find holdfast itself: {e}")))?;
        let child = Command::new(exe)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Internal(format!("cannot start holdfast serve: {e}")))?;
        *self.child.lock().await = Some(child);
        let client = reqwest::Client::new();
        let ready = format!("{}/readyz", self.base);
        for _ in 0..300 {
            if let Ok(r) = client.get(&ready).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::Unavailable("holdfast serve did not become ready within 15 s".into()))
    }

    /// SIGKILL, then the same command again; returns once it is ready.
    pub async fn kill_and_restart(&self) -> Result<(), Error> {
        if let Some(mut child) = self.child.lock().await.take() {
            // tokio's kill is SIGKILL on Unix: no graceful shutdown, requests
            // in flight lose their answers, transactions are cut.
            let _ = child.kill().await;
        }
        self.launch().await
    }

    /// Pins `shop` to `mode` (`PUT /admin/modes`) and waits until the
    /// service's rule poller has seen it.
    pub async fn set_mode(&self, shop: &ShopId, mode: holdfast_core::Mode) -> Result<(), Error> {
        let client = reqwest::Client::new();
        let url = format!("{}/admin/modes", self.base);
        let res = client
            .put(&url)
            .json(&json!({ "shop": shop.as_str(), "mode": mode.as_str() }))
            .send()
            .await
            .map_err(|e| Error::Unavailable(format!("PUT /admin/modes: {e}")))?;
        if !res.status().is_success() {
            return Err(Error::Internal(format!("PUT /admin/modes answered {}", res.status())));
        }
        for _ in 0..100 {
            let v: Value = client
                .get(format!("{url}?shops={shop}"))
                .send()
                .await
                .map_err(|e| Error::Unavailable(format!("GET /admin/modes: {e}")))?
                .json()
                .await
                .unwrap_or(Value::Null);
            if v["resolved"][shop.as_str()] == mode.as_str() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(Error::Internal(format!("holdfast serve did not put shop {shop} in mode {}", mode.as_str())))
    }

    pub async fn stop(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            let _ = child.kill().await;
        }
    }
}

/// The store API over HTTP, as the workload calls it. Answers that say
/// nothing about the outcome (a lost connection, a 5xx) are `Unavailable`.
#[derive(Debug)]
pub struct HttpStore {
    base: String,
    client: reqwest::Client,
    backend: Backend,
    token: Option<String>,
}

#[derive(Deserialize)]
struct ReservationBody {
    id: i64,
    key: String,
    status: String,
    expires_at: chrono::DateTime<chrono::Utc>,
    lines: Vec<AllocationBody>,
}

#[derive(Deserialize)]
struct AllocationBody {
    item: String,
    location: String,
    quantity: u32,
}

#[derive(Deserialize)]
struct LevelBody {
    location: String,
    on_hand: i64,
    available: i64,
    reserved: i64,
    committed: i64,
}

#[derive(Deserialize)]
struct ItemLevelsBody {
    item: String,
    locations: Vec<LevelBody>,
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("unexpected {what} from holdfast serve: {e}"))
}

impl ReservationBody {
    fn into_reservation(self) -> Result<Reservation, Error> {
        let lines = self
            .lines
            .into_iter()
            .map(|a| {
                Ok(Allocation {
                    item: ItemId::new(a.item).map_err(|e| bad("item", e))?,
                    location: LocationId::new(a.location).map_err(|e| bad("location", e))?,
                    quantity: a.quantity,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(Reservation {
            id: ReservationId::new(self.id).map_err(|e| bad("id", e))?,
            key: IdempotencyKey::new(self.key).map_err(|e| bad("key", e))?,
            status: ReservationStatus::parse(&self.status).ok_or_else(|| bad("status", &self.status))?,
            expires_at: self.expires_at,
            lines,
        })
    }
}

impl LevelBody {
    fn into_level(self) -> Result<LocationLevel, Error> {
        Ok(LocationLevel {
            location: LocationId::new(self.location).map_err(|e| bad("location", e))?,
            quantities: Quantities {
                on_hand: self.on_hand,
                available: self.available,
                reserved: self.reserved,
                committed: self.committed,
            },
        })
    }
}

impl HttpStore {
    pub fn new(base: &str, backend: Backend, token: Option<String>) -> Self {
        let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().expect("an HTTP client");
        Self { base: base.trim_end_matches('/').to_string(), client, backend, token }
    }

    /// `GET /admin/audit` of `shop`: whether its books balance, or `None`
    /// when the token is not an admin's.
    pub async fn audit_over_http(&self, shop: &ShopId) -> Result<Option<bool>, Error> {
        let mut req = self.client.get(format!("{}/admin/audit?shop={shop}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let res = req.send().await.map_err(|e| Error::Unavailable(format!("GET /admin/audit: {e}")))?;
        match res.status() {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Ok(None),
            s if s.is_success() => {
                let v: Value = res.json().await.map_err(|e| bad("audit", e))?;
                Ok(Some(v["ok"].as_bool().ok_or_else(|| bad("audit", format!("no ok in {v}")))?))
            }
            s => Err(Error::Internal(format!("GET /admin/audit answered {s}"))),
        }
    }

    /// Sends one request: the body of a 2xx answer (and its status), or the
    /// error a 4xx names.
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Result<(StatusCode, Value), Error> {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.map_err(|e| Error::Unavailable(format!("no answer: {e}")))?;
        let status = res.status();
        let bytes = res.bytes().await.map_err(|e| Error::Unavailable(format!("answer cut: {e}")))?;
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok((status, v));
        }
        let message = v["message"].as_str().unwrap_or_default().to_string();
        if status.is_server_error() {
            return Err(Error::Unavailable(format!("{status}: {message}")));
        }
        Err(match v["error"].as_str().unwrap_or_default() {
            "insufficient_stock" => Error::InsufficientStock(
                v["lines"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| {
                        Ok(Shortfall {
                            item: ItemId::new(l["item"].as_str().unwrap_or_default()).map_err(|e| bad("item", e))?,
                            requested: l["requested"].as_u64().unwrap_or(0) as u32,
                            available: l["available"].as_u64().unwrap_or(0) as u32,
                        })
                    })
                    .collect::<Result<Vec<_>, Error>>()?,
            ),
            "idempotency_conflict" => Error::IdempotencyConflict(message),
            "not_found" => Error::NotFound,
            "reservation_expired" => Error::Expired,
            // The workload records the code only.
            "invalid_state" => Error::WrongStatus(ReservationStatus::Held, "changed"),
            "stock_conflict" => Error::StockConflict(message),
            code => Error::Internal(format!("{status} {code}: {message}")),
        })
    }

    async fn reservation(&self, path: String, body: Option<Value>) -> Result<Reservation, Error> {
        let (_, v) = self.send(Method::POST, &path, body).await?;
        serde_json::from_value::<ReservationBody>(v).map_err(|e| bad("reservation", e))?.into_reservation()
    }
}

#[async_trait]
impl Store for HttpStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    async fn migrate(&self) -> Result<(), Error> {
        Ok(()) // `serve` migrates at start.
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        let lines: Vec<Value> = req
            .lines()
            .iter()
            .map(|l| {
                let mut line = json!({ "item": l.item.as_str(), "quantity": l.quantity.get() });
                if let Some(locs) = &l.locations {
                    line["locations"] = json!(locs.iter().map(|l| l.as_str()).collect::<Vec<_>>());
                }
                line
            })
            .collect();
        let body = json!({
            "key": req.key().as_str(),
            "lines": lines,
            "ttl_seconds": req.ttl().as_secs(),
            "allow_partial": req.allow_partial(),
            "allow_split": req.allow_split(),
        });
        let (status, v) =
            self.send(Method::POST, &format!("/v1/shops/{}/reservations", req.shop()), Some(body)).await?;
        let reservation =
            serde_json::from_value::<ReservationBody>(v).map_err(|e| bad("reservation", e))?.into_reservation()?;
        Ok(Reserved { reservation, created: status == StatusCode::CREATED })
    }

    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        self.reservation(format!("/v1/shops/{shop}/reservations/{id}/claim"), None).await
    }

    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        self.reservation(format!("/v1/shops/{shop}/reservations/{id}/release"), None).await
    }

    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation, Error> {
        let body = json!({ "ttl_seconds": ttl.as_secs() });
        self.reservation(format!("/v1/shops/{shop}/reservations/{id}/extend"), Some(body)).await
    }

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let (_, v) = self.send(Method::GET, &format!("/v1/shops/{shop}/reservations/{id}"), None).await?;
        serde_json::from_value::<ReservationBody>(v).map_err(|e| bad("reservation", e))?.into_reservation()
    }

    async fn expire(&self, _limit: u32) -> Result<u64, Error> {
        Ok(0) // `serve` runs its own sweeper.
    }

    async fn purge(&self, _older_than: std::time::Duration, _limit: u32) -> Result<u64, Error> {
        Ok(0) // `serve`'s sweeper applies its own retention.
    }

    async fn unswept(&self) -> Result<Option<holdfast_core::Unswept>, Error> {
        Ok(None) // `serve`'s sweeper measures it (its /metrics).
    }

    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        let at = format!("/v1/shops/{}/items/{}/locations/{}", req.shop(), req.item(), req.location());
        let (method, path, body) = match req.change() {
            StockChange::Set(n) => (Method::PUT, at, json!({ "on_hand": n })),
            StockChange::Adjust(d) => (Method::POST, format!("{at}/adjust"), json!({ "delta": d })),
            StockChange::Fulfil(q) => (Method::POST, format!("{at}/fulfil"), json!({ "quantity": q })),
        };
        let (_, v) = self.send(method, &path, Some(body)).await?;
        serde_json::from_value::<LevelBody>(v).map_err(|e| bad("level", e))?.into_level()
    }

    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        let (_, v) = self.send(Method::GET, &format!("/v1/shops/{shop}/items/{item}"), None).await?;
        let body = serde_json::from_value::<ItemLevelsBody>(v).map_err(|e| bad("levels", e))?;
        Ok(ItemLevels {
            item: ItemId::new(body.item).map_err(|e| bad("item", e))?,
            locations: body.locations.into_iter().map(LevelBody::into_level).collect::<Result<_, _>>()?,
        })
    }

    async fn audit(&self, _shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        Err(Error::Internal("the run audits its shop on the database itself".into()))
    }

    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}
