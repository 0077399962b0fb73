//! `holdfast bench verify`: a checkout workload recorded as a history while
//! faults are injected, then checked for linearizability against the
//! inventory model (README, "How holdfast is verified").

pub mod check;
pub mod history;
pub mod model;
pub mod serve;
pub mod workload;

use std::sync::Arc;
use std::time::Duration;

use holdfast_core::{Error, Invalid, ShopId, Store};
use holdfast_sql::{ConnectOptions, StoreConfig};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::proxy::{LatencyProxy, upstream_of};
use history::{Event, Recorder};
use workload::Workload;

/// A fault the run injects between the store and its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Close every open database connection, wherever its transaction is.
    Cut,
    /// Close every connection and refuse new ones for 0.5–3 s: what a
    /// database restart looks like from the service.
    Outage,
    /// Hold back all traffic for 0.5–3 s, then let it through.
    Stall,
    /// SIGKILL the `holdfast serve` process (with `--serve`) and start it
    /// again: requests in flight lose their answers.
    Kill,
    /// Close every connection to Redis and refuse new ones for 0.5–3 s: Redis
    /// stopped, as the service sees it (with `--mode`).
    Redis,
    /// Run the operator's `--restart-cmd`, which restarts the database server
    /// (e.g. a crash and recovery: `pg_ctlcluster … restart -m immediate`).
    Restart,
}

impl Fault {
    /// Whether the fault acts on the network between the store and its
    /// database (through the fault proxy).
    fn on_network(self) -> bool {
        matches!(self, Fault::Cut | Fault::Outage | Fault::Stall)
    }
}

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub database_url: String,
    pub store: StoreConfig,
    pub clients: u32,
    pub duration: Duration,
    pub faults: Vec<Fault>,
    /// Seconds between faults, drawn from this range.
    pub fault_every: (f64, f64),
    /// Hold lifetimes in seconds, drawn from this range (≥ 1).
    pub ttl: (u32, u32),
    pub seed: u64,
    /// Drive a `holdfast serve` child over HTTP instead of the library.
    pub serve: bool,
    /// Run the shop in this migration mode (with `serve`), with the legacy
    /// store on this Redis.
    pub mode: Option<(holdfast_core::Mode, String)>,
    /// Drive a running `holdfast serve` at this base URL, with this bearer
    /// token, in this shop (default: a shop of the run's own, which only a
    /// server run with `--insecure-no-auth` lets anyone use).
    pub target: Option<Target>,
    /// The shell command the `restart` fault runs.
    pub restart_cmd: Option<String>,
}

/// A `holdfast serve` the run does not start.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub token: Option<String>,
    pub shop: Option<ShopId>,
    /// The database the target runs on, for the report.
    pub backend: holdfast_core::Backend,
}

/// What a run recorded.
#[derive(Debug)]
pub struct Recorded {
    pub events: Vec<Event>,
    /// The store's own audit of the run's shop at the end (none against a
    /// target whose token is not an admin's).
    pub audit_ok: Option<bool>,
}

