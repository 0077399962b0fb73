//! The flash sale against a running `holdfast serve`, over its `/v1` API:
//! `--target http://HOST:PORT --token T`.
//!
//! Every buyer is one HTTP request per step, as a checkout service would
//! send them: `POST …/reservations` (201/200 → held; 409
//! `insufficient_stock` → turned away), then `…/claim` or `…/release`. A
//! request whose answer is lost in transport is sent again with the same
//! idempotency key (a reserve replay answers 200 with the same hold; claim
//! and release are idempotent), counted as a retry.
//!
//! Tokens reach only the shops they were made for, so the sale runs in the
//! shop the caller names (`--shop`), or in a shop of its own when the server
//! lets every caller reach every shop (`serve --insecure-no-auth`). The item
//! is the run's own either way, so runs never touch each other's stock.
//! The books are the item's levels; the audit and the connection report
//! (`/admin/audit`, `/admin/connections`) need an admin token and are left
//! out without one. Retries and deadlocks are the server's
//! (`holdfast_store_{retries,deadlocks}_total` from `/metrics`, which counts
//! every shop of the server) plus this client's transport retries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use holdfast_core::{Error, Invalid, ItemId, LocationId, ShopId};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::target::{Books, Target, TargetStats};
use holdfast_core::ConnHold;

/// Where and as whom the HTTP target sells.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `http://HOST:PORT` (or `https://`) of a running `holdfast serve`.
    pub url: String,
    /// A bearer token; `None` only for a server started with
    /// `--insecure-no-auth`.
    pub token: Option<String>,
    /// The shop to sell in; `None`: a shop of the run's own, which needs a
    /// server where every caller reaches every shop (`--insecure-no-auth`).
    pub shop: Option<ShopId>,
}

/// Checks `url` is `http://HOST[:PORT]` or `https://HOST[:PORT]` (a serve
/// with `--tls-cert`, whose certificate the system's roots or
/// `SSL_CERT_FILE` vouch for) with nothing after the authority but an
/// optional `/`, and answers it without the trailing slash.
pub fn base_url(url: &str) -> Result<String, Invalid> {
    let bad = |why: &str| Invalid::new("target", format!("{url:?}: {why}"));
    let Some((scheme, rest)) =
        url.strip_prefix("http://").map(|r| ("http", r)).or_else(|| url.strip_prefix("https://").map(|r| ("https", r)))
    else {
        return Err(bad("the target must be http://HOST:PORT (or https://) of a running holdfast serve"));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("expected http://HOST:PORT with no path, query or credentials"));
    }
    Ok(format!("{scheme}://{authority}"))
}

/// A running `holdfast serve`, one (shop, item, location) of it.
#[derive(Debug)]
pub struct HttpTarget {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    /// Hold lifetime sent with each reserve: the longest the API takes, so
    /// the server's sweeper expires nothing during a run.
    pub ttl_seconds: i64,
    /// The token reaches `/admin` (audit and connection report).
    pub admin: bool,
    /// The shop was named by the caller (`--shop`) rather than made for the run.
    shop_given: bool,
    transport_retries: AtomicU64,
}

/// An error answer's `{error, message}`.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: String,
    #[serde(default)]
    message: String,
}

/// Sends of one request before a transport failure counts as an error.
const ATTEMPTS: u32 = 3;

