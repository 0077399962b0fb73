//! Events and webhooks: what a shop can subscribe to, the subscriptions, and
//! the deliveries of the outbox (written in the transaction of the change
//! that causes each event, sent later by workers).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::{Invalid, Result, ShopId};

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// A new hold (not a replay).
    ReservationHeld,
    ReservationClaimed,
    ReservationReleased,
    /// A hold that ran out of time, marked by the sweeper or by a claim,
    /// extend or reserve that found it past its expiry.
    ReservationExpired,
    /// The available units of an (item, location) reached 0.
    InventorySoldOut,
    /// The available units of an (item, location) rose from 0.
    InventoryRestocked,
}

impl Topic {
    pub const ALL: [Topic; 6] = [
        Topic::ReservationHeld,
        Topic::ReservationClaimed,
        Topic::ReservationReleased,
        Topic::ReservationExpired,
        Topic::InventorySoldOut,
        Topic::InventoryRestocked,
    ];
    /// The topics about an (item, location)'s availability.
    pub const INVENTORY: [Topic; 2] = [Topic::InventorySoldOut, Topic::InventoryRestocked];

    pub fn as_str(self) -> &'static str {
        match self {
            Topic::ReservationHeld => "reservation.held",
            Topic::ReservationClaimed => "reservation.claimed",
            Topic::ReservationReleased => "reservation.released",
            Topic::ReservationExpired => "reservation.expired",
            Topic::InventorySoldOut => "inventory.sold_out",
            Topic::InventoryRestocked => "inventory.restocked",
        }
    }

    /// The bit of this topic in a [`Topics`] set.
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Topic {
    type Err = Invalid;

    fn from_str(s: &str) -> std::result::Result<Self, Invalid> {
        Topic::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| {
            let all: Vec<&str> = Topic::ALL.iter().map(|t| t.as_str()).collect();
            Invalid::new("topics", format!("unknown topic {s:?}; topics are {}", all.join(", ")))
        })
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Topic {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Topic::ALL.map(Topic::as_str)))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Topic {}

/// A set of topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Topics(u8);

impl Topics {
    pub fn all() -> Self {
        Topic::ALL.into_iter().collect()
    }

    pub fn contains(self, t: Topic) -> bool {
        self.0 & t.bit() != 0
    }

    pub fn insert(&mut self, t: Topic) {
        self.0 |= t.bit();
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Topic> {
        Topic::ALL.into_iter().filter(move |t| self.contains(*t))
    }

    /// Comma separated, as stored.
    pub fn to_list(self) -> String {
        self.iter().map(Topic::as_str).collect::<Vec<_>>().join(",")
    }

    /// The stored form back; an empty list is every topic.
    pub fn parse_list(s: &str) -> std::result::Result<Self, Invalid> {
        let mut t = Topics::default();
        for name in s.split(',').filter(|n| !n.is_empty()) {
            t.insert(name.parse()?);
        }
        Ok(if t.is_empty() { Topics::all() } else { t })
    }
}

impl FromIterator<Topic> for Topics {
    fn from_iter<I: IntoIterator<Item = Topic>>(iter: I) -> Self {
        let mut t = Topics::default();
        for topic in iter {
            t.insert(topic);
        }
        t
    }
}

/// A shop's webhook subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub id: String,
    pub shop: ShopId,
    pub url: String,
    pub topics: Topics,
    pub created_at: DateTime<Utc>,
    /// Set when the receiver answered `410 Gone`: nothing more is written
    /// or sent for it.
    pub disabled_at: Option<DateTime<Utc>>,
}

/// The URLs [`check_webhook_url`] accepts, as a regular expression (with a
/// length limit of [`WEBHOOK_URL_MAX`]): the scheme; an authority of a host
/// name or IPv4 address and a port, in RFC 3986's characters for them (so
/// neither an IPv6 literal nor a user name); then a path, query or fragment
/// of any printable ASCII.
pub const WEBHOOK_URL_PATTERN: &str =
    r"^https?://[A-Za-z0-9._~!$&'()*+,;=%-][A-Za-z0-9._~!$&'()*+,;=%:-]*([/?#][!-~]*)?$";

/// The longest receiver URL, in characters (printable ASCII: one byte each).
pub const WEBHOOK_URL_MAX: usize = 2_000;

/// Checks a receiver's URL: absolute `http` or `https`, with a host (a name
/// or an IPv4 address; not an IPv6 literal), no user name or password, at
/// most 2,000 characters, each printable ASCII (anything else
/// percent-encoded, as in any URI). [`WEBHOOK_URL_PATTERN`] says the same
/// for the HTTP document.
pub fn check_webhook_url(url: &str) -> std::result::Result<(), Invalid> {
    let bad = |why: &str| Err(Invalid::new("url", format!("{why}: {url:?}")));
    if url.len() > WEBHOOK_URL_MAX {
        return bad("longer than 2000 characters");
    }
    let rest = match url.split_once("://") {
        Some(("http" | "https", rest)) => rest,
        _ => return bad("not an http:// or https:// URL"),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() || authority.starts_with(':') {
        return bad("no host");
    }
    if authority.contains('@') {
        return bad("a user name or password in the URL is not allowed");
    }
    if !url.bytes().all(|b| b.is_ascii_graphic()) {
        return bad("white space, control or non-ASCII characters (percent-encode them)");
    }
    let host_or_port = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%:".contains(&b);
    if !authority.bytes().all(host_or_port) {
        return bad("the host must be a name or an IPv4 address, with an optional port");
    }
    Ok(())
}

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    /// Waiting for its (next) attempt, or being sent.
    Pending,
    Delivered,
    /// Every attempt failed, or its subscription was disabled.
    Dead,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Dead => "dead",
        }
    }
}

