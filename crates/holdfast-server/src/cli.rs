//! The bodies of `holdfast serve`, `holdfast token …` and `holdfast conn-report`. The binary's
//! `main.rs` only parses and calls these; flags and their `HOLDFAST_…`
//! variables live here, next to the settings they set.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use holdfast_core::ShopId;
use serde_json::json;

use crate::settings::{LogFormat, Settings};
use crate::{Application, auth, logging, shutdown_signal};

/// Flags of `holdfast serve`. Each overrides the same key of `--config`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// TOML file with any of the keys below (flags and environment win over it).
    #[arg(long, env = "HOLDFAST_CONFIG", value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7878].
    #[arg(long, env = "HOLDFAST_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Log lines as text (coloured on a terminal) or JSON [default: text].
    #[arg(long, env = "HOLDFAST_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Let every request through as an admin of every shop. Local trials only.
    #[arg(long, env = "HOLDFAST_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Milliseconds between expiry sweeps; 0 turns the sweeper off [default: 1000].
    #[arg(long, env = "HOLDFAST_SWEEP_INTERVAL_MS", value_name = "MS")]
    pub sweep_interval_ms: Option<u64>,
    /// Holds released per sweep transaction [default: 500].
    #[arg(long, env = "HOLDFAST_SWEEP_BATCH")]
    pub sweep_batch: Option<u32>,
    /// Seconds finished reservations are kept (and their idempotency keys
    /// remembered) before the sweeper removes them; 0 keeps them [default: 604800].
    #[arg(long, env = "HOLDFAST_RETENTION", value_name = "SECONDS")]
    pub retention: Option<u64>,
    /// Longest a request may take before `503 timeout` [default: 10000].
    #[arg(long, env = "HOLDFAST_REQUEST_TIMEOUT_MS", value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
    /// Longest a request waits for a database connection before `503 unavailable` [default: 2000].
    #[arg(long, env = "HOLDFAST_ACQUIRE_TIMEOUT_MS", value_name = "MS")]
    pub acquire_timeout_ms: Option<u64>,
    /// Largest request body accepted [default: 262144].
    #[arg(long, env = "HOLDFAST_BODY_LIMIT_BYTES", value_name = "BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// How long a checked token is trusted before its row is read again [default: 5000].
    #[arg(long, env = "HOLDFAST_AUTH_CACHE_MS", value_name = "MS")]
    pub auth_cache_ms: Option<u64>,
    /// Do not run migrations at start-up.
    #[arg(long, env = "HOLDFAST_NO_MIGRATE")]
    pub no_migrate: bool,
    /// Redis of the legacy counter model: serve every shop in its migration
    /// mode and enable /admin/modes and /admin/kill-switch.
    #[arg(long, env = "HOLDFAST_REDIS_URL", value_name = "URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// A file holding the Redis URL (a mounted secret), instead of --redis-url.
    #[arg(long, env = "HOLDFAST_REDIS_URL_FILE", value_name = "FILE", conflicts_with = "redis_url")]
    pub redis_url_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs
    /// --tls-key. Read again on SIGHUP, so a renewal needs no restart.
    #[arg(long, env = "HOLDFAST_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "HOLDFAST_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Prefix of every Redis key [default: hf:].
    #[arg(long, env = "HOLDFAST_REDIS_PREFIX", value_name = "PREFIX")]
    pub redis_prefix: Option<String>,
    #[command(flatten)]
    pub webhooks: WebhookFlags,
}

/// Webhook delivery, for `holdfast serve` and `holdfast worker`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebhookFlags {
    /// Webhook delivery workers in this process; 0: none (run `holdfast
    /// worker` instead) [default: 2].
    #[arg(long, env = "HOLDFAST_WEBHOOK_WORKERS", value_name = "N")]
    pub webhook_workers: Option<u32>,
    /// One step of the retry schedule (5 s, 5 min, 30 min, … at 1000) [default: 1000].
    #[arg(long, env = "HOLDFAST_WEBHOOK_RETRY_UNIT_MS", value_name = "MS")]
    pub webhook_retry_unit_ms: Option<u64>,
    /// How long a delivery stays leased to the worker sending it [default: 60000].
    #[arg(long, env = "HOLDFAST_WEBHOOK_LEASE_MS", value_name = "MS")]
    pub webhook_lease_ms: Option<u64>,
    /// Seconds delivered webhook deliveries are kept; 0 keeps them [default: 604800].
    #[arg(long, env = "HOLDFAST_WEBHOOK_RETENTION", value_name = "SECONDS")]
    pub webhook_retention: Option<u64>,
}

