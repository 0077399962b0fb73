//! Webhook delivery (docs/design.md, "Events and webhooks"): workers lease
//! due deliveries from the outbox in a short transaction, send them with no
//! database connection held, and record each outcome. At least once: a
//! worker that dies mid-send leaves its lease to run out, and the delivery is
//! sent again, with the same `webhook-id`.
//!
//! Requests follow Standard Webhooks: `webhook-id` (the event's id),
//! `webhook-timestamp` (unix seconds) and `webhook-signature: v1,<base64 of
//! HMAC-SHA256 over "id.timestamp.body">`, keyed with the bytes behind the
//! subscription secret's `whsec_`.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::Utc;
use hmac::{Hmac, Mac};
use holdfast_core::{Attempt, Leased, ShopId, Subscription, Topics, WebhookStore, check_webhook_url};
use rand::RngCore;
use sha2::Sha256;
use tokio::sync::watch;

/// Waits before the second, third, … attempt, in schedule units (one unit
/// is a second unless [`WorkerConfig::unit`] says otherwise): 5 s, 5 min,
/// 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h. After the last, dead.
pub const SCHEDULE: [u64; 9] = [5, 300, 1_800, 7_200, 18_000, 36_000, 50_400, 72_000, 86_400];

/// A new subscription's secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    format!("whsec_{}", BASE64.encode(key))
}

/// Adds a subscription of `shop` to `topics` (every topic when empty) at
/// `url`, checked first; answers it with its secret, which is shown this
/// once.
pub async fn subscribe(
    store: &dyn WebhookStore,
    shop: &ShopId,
    url: &str,
    topics: Topics,
) -> Result<(Subscription, String), holdfast_core::Error> {
    check_webhook_url(url)?;
    let topics = if topics.is_empty() { Topics::all() } else { topics };
    let sub = Subscription {
        id: holdfast_sql::subscription_id(),
        shop: shop.clone(),
        url: url.to_string(),
        topics,
        created_at: Utc::now(),
        disabled_at: None,
    };
    let secret = new_secret();
    store.add_subscription(&sub, &secret).await?;
    Ok((sub, secret))
}

/// The `webhook-signature` header's value for one request.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> anyhow::Result<String> {
    let key = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = BASE64.decode(key).map_err(|e| anyhow::anyhow!("the subscription's secret is not base64: {e}"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    Ok(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())))
}

/// How the workers run.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Workers in this process; each leases its own batches.
    pub workers: u32,
    /// Most deliveries one worker leases and sends at once.
    pub batch: u32,
    /// How long a lease lasts: a delivery not recorded by then is sent
    /// again (its worker is taken for dead). Longer than `timeout`.
    pub lease: Duration,
    /// How long a receiver has to answer.
    pub timeout: Duration,
    /// How long a worker that found nothing due waits before it looks again.
    pub idle: Duration,
    /// One step of [`SCHEDULE`].
    pub unit: Duration,
    /// Delivered deliveries older than this are deleted; `None` keeps them.
    pub retention: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            batch: 32,
            lease: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            idle: Duration::from_millis(200),
            unit: Duration::from_secs(1),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
        }
    }
}

/// Sends what the outbox holds.
#[derive(Debug, Clone)]
pub struct Deliverer {
    store: Arc<dyn WebhookStore>,
    client: reqwest::Client,
    cfg: WorkerConfig,
    /// The pod whose queue this is, with pods.
    pod: Option<String>,
}

/// Starts the workers of `cfg` on the delivery queue of `db`, or with pods on
/// each pod's queue, until `stop` turns true.
pub fn spawn_per_pod(
    db: &holdfast_sql::Database,
    cfg: WorkerConfig,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let named = db.has_pods();
    db.pods()
        .into_iter()
        .map(|pod| {
            let mut d = Deliverer::new(pod.db.webhooks.clone(), cfg.clone())?;
            if named {
                d.pod = Some(pod.name);
            }
            Ok(tokio::spawn(d.run(stop.clone())))
        })
        .collect()
}

