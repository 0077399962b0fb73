//! What `holdfast serve` is configured with. Defaults here, then an optional
//! TOML file (the same keys), then environment variables and flags (which
//! clap merges; see `cli.rs`): the later wins.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

/// How the log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// `None`: the embedded SQLite file (`holdfast_sql::default_database_url`).
    pub database_url: Option<String>,
    /// A file holding the database URL (a mounted secret); read at start-up
    /// into `database_url`.
    pub database_url_file: Option<PathBuf>,
    /// A pods file: shops spread over several databases (instead of
    /// `database_url`).
    pub pods: Option<PathBuf>,
    /// Set by the CLI's global `--db-max-lifetime` / `--db-idle-timeout`
    /// (not TOML keys): how long a connection lives, and stays idle.
    #[serde(skip)]
    pub lifetimes: (Option<Duration>, Option<Duration>),
    /// Set by the CLI's global `--max-connections` (not a TOML key).
    #[serde(skip)]
    pub max_connections: u32,
    /// How long a request waits for a database connection before `503`.
    pub acquire_timeout_ms: u64,
    /// Set by the CLI's global `--pool-cap` (not a TOML key).
    #[serde(skip)]
    pub pool_cap: u32,
    /// Longest a request may take, body read included, before `503 timeout`.
    pub request_timeout_ms: u64,
    /// Largest request body accepted (bytes).
    pub body_limit_bytes: usize,
    /// Pause between expiry sweeps; 0 turns the sweeper off.
    pub sweep_interval_ms: u64,
    /// Most holds released (and finished reservations removed) per sweep
    /// transaction.
    pub sweep_batch: u32,
    /// Seconds a finished reservation (claimed, released, expired) is kept,
    /// and its idempotency key remembered, before the sweeper removes it;
    /// 0 keeps everything.
    pub retention: u64,
    /// How long a verified token is trusted without reading its row again
    /// (a revocation takes effect within this time); 0 reads it every time.
    pub auth_cache_ms: u64,
    /// Every request is let through as an admin. For local trials only.
    pub insecure_no_auth: bool,
    /// Run migrations at start-up (idempotent, serialised between replicas).
    pub migrate: bool,
    pub log_format: LogFormat,
    /// Redis of the legacy counter model. When set, every shop is
    /// served in its mode (`redis`, `shadow`, `sql-primary`, `sql`) and
    /// `/admin/modes` and `/admin/kill-switch` are available.
    pub redis_url: Option<String>,
    /// A file holding the Redis URL; read at start-up into `redis_url`.
    pub redis_url_file: Option<PathBuf>,
    /// Prepended to every Redis key, so several deployments (or tests) can
    /// share one Redis.
    pub redis_prefix: String,
    /// HTTPS: the certificate chain (PEM, leaf first) and its private key
    /// (PEM). Both or neither; read again on SIGHUP.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Request coalescing: concurrent reserves, claims and releases of one
    /// shop go to the database in batches (`--no-coalesce` turns it off).
    pub coalesce: bool,
    /// Most requests in one coalesced batch.
    pub coalesce_max_batch: u32,
    /// Webhook delivery workers in this process; 0 leaves delivery to
    /// `holdfast worker` processes.
    pub webhook_workers: u32,
    /// One step of the retry schedule (5, 300, 1800, … steps), in ms.
    pub webhook_retry_unit_ms: u64,
    /// How long a worker's lease on a delivery lasts before another worker
    /// may send it again (it is taken for dead), in ms.
    pub webhook_lease_ms: u64,
    /// Seconds delivered webhook deliveries are kept; 0 keeps them.
    pub webhook_retention: u64,
}

/// Seven days: longer than any checkout retries a request, and than the
/// window support looks up a reservation in.
pub const DEFAULT_RETENTION_SECS: u64 = 7 * 24 * 3600;

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            database_url: None,
            database_url_file: None,
            pods: None,
            lifetimes: (Some(holdfast_sql::DEFAULT_MAX_LIFETIME), Some(holdfast_sql::DEFAULT_IDLE_TIMEOUT)),
            max_connections: 32,
            acquire_timeout_ms: 2_000,
            pool_cap: 1_000,
            request_timeout_ms: 10_000,
            // 100 lines of 32 candidate locations of 64 characters fit.
            body_limit_bytes: 256 * 1024,
            sweep_interval_ms: 1_000,
            sweep_batch: 500,
            retention: DEFAULT_RETENTION_SECS,
            auth_cache_ms: 5_000,
            insecure_no_auth: false,
            migrate: true,
            log_format: LogFormat::Text,
            redis_url: None,
            redis_url_file: None,
            redis_prefix: "hf:".into(),
            tls_cert: None,
            tls_key: None,
            coalesce: true,
            coalesce_max_batch: 64,
            webhook_workers: 2,
            webhook_retry_unit_ms: 1_000,
            webhook_lease_ms: 60_000,
            webhook_retention: DEFAULT_RETENTION_SECS,
        }
    }
}