impl WebhookFlags {
    fn apply(&self, s: &mut Settings) {
        let w = self;
        macro_rules! overlay {
            ($($field:ident),*) => { $(if let Some(v) = w.$field { s.$field = v; })* };
        }
        overlay!(webhook_workers, webhook_retry_unit_ms, webhook_lease_ms, webhook_retention);
    }
}

/// The global database flags of the CLI (`--database-url`, `--max-connections`,
/// `--pool-cap`).
#[derive(Debug, Clone)]
pub struct DbFlags {
    pub database_url: Option<String>,
    /// `--pods FILE.toml`.
    pub pods: Option<PathBuf>,
    pub max_connections: u32,
    pub pool_cap: u32,
    /// `None`: as the configuration file says (default on).
    pub coalesce: Option<bool>,
    pub coalesce_max_batch: Option<u32>,
    /// The pool's connection lifetime and idle timeout (`None`: for ever).
    pub lifetimes: (Option<std::time::Duration>, Option<std::time::Duration>),
}

impl ServeArgs {
    /// Defaults, then the TOML file, then environment and flags.
    pub fn settings(&self, db: &DbFlags) -> anyhow::Result<Settings> {
        let mut s = db.settings(self.config.as_deref())?;
        macro_rules! overlay {
            ($($field:ident),*) => { $(if let Some(v) = self.$field { s.$field = v; })* };
        }
        overlay!(listen, log_format, sweep_interval_ms, sweep_batch, request_timeout_ms, acquire_timeout_ms);
        overlay!(body_limit_bytes, auth_cache_ms, retention);
        if self.redis_url.is_some() {
            s.redis_url = self.redis_url.clone();
            s.redis_url_file = None;
        }
        if self.redis_url_file.is_some() {
            s.redis_url_file = self.redis_url_file.clone();
            s.redis_url = None;
        }
        if self.tls_cert.is_some() {
            s.tls_cert = self.tls_cert.clone();
            s.tls_key = self.tls_key.clone();
        }
        if let Some(p) = &self.redis_prefix {
            s.redis_prefix = p.clone();
        }
        self.webhooks.apply(&mut s);
        s.insecure_no_auth |= self.insecure_no_auth;
        if self.no_migrate {
            s.migrate = false;
        }
        s.validate()?;
        s.resolve_files()?;
        Ok(s)
    }
}

impl DbFlags {
    /// Defaults, then the TOML file, then these flags.
    fn settings(&self, config: Option<&std::path::Path>) -> anyhow::Result<Settings> {
        let db = self;
        let mut s = match config {
            Some(path) => Settings::from_toml_file(path)?,
            None => Settings::default(),
        };
        if db.database_url.is_some() {
            s.database_url = db.database_url.clone();
            s.database_url_file = None;
            s.pods = None;
        }
        if db.pods.is_some() {
            s.pods = db.pods.clone();
            s.database_url = None;
            s.database_url_file = None;
        }
        s.lifetimes = db.lifetimes;
        s.max_connections = db.max_connections;
        s.pool_cap = db.pool_cap;
        if let Some(on) = db.coalesce {
            s.coalesce = on;
        }
        if let Some(n) = db.coalesce_max_batch {
            s.coalesce_max_batch = n;
        }
        Ok(s)
    }
}

/// Flags of `holdfast worker`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// TOML file with the keys of `holdfast serve` (the webhook_… keys and
    /// the database's are used; flags and environment win over it).
    #[arg(long, env = "HOLDFAST_CONFIG", value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Log lines as text or JSON [default: text].
    #[arg(long, env = "HOLDFAST_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    #[command(flatten)]
    pub webhooks: WebhookFlags,
}

/// `holdfast worker`: webhook delivery workers without the HTTP service,
/// until Ctrl-C or SIGTERM. Leave the schema to `holdfast migrate` (or a
/// `serve`); the embedded SQLite default is migrated here.
pub async fn worker(args: WorkerArgs, db: DbFlags) -> ExitCode {
    let settings = match db.settings(args.config.as_deref()).and_then(|mut s| {
        if let Some(f) = args.log_format {
            s.log_format = f;
        }
        args.webhooks.apply(&mut s);
        s.validate()?;
        anyhow::ensure!(s.webhook_workers > 0, "webhook_workers is 0: a worker with no workers has nothing to do");
        s.resolve_files()?;
        Ok(s)
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error[invalid_config]: {e:#}");
            return ExitCode::from(2);
        }
    };
    logging::init(settings.log_format);
    let started = async {
        let opts = settings.connect_options()?;
        let database = holdfast_sql::open(&opts).await?;
        if opts.pods.is_none() && opts.url.starts_with("sqlite:") {
            database.store.migrate().await?;
        }
        Ok::<_, anyhow::Error>(database)
    };
    let database = match started.await {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return ExitCode::from(5);
        }
    };
    let cfg = settings.webhook_workers();
    tracing::info!(
        workers = cfg.workers,
        pods = database.pods().len(),
        backend = database.store.backend().name(),
        "holdfast webhook worker"
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let runs = match crate::webhooks::spawn_per_pod(&database, cfg, &stopped) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return ExitCode::from(5);
        }
    };
    shutdown_signal().await;
    tracing::info!("stopping: finishing the deliveries in flight");
    let _ = stop.send(true);
    for run in runs {
        let _ = run.await;
    }
    ExitCode::SUCCESS
}