impl FromStr for DeliveryStatus {
    type Err = Invalid;

    fn from_str(s: &str) -> std::result::Result<Self, Invalid> {
        Ok(match s {
            "pending" => DeliveryStatus::Pending,
            "delivered" => DeliveryStatus::Delivered,
            "dead" => DeliveryStatus::Dead,
            other => return Err(Invalid::new("status", format!("{other:?} is not pending, delivered or dead"))),
        })
    }
}

/// One event for one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: i64,
    /// The event's id, the same for every subscription and every attempt
    /// (the `webhook-id` header).
    pub event_id: String,
    pub shop: ShopId,
    pub subscription: String,
    pub topic: Topic,
    /// The whole request body: `{"id", "type", "shop", "created_at", "data"}`.
    pub payload: String,
    pub status: DeliveryStatus,
    /// Attempts started so far.
    pub attempts: u32,
    pub created_at: DateTime<Utc>,
    pub next_attempt_at: DateTime<Utc>,
    /// The last answer's HTTP status, if one came.
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// A delivery a worker has leased, with where and how to send it.
#[derive(Debug, Clone)]
pub struct Leased {
    pub delivery: Delivery,
    pub url: String,
    /// The subscription's secret, `whsec_…`.
    pub secret: String,
    /// Its previous lease ran out without an outcome (a worker died).
    pub reclaimed: bool,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A 2xx answer.
    Delivered { status: u16 },
    /// Another answer or none; tried again at `at`, or dead when `at` is
    /// `None` (the schedule is used up).
    Failed { status: Option<u16>, error: String, at: Option<DateTime<Utc>> },
    /// `410 Gone`: the subscription is disabled and its pending deliveries
    /// are dead.
    Gone,
}

/// The queue as a whole, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub pending: u64,
    pub dead: u64,
    /// Age of the oldest pending delivery.
    pub oldest_pending: Option<Duration>,
}

/// The subscriptions and the outbox's deliveries.
#[async_trait]
pub trait WebhookStore: Send + Sync + std::fmt::Debug {
    /// Stores a subscription; `secret` is kept to sign its deliveries.
    async fn add_subscription(&self, sub: &Subscription, secret: &str) -> Result<()>;

    /// The shop's subscriptions, oldest first, secrets left out.
    async fn list_subscriptions(&self, shop: &ShopId) -> Result<Vec<Subscription>>;

    /// Removes a subscription and its pending deliveries; `false` when the
    /// shop has none with that id.
    async fn remove_subscription(&self, shop: &ShopId, id: &str) -> Result<bool>;

    /// The shop's deliveries, newest first, at most `limit`.
    async fn list_deliveries(&self, shop: &ShopId, status: Option<DeliveryStatus>, limit: u32)
    -> Result<Vec<Delivery>>;

    /// A dead delivery back to pending, due now; `false` when the shop has
    /// no dead delivery with that id.
    async fn retry_delivery(&self, shop: &ShopId, id: i64) -> Result<bool>;

    /// Leases up to `limit` due deliveries for `lease`, skipping those other
    /// workers hold: pending ones whose time has come, and those whose lease
    /// ran out (their worker died). Counts the attempt.
    async fn lease_deliveries(&self, limit: u32, lease: Duration) -> Result<Vec<Leased>>;

    /// Records, in one transaction, the outcome of each `(id, attempt,
    /// outcome)`: attempt number `attempt` of a leased delivery. Nothing is
    /// written for a delivery leased again meanwhile (its lease had run
    /// out): the later attempt records its own.
    async fn record_attempts(&self, outcomes: &[(i64, u32, Attempt)]) -> Result<()>;

    async fn queue_stats(&self) -> Result<QueueStats>;

    /// Deletes up to `limit` delivered deliveries older than `older_than`.
    async fn purge_deliveries(&self, older_than: Duration, limit: u32) -> Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiver_urls() {
        for ok in [
            "https://shop.example/hooks/holdfast",
            "http://127.0.0.1:8080",
            "https://a.example?x=[1]#@frag",
            "https://a.example/p%20q/@me",
        ] {
            assert!(check_webhook_url(ok).is_ok(), "{ok} refused");
        }
        let long = format!("https://x.example/{}", "a".repeat(2_000));
        for bad in [
            "ftp://x.example/h",
            "https://user:pw@x.example/h",
            "http:///nohost",
            "http://:80/",
            "https://[::1]:8080/h",
            "https://[abc/h",
            "https://a b.example/",
            "https://x.example/\u{e9}",
            "https://x.example/\n",
            "https://x{y}.example/",
            "HTTP://x.example/",
            long.as_str(),
        ] {
            assert!(check_webhook_url(bad).is_err(), "{bad:?} accepted");
        }
    }
}