impl Settings {
    /// The defaults overlaid with the keys of a TOML file.
    pub fn from_toml_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Reads `database_url_file` and `redis_url_file` into their URLs.
    pub fn resolve_files(&mut self) -> anyhow::Result<()> {
        if let Some(path) = self.database_url_file.take() {
            self.database_url = Some(holdfast_sql::read_url_file(&path, "database_url_file")?);
        }
        if let Some(path) = self.redis_url_file.take() {
            self.redis_url = Some(holdfast_sql::read_url_file(&path, "redis_url_file")?);
        }
        Ok(())
    }

    pub fn database_url(&self) -> String {
        self.database_url.clone().unwrap_or_else(holdfast_sql::default_database_url)
    }

    /// How to reach the database, or the pods: URL or pods file, pool size
    /// and ages, and the store's settings.
    pub fn connect_options(&self) -> anyhow::Result<holdfast_sql::ConnectOptions> {
        let mut opts = holdfast_sql::ConnectOptions::new(self.database_url());
        opts.max_connections = self.max_connections;
        opts.acquire_timeout = Duration::from_millis(self.acquire_timeout_ms);
        (opts.max_lifetime, opts.idle_timeout) = self.lifetimes;
        opts.store = holdfast_sql::StoreConfig {
            pool_cap: self.pool_cap,
            coalesce: self.coalesce,
            coalesce_max_batch: self.coalesce_max_batch,
            ..holdfast_sql::StoreConfig::default()
        };
        if let Some(path) = &self.pods {
            opts.pods = Some(holdfast_sql::PodsFile::read(path)?);
        }
        Ok(opts)
    }

    /// What the database is, for messages: the URL without its password,
    /// or the pods file.
    pub fn database_name(&self) -> String {
        match &self.pods {
            Some(path) => format!("the pods of {}", path.display()),
            None => holdfast_sql::redact(&self.database_url()),
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn retention(&self) -> Option<Duration> {
        (self.retention > 0).then(|| Duration::from_secs(self.retention))
    }

    /// How the webhook workers of this process run.
    pub fn webhook_workers(&self) -> crate::webhooks::WorkerConfig {
        crate::webhooks::WorkerConfig {
            workers: self.webhook_workers,
            unit: Duration::from_millis(self.webhook_retry_unit_ms),
            lease: Duration::from_millis(self.webhook_lease_ms),
            retention: (self.webhook_retention > 0).then(|| Duration::from_secs(self.webhook_retention)),
            ..Default::default()
        }
    }

    pub fn sweep_interval(&self) -> Option<Duration> {
        (self.sweep_interval_ms > 0).then(|| Duration::from_millis(self.sweep_interval_ms))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=1_000).contains(&self.max_connections), "max_connections must be 1…1000");
        anyhow::ensure!((1..=100_000).contains(&self.pool_cap), "pool_cap must be 1…100000");
        anyhow::ensure!(self.request_timeout_ms > 0, "request_timeout_ms must be positive");
        anyhow::ensure!(self.acquire_timeout_ms > 0, "acquire_timeout_ms must be positive");
        anyhow::ensure!(self.body_limit_bytes >= 1024, "body_limit_bytes must be at least 1024");
        anyhow::ensure!((1..=100_000).contains(&self.sweep_batch), "sweep_batch must be 1…100000");
        anyhow::ensure!((1..=1_000).contains(&self.coalesce_max_batch), "coalesce_max_batch must be 1…1000");
        anyhow::ensure!(self.tls_cert.is_some() == self.tls_key.is_some(), "tls_cert and tls_key go together");
        anyhow::ensure!(self.webhook_workers <= 64, "webhook_workers must be 0…64");
        anyhow::ensure!(self.webhook_retry_unit_ms > 0, "webhook_retry_unit_ms must be positive");
        anyhow::ensure!(
            self.webhook_lease_ms > crate::webhooks::WorkerConfig::default().timeout.as_millis() as u64,
            "webhook_lease_ms must be longer than a delivery's 10 s timeout"
        );
        anyhow::ensure!(
            self.database_url.is_none() || self.database_url_file.is_none(),
            "give database_url or database_url_file, not both"
        );
        anyhow::ensure!(
            self.pods.is_none() || (self.database_url.is_none() && self.database_url_file.is_none()),
            "give pods or database_url, not both: each pod names its database"
        );
        anyhow::ensure!(
            self.redis_url.is_none() || self.redis_url_file.is_none(),
            "give redis_url or redis_url_file, not both"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_keys_overlay_defaults_and_typos_are_refused() {
        let s: Settings = toml::from_str("listen = \"0.0.0.0:9000\"\nsweep_interval_ms = 0\n").unwrap();
        assert_eq!(s.listen.port(), 9000);
        assert_eq!(s.sweep_interval(), None);
        assert_eq!(s.max_connections, 32);
        assert!(toml::from_str::<Settings>("listne = \"0.0.0.0:1\"").is_err());
    }
}