/// `holdfast serve`: runs until Ctrl-C or SIGTERM.
pub async fn serve(args: ServeArgs, db: DbFlags) -> ExitCode {
    let settings = match args.settings(&db) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error[invalid_config]: {e:#}");
            return ExitCode::from(2);
        }
    };
    logging::init(settings.log_format);
    let app = match Application::build(settings).await {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "cannot start");
            return ExitCode::from(5);
        }
    };
    match app.run_until(shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "server failed");
            ExitCode::from(5)
        }
    }
}

/// Flags of `holdfast conn-report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnReportArgs {
    /// The running service, e.g. http://127.0.0.1:7878.
    #[arg(long, env = "HOLDFAST_URL", value_name = "URL")]
    pub url: String,
    /// An admin token.
    #[arg(long, env = "HOLDFAST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the JSON of /admin/connections instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `holdfast conn-report`: who held the service's database connections, and
/// for how long, from `GET /admin/connections`.
pub async fn conn_report(args: ConnReportArgs) -> ExitCode {
    match fetch_connections(&args).await {
        Ok(body) => {
            if args.json {
                println!("{body}");
            } else {
                print!("{}", conn_table(&body));
            }
            ExitCode::SUCCESS
        }
        Err((code, e)) => {
            if args.json {
                println!("{}", json!({ "error": code, "message": format!("{e:#}") }));
            } else {
                eprintln!("error[{code}]: {e:#}");
            }
            ExitCode::from(if code == "unavailable" { 5 } else { 3 })
        }
    }
}

async fn fetch_connections(args: &ConnReportArgs) -> Result<serde_json::Value, (String, anyhow::Error)> {
    let url = format!("{}/admin/connections", args.url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| ("internal".to_string(), e.into()))?;
    let mut req = client.get(&url);
    if let Some(t) = &args.token {
        req = req.bearer_auth(t);
    }
    let res = req.send().await.map_err(|e| ("unavailable".to_string(), anyhow::Error::new(e).context(url.clone())))?;
    let status = res.status();
    let body: serde_json::Value = res
        .json()
        .await
        .map_err(|e| ("unavailable".to_string(), anyhow::Error::new(e).context("reading the answer")))?;
    if !status.is_success() {
        let code = body["error"].as_str().unwrap_or("http_error").to_string();
        let msg = body["message"].as_str().unwrap_or("").to_string();
        return Err((code, anyhow::anyhow!("{url} answered {status}: {msg}")));
    }
    Ok(body)
}

/// The report (`{"tags": [...]}`, as `GET /admin/connections` answers) as a
/// table, longest total hold time first. A `hold_seconds_max` of null (not
/// known, e.g. in a bench run's share) shows as `-`.
pub fn conn_table(body: &serde_json::Value) -> String {
    use std::fmt::Write;
    let mut rows: Vec<&serde_json::Value> = body["tags"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    rows.sort_by(|a, b| f(b, "hold_seconds_total").total_cmp(&f(a, "hold_seconds_total")));
    // With pods, each row is one pod's: a POD column first.
    let pods = rows.iter().any(|r| r["pod"].is_string());
    let pod = |r: &serde_json::Value| match pods {
        true => format!("{:<16} ", r["pod"].as_str().unwrap_or("-")),
        false => String::new(),
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}{:<32} {:>10} {:>12} {:>11} {:>11} {:>9} {:>9}",
        if pods { format!("{:<16} ", "POD") } else { String::new() },
        "TAG",
        "CHECKOUTS",
        "TRANSACTIONS",
        "STATEMENTS",
        "TOTAL S",
        "MEAN MS",
        "MAX MS"
    );
    for r in rows {
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "{}{:<32} {:>10} {:>12} {:>11} {:>11.3} {:>9.2} {:>9}",
            pod(r),
            r["tag"].as_str().unwrap_or("?"),
            n("checkouts"),
            n("transactions"),
            n("statements"),
            f(r, "hold_seconds_total"),
            f(r, "hold_seconds_mean") * 1000.0,
            r["hold_seconds_max"].as_f64().map(|m| format!("{:.2}", m * 1000.0)).unwrap_or_else(|| "-".into()),
        );
    }
    out
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a token for one or more shops (and/or /admin); prints it once.
    Create {
        /// A shop the token reaches; repeat for more.
        #[arg(long = "shop")]
        shops: Vec<ShopId>,
        /// The token also reaches /admin.
        #[arg(long)]
        admin: bool,
        /// Write the token to this new file (mode 0600) instead of printing it.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Every token: id, shops, admin, created, revoked.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Refuse a token from now on (servers notice within their auth cache time).
    Revoke {
        /// The token's id (the part after `hf_`, as `token list` shows it).
        id: String,
        #[arg(long)]
        json: bool,
    },
}

