//! `bench flash-sale --webhooks N`: the run's shop subscribed to every topic
//! at a receiver in this process, delivered by N workers beside the sale, so
//! the sale's throughput shows what writing events costs and the receiver
//! shows whether delivery keeps up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use holdfast_core::{Error, ShopId, Topics, WebhookStore};
use holdfast_server::webhooks::{Deliverer, WorkerConfig};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What delivery did over a run.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookRun {
    pub workers: u32,
    /// Deliveries the receiver answered `204` (one per event: one subscription).
    pub delivered: u64,
    /// Deliveries still pending when the run stopped waiting (0 when
    /// delivery kept up).
    pub pending: u64,
    /// From the end of the sale until nothing was pending.
    pub drain_seconds: f64,
    /// Delivered per second, from the start of the sale until the queue
    /// was empty.
    pub deliveries_per_second: f64,
}

/// The receiver and the workers of one run.
#[derive(Debug)]
pub struct Delivery {
    hooks: Arc<dyn WebhookStore>,
    shop: ShopId,
    subscription: String,
    received: Arc<AtomicU64>,
    workers: u32,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Delivery {
    /// Starts a receiver, subscribes `shop` to `topics` there and starts
    /// `workers` delivery workers.
    pub async fn start(
        hooks: Arc<dyn WebhookStore>,
        shop: &ShopId,
        workers: u32,
        topics: Topics,
    ) -> Result<Self, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::Unavailable(format!("webhook receiver: {e}")))?;
        let url = format!("http://{}/hook", listener.local_addr().map_err(|e| Error::Internal(e.to_string()))?);
        let received = Arc::new(AtomicU64::new(0));
        let count = received.clone();
        let app = axum::Router::new().fallback(move || {
            let count = count.clone();
            async move {
                count.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        });
        let serving = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let (sub, _) = holdfast_server::webhooks::subscribe(&*hooks, shop, &url, topics).await?;
        let (stop, stopped) = watch::channel(false);
        let cfg = WorkerConfig { workers, retention: None, idle: Duration::from_millis(20), ..Default::default() };
        let deliverer = Deliverer::new(hooks.clone(), cfg).map_err(|e| Error::Internal(format!("{e:#}")))?;
        let working = tokio::spawn(deliverer.run(stopped));
        Ok(Delivery {
            hooks,
            shop: shop.clone(),
            subscription: sub.id,
            received,
            workers,
            stop,
            tasks: vec![working, serving],
            started: Instant::now(),
        })
    }

    /// After the sale: waits (at most `patience`) until nothing is pending,
    /// then stops the workers and the receiver and removes the subscription
    /// (with what it left pending).
    pub async fn finish(self, patience: Duration) -> Result<WebhookRun, Error> {
        let sale_end = Instant::now();
        let mut pending = self.hooks.queue_stats().await?.pending;
        while pending > 0 && self.workers > 0 && sale_end.elapsed() < patience {
            tokio::time::sleep(Duration::from_millis(50)).await;
            pending = self.hooks.queue_stats().await?.pending;
        }
        let drain = sale_end.elapsed();
        let total = self.started.elapsed();
        let _ = self.stop.send(true);
        let mut tasks = self.tasks.into_iter();
        if let Some(workers) = tasks.next() {
            let _ = workers.await;
        }
        for t in tasks {
            t.abort();
        }
        self.hooks.remove_subscription(&self.shop, &self.subscription).await?;
        let delivered = self.received.load(Ordering::Relaxed);
        Ok(WebhookRun {
            workers: self.workers,
            delivered,
            pending,
            drain_seconds: drain.as_secs_f64(),
            deliveries_per_second: delivered as f64 / total.as_secs_f64().max(1e-9),
        })
    }
}