impl HttpTarget {
    /// Checks the server answers (`/healthz`) and whether the token is an
    /// admin token (`GET /admin/connections`: 200 or 403); a token the server
    /// does not know fails here with `401`'s message.
    pub async fn connect(opts: &HttpOptions, run_id: &str, concurrency: u32) -> Result<Self, Error> {
        let base = base_url(&opts.url)?;
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency.max(1) as usize)
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::Internal(format!("HTTP client: {e}")))?;
        let shop_given = opts.shop.is_some();
        let shop = match &opts.shop {
            Some(s) => s.clone(),
            None => ShopId::new(format!("bench-{run_id}"))?,
        };
        let mut target = Self {
            client,
            base,
            token: opts.token.clone(),
            shop,
            item: ItemId::new(format!("flash-{run_id}"))?,
            location: LocationId::new("main-warehouse").expect("valid"),
            ttl_seconds: 86_400,
            admin: false,
            shop_given,
            transport_retries: AtomicU64::new(0),
        };
        let (status, body) = target.send(Method::GET, "/healthz", None).await.map_err(|e| match e {
            Error::Unavailable(m) => Error::Unavailable(format!("the target does not answer ({m})")),
            e => e,
        })?;
        if status != StatusCode::OK {
            return Err(Error::Unavailable(format!("{}/healthz answered {status}: {body}", target.base)));
        }
        let (status, body) = target.send(Method::GET, "/admin/connections", None).await?;
        target.admin = match status {
            StatusCode::OK => true,
            StatusCode::FORBIDDEN => false,
            StatusCode::UNAUTHORIZED => {
                let why = if target.token.is_some() {
                    "the server does not accept this token (unknown or revoked)"
                } else {
                    "the server needs a token: pass --token (env HOLDFAST_TOKEN)"
                };
                return Err(Invalid::new("token", format!("{why}: {}", error_of(&body).message)).into());
            }
            other => {
                return Err(Error::Unavailable(format!("{}/admin/connections answered {other}: {body}", target.base)));
            }
        };
        Ok(target)
    }

    fn shop_path(&self) -> String {
        format!("/v1/shops/{}", self.shop)
    }

    /// Sends one request (again on a transport failure, up to [`ATTEMPTS`]
    /// sends) and answers the status and the body (`Null` when not JSON).
    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Result<(StatusCode, Value), Error> {
        let url = format!("{}{path}", self.base);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = self.client.request(method.clone(), &url);
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let sent = async {
                let res = req.send().await?;
                let status = res.status();
                let bytes = res.bytes().await?;
                Ok::<_, reqwest::Error>((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
            };
            match sent.await {
                Ok(answer) => return Ok(answer),
                Err(e) if attempt < ATTEMPTS && !e.is_builder() => {
                    self.transport_retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20 * attempt as u64)).await;
                }
                Err(e) => return Err(Error::Unavailable(format!("{method} {url}: {}", chain(&e)))),
            }
        }
    }

    /// The error for an answer other than the one expected.
    fn refused(&self, what: &str, status: StatusCode, body: &Value) -> Error {
        let e = error_of(body);
        let text = format!("{what}: {status} {}: {}", e.error, e.message);
        match (status, e.error.as_str()) {
            (StatusCode::NOT_FOUND, _) if what == "setting the stock" => Error::Invalid(Invalid::new(
                "shop",
                format!(
                    "the token does not reach shop {} ({text}). A token reaches only the shops it was made for: {}",
                    self.shop,
                    if self.shop_given {
                        "pass a --shop the token reaches"
                    } else {
                        "pass --shop SHOP with one of them (holdfast token create --shop SHOP [--admin]), or drive a server started with --insecure-no-auth"
                    }
                ),
            )),
            (StatusCode::NOT_FOUND, _) => Error::NotFound,
            (_, "reservation_expired") => Error::Expired,
            (_, "contended") => Error::RetriesExhausted(0),
            (StatusCode::SERVICE_UNAVAILABLE, _) => Error::Unavailable(text),
            (StatusCode::UNPROCESSABLE_ENTITY | StatusCode::BAD_REQUEST, _) => {
                Error::Invalid(Invalid::new("request", text))
            }
            _ => Error::Internal(text),
        }
    }

    /// A `/metrics` counter (0 when absent or unreadable).
    async fn metric(&self, name: &str) -> u64 {
        let Ok(res) = self.client.get(format!("{}/metrics", self.base)).send().await else { return 0 };
        let Ok(text) = res.text().await else { return 0 };
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or(0)
    }
}

/// An error with its causes ("error sending request: … Connection refused").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

fn error_of(body: &Value) -> ErrorBody {
    serde_json::from_value(body.clone()).unwrap_or_default()
}

/// The units of a reservation body's lines.
fn units(body: &Value) -> u64 {
    body["lines"].as_array().map(|l| l.iter().filter_map(|x| x["quantity"].as_u64()).sum()).unwrap_or(0)
}

#[async_trait]
impl Target for HttpTarget {
    async fn setup(&self, stock: u32) -> Result<(), Error> {
        let path = format!("{}/items/{}/locations/{}", self.shop_path(), self.item, self.location);
        let (status, body) = self.send(Method::PUT, &path, Some(&json!({ "on_hand": stock }))).await?;
        if status != StatusCode::OK {
            return Err(self.refused("setting the stock", status, &body));
        }
        Ok(())
    }