/// A new file only its owner can read; an existing file is left alone.
fn secret_file(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    open.open(path).with_context(|| format!("creating {} (it must not exist yet)", path.display()))
}

/// `holdfast token …`.
pub async fn token(cmd: TokenCommand, db: DbFlags) -> ExitCode {
    let json = matches!(
        cmd,
        TokenCommand::Create { json: true, .. }
            | TokenCommand::List { json: true }
            | TokenCommand::Revoke { json: true, .. }
    );
    match token_inner(cmd, db).await {
        Ok(code) => code,
        Err(e) => {
            if json {
                println!("{}", json!({ "error": "token_failed", "message": format!("{e:#}") }));
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::from(5)
        }
    }
}

async fn token_inner(cmd: TokenCommand, db: DbFlags) -> anyhow::Result<ExitCode> {
    if let TokenCommand::Create { shops, admin: false, .. } = &cmd
        && shops.is_empty()
    {
        eprintln!("error[invalid_request]: give at least one --shop, or --admin");
        return Ok(ExitCode::from(2));
    }
    let mut opts = db.settings(None)?.connect_options()?;
    opts.max_connections = 2;
    let database = holdfast_sql::open(&opts).await.context("connecting")?;
    // Like every other command: the embedded default migrates itself;
    // servers are migrated by `holdfast migrate` (or `serve`).
    if opts.pods.is_none() && opts.url.starts_with("sqlite:") {
        database.store.migrate().await.context("migrating")?;
    }
    let tokens = database.tokens;
    match cmd {
        TokenCommand::Create { shops, admin, out: Some(path), json } => {
            let new = auth::mint(shops, admin);
            // The file first: a token stored but written nowhere would be a
            // live credential nobody holds.
            let mut file = secret_file(&path)?;
            let stored = tokens.insert_token(&new.record).await.context("storing the token");
            let written = stored.and_then(|()| {
                use std::io::Write;
                writeln!(file, "{}", new.text).and_then(|()| file.sync_all()).context("writing the token")
            });
            if let Err(e) = written {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            if json {
                println!("{}", json!({ "file": path, "id": new.record.id, "shops": new.record.shops, "admin": admin }));
            } else {
                eprintln!("token {} created; written to {} (mode 0600).", new.record.id, path.display());
            }
        }
        TokenCommand::Create { shops, admin, out: None, json } => {
            let new = auth::mint(shops, admin);
            tokens.insert_token(&new.record).await.context("storing the token")?;
            if json {
                println!(
                    "{}",
                    json!({ "token": new.text, "id": new.record.id, "shops": new.record.shops, "admin": admin })
                );
            } else {
                println!("{}", new.text);
                eprintln!("token {} created; it is shown only this once.", new.record.id);
            }
        }
        TokenCommand::List { json } => {
            let all = tokens.list_tokens().await.context("listing tokens")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                println!("{:<16}  {:<6}  {:<7}  {:<20}  shops", "id", "admin", "revoked", "created");
                for t in all {
                    let shops: Vec<&str> = t.shops.iter().map(|s| s.as_str()).collect();
                    println!(
                        "{:<16}  {:<6}  {:<7}  {:<20}  {}",
                        t.id,
                        t.admin,
                        t.revoked_at.is_some(),
                        t.created_at.format("%Y-%m-%d %H:%M:%S"),
                        shops.join(",")
                    );
                }
            }
        }
        TokenCommand::Revoke { id, json } => {
            let id = id.strip_prefix("hf_").unwrap_or(&id).split('_').next().unwrap_or_default().to_string();
            let done = tokens.revoke_token(&id).await.context("revoking")?;
            if json {
                println!("{}", json!({ "id": id, "revoked": done }));
            } else if done {
                println!("token {id} revoked");
            } else {
                eprintln!("error[not_found]: no live token {id}");
            }
            if !done {
                return Ok(ExitCode::from(4));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