/// Runs the workload with faults for the given duration; [`check`] checks
/// what it recorded.
pub async fn run(opts: &VerifyOptions) -> Result<Recorded, Error> {
    let run_id = format!("{:x}", rand::random::<u32>());
    let shop = match opts.target.as_ref().and_then(|t| t.shop.clone()) {
        Some(s) => s,
        None => ShopId::new(format!("verify-{run_id}"))?,
    };
    if opts.faults.contains(&Fault::Restart) && opts.restart_cmd.is_none() {
        return Err(Invalid::new("faults", "the restart fault runs --restart-cmd: give one").into());
    }
    if let Some(t) = &opts.target {
        if opts.serve || opts.mode.is_some() {
            return Err(Invalid::new("target", "a target is a running serve: not with --serve or --mode").into());
        }
        if opts.faults.iter().any(|f| *f != Fault::Restart) {
            return Err(Invalid::new("faults", "against a target only the restart fault applies").into());
        }
        let http = Arc::new(serve::HttpStore::new(&t.url, t.backend, t.token.clone()));
        let rec = record(opts, http.clone(), &shop, false, Targets { proxy: None, served: None, redis: None }).await?;
        let audit_ok = http.audit_over_http(&shop).await?;
        return Ok(Recorded { events: rec.events(), audit_ok });
    }
    if !opts.database_url.starts_with("sqlite:") {
        crate::bench::ensure_database(&opts.database_url).await?;
    }
    if opts.faults.contains(&Fault::Kill) && !opts.serve {
        return Err(Invalid::new("faults", "kill ends a holdfast serve process: run with --serve").into());
    }
    if opts.mode.is_some() && !opts.serve {
        return Err(Invalid::new("mode", "migration modes run in holdfast serve: run with --serve").into());
    }
    if opts.faults.contains(&Fault::Redis) && opts.mode.is_none() {
        return Err(Invalid::new("faults", "the redis fault needs a shop on Redis: run with --mode").into());
    }
    // Redis behind a proxy of its own, which the `redis` fault breaks.
    let redis = match &opts.mode {
        Some((mode, url)) => {
            let up = upstream_of(url).ok_or_else(|| Invalid::new("redis_url", "not a redis:// URL"))?;
            let proxy =
                LatencyProxy::start(up, Duration::ZERO).map_err(|e| Error::Unavailable(format!("fault proxy: {e}")))?;
            Some((*mode, proxy.rewrite(url), proxy))
        }
        None => None,
    };
    let network = opts.faults.iter().any(|f| f.on_network());
    let proxy = match (!network, upstream_of(&opts.database_url)) {
        (true, _) => None,
        (false, Some(up)) => {
            Some(LatencyProxy::start(up, Duration::ZERO).map_err(|e| Error::Unavailable(format!("fault proxy: {e}")))?)
        }
        (false, None) => {
            return Err(Invalid::new("faults", "network faults need a PostgreSQL or MySQL/MariaDB URL").into());
        }
    };
    let url = proxy.as_ref().map(|p| p.rewrite(&opts.database_url)).unwrap_or_else(|| opts.database_url.clone());
    let mut connect = ConnectOptions::new(url);
    connect.store = opts.store.clone();
    connect.max_connections = 16;
    connect.acquire_timeout = Duration::from_secs(2);
    let direct: Arc<dyn Store> = holdfast_sql::connect(&connect).await?;
    direct.migrate().await?;
    let served = if opts.serve {
        let redis = redis.as_ref().map(|(_, url, _)| (url.as_str(), format!("hfverify{run_id}:")));
        Some(serve::Served::start(&connect.url, opts.store.coalesce, redis).await?)
    } else {
        None
    };
    if let (Some((mode, _, _)), Some(s)) = (&redis, &served) {
        s.set_mode(&shop, *mode).await?;
    }
    let store: Arc<dyn Store> = match &served {
        Some(s) => Arc::new(serve::HttpStore::new(&s.base, direct.backend(), None)),
        None => direct.clone(),
    };
    let at = Targets { proxy: proxy.as_ref(), served: served.as_ref(), redis: redis.as_ref().map(|r| &r.2) };
    let rec = record(opts, store, &shop, !opts.serve, at).await?;
    if let Some(s) = &served {
        s.stop().await;
    }
    let audit_ok = direct.audit(Some(&shop)).await?.ok();
    Ok(Recorded { events: rec.events(), audit_ok: Some(audit_ok) })
}

/// The workload on `store` in `shop`, with faults on `at`, and the closing
/// reads. `sweep`: run the expiry sweeper here (a `serve` runs its own).
async fn record(
    opts: &VerifyOptions,
    store: Arc<dyn Store>,
    shop: &ShopId,
    sweep: bool,
    at: Targets<'_>,
) -> Result<Arc<Recorder>, Error> {
    let w = Arc::new(Workload {
        shop: shop.clone(),
        clients: opts.clients,
        families: 4,
        items_per_family: 2,
        locations: 3,
        timeout: Duration::from_secs(3),
        ttl: opts.ttl,
        stock: (4, 12),
        seed: opts.seed,
    });
    let rec = Arc::new(Recorder::new());
    workload::session(&[store], &w, &rec, opts.duration, sweep, |deadline| {
        let rec = rec.clone();
        async move { if opts.faults.is_empty() { Ok(()) } else { inject(at, opts, &rec, deadline).await } }
    })
    .await?;
    Ok(rec)
}