impl Deliverer {
    pub fn new(store: Arc<dyn WebhookStore>, cfg: WorkerConfig) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { store, client, cfg, pod: None })
    }

    /// Runs `cfg.workers` workers until `stop` turns true; the first also
    /// keeps the queue's metrics and deletes old delivered rows.
    pub async fn run(self, stop: watch::Receiver<bool>) {
        let mut tasks = Vec::new();
        for n in 0..self.cfg.workers {
            let (me, mut stop) = (self.clone(), stop.clone());
            let pod = self.pod.clone();
            let work = async move {
                let mut housekeeping = tokio::time::Instant::now();
                loop {
                    if *stop.borrow() {
                        return;
                    }
                    if n == 0 && housekeeping.elapsed() >= Duration::from_secs(5) {
                        housekeeping = tokio::time::Instant::now();
                        me.housekeeping().await;
                    }
                    let sent = match me.round().await {
                        Ok(n) => n,
                        Err(e) => {
                            tracing::warn!(error = %e, pod = me.pod.as_deref(), "webhook worker could not lease deliveries");
                            0
                        }
                    };
                    if sent == 0 {
                        tokio::select! {
                            _ = tokio::time::sleep(me.cfg.idle) => {}
                            _ = stop.changed() => {}
                        }
                    }
                }
            };
            tasks.push(match pod {
                Some(pod) => tokio::spawn(holdfast_sql::in_pod(pod, work)),
                None => tokio::spawn(work),
            });
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    /// One round: leases a batch, sends each delivery (all at once), then
    /// records every outcome in one transaction (one commit per round, not
    /// per delivery: at a few thousand deliveries a second the commits were
    /// what the sale lost). Returns how many were sent.
    pub async fn round(&self) -> Result<usize, holdfast_core::Error> {
        let leased = self.store.lease_deliveries(self.cfg.batch, self.cfg.lease).await?;
        let n = leased.len();
        // Dropped with the round (the process stopping), the set aborts the
        // sends still under way: their leases run out and they go again.
        let mut sends = tokio::task::JoinSet::new();
        for l in leased {
            let me = self.clone();
            sends.spawn(async move { me.deliver(l).await });
        }
        let mut outcomes = Vec::with_capacity(n);
        while let Some(done) = sends.join_next().await {
            if let Ok(outcome) = done {
                outcomes.push(outcome);
            }
        }
        if let Err(e) = self.store.record_attempts(&outcomes).await {
            // Their leases run out and they are sent again.
            tracing::warn!(deliveries = outcomes.len(), error = %e, "could not record webhook attempts");
        }
        Ok(n)
    }

    /// Sends one leased delivery; what came of it, to record.
    async fn deliver(&self, l: Leased) -> (i64, u32, Attempt) {
        if l.reclaimed {
            metrics::counter!("holdfast_webhook_leases_reclaimed_total").increment(1);
        }
        let d = &l.delivery;
        let outcome = self.attempt(&l).await;
        let label = match &outcome {
            Attempt::Delivered { .. } => "delivered",
            Attempt::Failed { at: Some(_), .. } => "retried",
            Attempt::Failed { at: None, .. } => "dead",
            Attempt::Gone => "gone",
        };
        metrics::counter!("holdfast_webhook_deliveries_total", "outcome" => label).increment(1);
        if let Attempt::Failed { error, status, .. } = &outcome {
            tracing::info!(delivery = d.id, event = %d.event_id, attempt = d.attempts, ?status, error = %error, "webhook attempt failed");
        }
        (d.id, d.attempts, outcome)
    }

    async fn attempt(&self, l: &Leased) -> Attempt {
        let d = &l.delivery;
        let timestamp = Utc::now().timestamp();
        let signature = match sign(&l.secret, &d.event_id, timestamp, &d.payload) {
            Ok(s) => s,
            Err(e) => return Attempt::Failed { status: None, error: e.to_string(), at: None },
        };
        let sent = self
            .client
            .post(&l.url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(d.payload.clone())
            .send()
            .await;
        let (status, error, retry_after) = match sent {
            Ok(answer) => {
                let status = answer.status();
                if status.is_success() {
                    return Attempt::Delivered { status: status.as_u16() };
                }
                if status == reqwest::StatusCode::GONE {
                    return Attempt::Gone;
                }
                let retry_after = answer
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s.min(24 * 3600)));
                (Some(status.as_u16()), format!("answered {status}"), retry_after)
            }
            Err(e) => (None, without_url(&e), None),
        };
        let at = next_attempt(self.cfg.unit, d.attempts, retry_after).map(|wait| Utc::now() + wait);
        Attempt::Failed { status, error, at }
    }

    async fn housekeeping(&self) {
        match self.store.queue_stats().await {
            Ok(q) => {
                // With pods, each pod's queue is a series of its own.
                let pod: Vec<metrics::Label> = self.pod.iter().map(|p| metrics::Label::new("pod", p.clone())).collect();
                metrics::gauge!("holdfast_webhook_queue_depth", pod.clone()).set(q.pending as f64);
                metrics::gauge!("holdfast_webhook_dead", pod.clone()).set(q.dead as f64);
                metrics::gauge!("holdfast_webhook_oldest_pending_seconds", pod)
                    .set(q.oldest_pending.unwrap_or_default().as_secs_f64());
            }
            Err(e) => tracing::debug!(error = %e, "could not read the webhook queue"),
        }
        if let Some(keep) = self.cfg.retention {
            match self.store.purge_deliveries(keep, 1_000).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "old webhook deliveries deleted"),
                Err(e) => tracing::debug!(error = %e, "could not delete old webhook deliveries"),
            }
        }
    }
}

/// How long after attempt number `attempts` failed the next one goes
/// (the schedule, or the receiver's `Retry-After` when that is later), or
/// `None` after the last.
fn next_attempt(unit: Duration, attempts: u32, retry_after: Option<Duration>) -> Option<chrono::Duration> {
    let step = *SCHEDULE.get(attempts.checked_sub(1)? as usize)?;
    let wait = unit.saturating_mul(step as u32).max(retry_after.unwrap_or_default());
    chrono::Duration::from_std(wait).ok()
}

/// A transport error without the URL (which may carry a token of the
/// receiver's in its query).
fn without_url(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() { what.to_string() } else { format!("{what}: {detail}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_standard_webhooks_does() {
        // The example of the Standard Webhooks specification.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = r#"{"test": 2432232314}"#;
        let sig = sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body).unwrap();
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn secrets_are_32_random_bytes() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(BASE64.decode(a.strip_prefix("whsec_").unwrap()).unwrap().len(), 32);
    }

    #[test]
    fn the_schedule_scales_and_ends() {
        let unit = Duration::from_millis(10);
        assert_eq!(next_attempt(unit, 1, None), Some(chrono::Duration::milliseconds(50)));
        assert_eq!(next_attempt(unit, 2, None), Some(chrono::Duration::milliseconds(3_000)));
        assert_eq!(next_attempt(unit, 2, Some(Duration::from_secs(7))), Some(chrono::Duration::seconds(7)));
        assert!(next_attempt(unit, 9, None).is_some());
        assert_eq!(next_attempt(unit, 10, None), None);
    }
}