    async fn reserve(&self, key: &str, qty: u32) -> Result<Option<i64>, Error> {
        let body = json!({
            "key": key,
            "lines": [{ "item": self.item.as_str(), "quantity": qty, "locations": [self.location.as_str()] }],
            "ttl_seconds": self.ttl_seconds,
        });
        let (status, answer) =
            self.send(Method::POST, &format!("{}/reservations", self.shop_path()), Some(&body)).await?;
        match status {
            StatusCode::CREATED | StatusCode::OK => answer["id"]
                .as_i64()
                .map(Some)
                .ok_or_else(|| Error::Internal(format!("a reserve answered {status} without an id: {answer}"))),
            StatusCode::CONFLICT if error_of(&answer).error == "insufficient_stock" => Ok(None),
            _ => Err(self.refused("reserve", status, &answer)),
        }
    }

    async fn claim(&self, id: i64) -> Result<u64, Error> {
        let (status, body) =
            self.send(Method::POST, &format!("{}/reservations/{id}/claim", self.shop_path()), None).await?;
        match status {
            StatusCode::OK => Ok(units(&body)),
            _ => Err(self.refused("claim", status, &body)),
        }
    }

    async fn release(&self, id: i64) -> Result<(), Error> {
        let (status, body) =
            self.send(Method::POST, &format!("{}/reservations/{id}/release", self.shop_path()), None).await?;
        match status {
            StatusCode::OK => Ok(()),
            _ => Err(self.refused("release", status, &body)),
        }
    }

    /// The item's levels from the server; its audit of the shop when the
    /// token is an admin token.
    async fn books(&self) -> Result<Books, Error> {
        let (status, body) = self.send(Method::GET, &format!("{}/items/{}", self.shop_path(), self.item), None).await?;
        if status != StatusCode::OK {
            return Err(self.refused("reading the levels", status, &body));
        }
        let loc = body["locations"]
            .as_array()
            .and_then(|ls| ls.iter().find(|l| l["location"] == self.location.as_str()))
            .ok_or_else(|| Error::Internal(format!("the sale's location is missing from the levels: {body}")))?;
        let n = |k: &str| loc[k].as_i64().ok_or_else(|| Error::Internal(format!("levels without {k}: {body}")));
        let audit_ok = if self.admin {
            let (status, audit) = self.send(Method::GET, &format!("/admin/audit?shop={}", self.shop), None).await?;
            if status != StatusCode::OK {
                return Err(self.refused("the audit", status, &audit));
            }
            Some(audit["ok"].as_bool().ok_or_else(|| Error::Internal(format!("an audit without ok: {audit}")))?)
        } else {
            None
        };
        Ok(Books { committed: n("committed")?, reserved: n("reserved")?, available: n("available")?, audit_ok })
    }

    async fn stats(&self) -> TargetStats {
        let mine = self.transport_retries.load(Ordering::Relaxed);
        TargetStats {
            retries: self.metric("holdfast_store_retries_total").await + mine,
            deadlocks: self.metric("holdfast_store_deadlocks_total").await,
            reserves_batched: self.metric("holdfast_store_reserves_batched_total").await,
            reserve_batches: self.metric("holdfast_store_reserve_batches_total").await,
        }
    }

    /// `GET /admin/connections` (admin tokens): the server's totals per tag.
    async fn connections(&self) -> Result<Option<Vec<ConnHold>>, Error> {
        if !self.admin {
            return Ok(None);
        }
        let (status, body) = self.send(Method::GET, "/admin/connections", None).await?;
        if status != StatusCode::OK {
            return Err(self.refused("the connection report", status, &body));
        }
        let rows: Vec<ConnHold> = serde_json::from_value(body["tags"].clone())
            .map_err(|e| Error::Internal(format!("an unexpected connection report ({e}): {body}")))?;
        Ok(Some(rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_or_https_host_port() {
        assert_eq!(base_url("http://127.0.0.1:7878").unwrap(), "http://127.0.0.1:7878");
        assert_eq!(base_url("http://localhost:7878/").unwrap(), "http://localhost:7878");
        assert_eq!(base_url("https://localhost:7878/").unwrap(), "https://localhost:7878");
        for bad in ["127.0.0.1:7878", "ftp://x", "http://", "https://", "http://x:1/v1", "http://u:p@x:1"] {
            let e = base_url(bad).unwrap_err();
            assert_eq!(e.field, "target", "{bad}");
        }
    }
}