/// Checks a history on a blocking thread.
pub async fn check(events: Vec<Event>) -> Result<check::Report, Error> {
    tokio::task::spawn_blocking(move || check::check(&events))
        .await
        .map_err(|e| Error::Internal(format!("checker: {e}")))
}

/// What faults act on: the proxy in front of the database, the `serve` child.
struct Targets<'a> {
    proxy: Option<&'a LatencyProxy>,
    served: Option<&'a serve::Served>,
    redis: Option<&'a LatencyProxy>,
}

/// Injects a fault every `every` seconds until `deadline`.
async fn inject(
    at: Targets<'_>,
    opts: &VerifyOptions,
    rec: &Recorder,
    deadline: tokio::time::Instant,
) -> Result<(), Error> {
    let (faults, every) = (&opts.faults, opts.fault_every);
    let mut rng = StdRng::seed_from_u64(opts.seed ^ 0xfa17);
    loop {
        let wait = Duration::from_secs_f64(rng.gen_range(every.0..=every.1.max(every.0)));
        if tokio::time::Instant::now() + wait >= deadline {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        }
        tokio::time::sleep(wait).await;
        let fault = *faults.choose(&mut rng).expect("at least one fault");
        let hold = Duration::from_millis(rng.gen_range(500..=3000));
        if let (Fault::Kill, Some(served)) = (fault, at.served) {
            rec.fault("kill: holdfast serve got SIGKILL");
            match served.kill_and_restart().await {
                Ok(()) => rec.fault("holdfast serve is back"),
                Err(e) => rec.fault(format!("holdfast serve did not come back: {e}")),
            }
            continue;
        }
        if let (Fault::Redis, Some(redis)) = (fault, at.redis) {
            outage(redis, hold, rec, "redis").await;
            continue;
        }
        if let (Fault::Restart, Some(cmd)) = (fault, &opts.restart_cmd) {
            restart(cmd, rec).await?;
            continue;
        }
        let Some(proxy) = at.proxy else { continue };
        match fault {
            Fault::Kill | Fault::Redis | Fault::Restart => {}
            Fault::Cut => {
                rec.fault("cut: every database connection closed");
                proxy.cut();
            }
            Fault::Outage => {
                outage(proxy, hold, rec, "outage").await;
            }
            Fault::Stall => {
                rec.fault(format!("stall: traffic held back for {} ms", hold.as_millis()));
                proxy.stall(true);
                tokio::time::sleep(hold).await;
                proxy.stall(false);
                rec.fault("stall over");
            }
        }
    }
}

/// Closes every connection through `proxy` and refuses new ones for `hold`:
/// a server stopped and started again, as its clients see it.
async fn outage(proxy: &LatencyProxy, hold: Duration, rec: &Recorder, what: &str) {
    rec.fault(format!("{what}: connections closed, new ones refused for {} ms", hold.as_millis()));
    proxy.refuse(true);
    proxy.cut();
    tokio::time::sleep(hold).await;
    proxy.refuse(false);
    rec.fault(format!("{what} over"));
}

/// Runs the operator's restart command (`sh -c`) and records it; the
/// workload runs on meanwhile, as it would through a real restart.
/// A command that fails ends the run: the fault it promised did not happen.
async fn restart(cmd: &str, rec: &Recorder) -> Result<(), Error> {
    rec.fault(format!("restart: {cmd}"));
    let out = tokio::process::Command::new("sh").arg("-c").arg(cmd).stdin(std::process::Stdio::null()).output().await;
    match out {
        Ok(o) if o.status.success() => {
            rec.fault("restart done");
            Ok(())
        }
        Ok(o) => Err(Error::Internal(format!(
            "the restart command failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Err(e) => Err(Error::Internal(format!("the restart command did not run: {e}"))),
    }
}
