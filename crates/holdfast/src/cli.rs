//! Command-line arguments. Every command takes `--database-url` (env
//! `HOLDFAST_DATABASE_URL`; default: the embedded SQLite file) and `--json`
//! where it prints results.

use clap::{Args, Parser, Subcommand};
use holdfast_bench::verify::Fault;
use holdfast_core::{Invalid, ItemId, Line, LocationId, Quantity, ReservationId, ShopId};

#[derive(Debug, Parser)]
#[command(name = "holdfast", version, about = "Oversell protection for e-commerce checkout")]
pub struct Cli {
    #[command(flatten)]
    pub db: DbArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// postgres://…, mysql://… or sqlite://FILE. Default: the per-user SQLite file.
    #[arg(long, global = true, env = "HOLDFAST_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// A file holding the database URL (a mounted secret), instead of --database-url.
    #[arg(
        long,
        global = true,
        env = "HOLDFAST_DATABASE_URL_FILE",
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<std::path::PathBuf>,
    /// A pods file: shops spread over several PostgreSQL and MySQL/MariaDB
    /// databases (README, "Scaling out"), instead of --database-url.
    #[arg(
        long,
        global = true,
        env = "HOLDFAST_PODS",
        value_name = "FILE.toml",
        conflicts_with_all = ["database_url", "database_url_file"]
    )]
    pub pods: Option<std::path::PathBuf>,
    /// Seconds a database connection is used before it is replaced (0: for
    /// ever) [default: 1800]. Lower it (300) behind a DNS name that moves on failover.
    #[arg(long, global = true, env = "HOLDFAST_DB_MAX_LIFETIME", value_name = "SECS")]
    pub db_max_lifetime: Option<u64>,
    /// Seconds an idle database connection is kept (0: for ever) [default: 600].
    #[arg(long, global = true, env = "HOLDFAST_DB_IDLE_TIMEOUT", value_name = "SECS")]
    pub db_idle_timeout: Option<u64>,
    /// Unit rows kept per (shop, item, location) in the pool.
    #[arg(long, global = true, env = "HOLDFAST_POOL_CAP", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub pool_cap: u32,
    /// Name the business process in every SQL statement this command sends
    /// (`/* conn_tag:NAME */`); [a-z0-9_]{1,64}.
    #[arg(long, global = true, env = "HOLDFAST_CONN_TAG")]
    pub conn_tag: Option<holdfast_core::ConnTag>,
    /// Most database connections.
    #[arg(long, global = true, env = "HOLDFAST_MAX_CONNECTIONS", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_connections: u32,
    /// Turn request coalescing off: every reserve, claim and release goes to
    /// the database alone (env HOLDFAST_COALESCE=off).
    #[arg(long, global = true)]
    pub no_coalesce: bool,
    /// Request coalescing, on or off (the environment's way to say
    /// --no-coalesce).
    #[arg(long, global = true, env = "HOLDFAST_COALESCE", value_name = "on|off", hide = true, value_parser = on_off)]
    pub coalesce: Option<bool>,
    /// Most requests in one coalesced batch [default: 64].
    #[arg(long, global = true, env = "HOLDFAST_COALESCE_MAX_BATCH", value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub coalesce_max_batch: Option<u32>,
}

impl DbArgs {
    /// Reads `--database-url-file` into `database_url`.
    pub fn resolve_files(&mut self) -> Result<(), holdfast_core::Error> {
        if let Some(path) = &self.database_url_file {
            self.database_url = Some(holdfast_sql::read_url_file(path, "database_url_file")?);
        }
        Ok(())
    }

    /// `(max_lifetime, idle_timeout)` for the pool: the defaults, or what the
    /// flags say (0: never).
    pub fn lifetimes(&self) -> (Option<std::time::Duration>, Option<std::time::Duration>) {
        let pick = |flag: Option<u64>, default| match flag {
            None => Some(default),
            Some(0) => None,
            Some(s) => Some(std::time::Duration::from_secs(s)),
        };
        (
            pick(self.db_max_lifetime, holdfast_sql::DEFAULT_MAX_LIFETIME),
            pick(self.db_idle_timeout, holdfast_sql::DEFAULT_IDLE_TIMEOUT),
        )
    }

    /// Whether coalescing was set on the command line or in the
    /// environment (`None`: the default, or `serve`'s configuration file).
    pub fn coalescing(&self) -> Option<bool> {
        if self.no_coalesce { Some(false) } else { self.coalesce }
    }

    /// The store's settings these flags give.
    pub fn store_config(&self) -> holdfast_sql::StoreConfig {
        let d = holdfast_sql::StoreConfig::default();
        holdfast_sql::StoreConfig {
            pool_cap: self.pool_cap,
            coalesce: self.coalescing().unwrap_or(d.coalesce),
            coalesce_max_batch: self.coalesce_max_batch.unwrap_or(d.coalesce_max_batch),
            ..d
        }
    }
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: say on or off")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the schema (idempotent).
    Migrate,
    /// Set, adjust or fulfil the stock of an item at a location.
    #[command(subcommand)]
    Stock(StockCommand),
    /// Hold units for a checkout.
    Reserve(ReserveArgs),
    /// Payment succeeded: the held units become committed.
    Claim(IdArgs),
    /// Payment failed: the held units go back to stock.
    Release(IdArgs),
    /// Move the expiry of a live hold.
    Extend(ExtendArgs),
    /// Show a reservation.
    Get(IdArgs),
    /// One sweep: release holds past their expiry.
    Expire(ExpireArgs),
    /// Quantities of an item per location.
    Levels(LevelsArgs),
    /// Check the accounting invariant; exit 1 on a breach.
    Audit(AuditArgs),
    /// Run a flash sale on a throw-away database and show that no unit is
    /// sold twice or left unsold.
    Demo(DemoArgs),
    /// Run the HTTP service (the /v1 API, metrics, the expiry sweeper).
    Serve(holdfast_server::cli::ServeArgs),
    /// Create, list or revoke API tokens.
    #[command(subcommand)]
    Token(holdfast_server::cli::TokenCommand),
    /// Measure: flash sales against holdfast and its baselines.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Who holds a running service's database connections, per conn tag
    /// (GET /admin/connections; needs an admin token).
    ConnReport(holdfast_server::cli::ConnReportArgs),
    /// Migration from Redis: modes per shop, rollout, kill switch, reconcile.
    Mode(holdfast_redis::cli::ModeArgs),
    /// Webhook subscriptions of a shop: add, list, remove.
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// The webhook deliveries of a shop: list them, send a dead one again.
    #[command(subcommand)]
    Events(EventsCommand),
    /// Deliver webhooks without the HTTP service.
    Worker(holdfast_server::cli::WorkerArgs),
    /// The pods of --pods: which database each shop lives in.
    #[command(subcommand)]
    Pod(PodCommand),
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Subscribe a URL to a shop's events; prints the subscription and its
    /// secret (shown this once).
    Add {
        #[arg(long)]
        shop: ShopId,
        /// Where deliveries are POSTed (http:// or https://).
        #[arg(long)]
        url: String,
        /// A topic to send (repeat for more; default: every topic):
        /// reservation.held, reservation.claimed, reservation.released,
        /// reservation.expired, inventory.sold_out, inventory.restocked.
        #[arg(long = "topic", value_name = "TOPIC")]
        topics: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// The shop's subscriptions, oldest first (no secrets).
    List {
        #[arg(long)]
        shop: ShopId,
        #[arg(long)]
        json: bool,
    },
    /// Remove a subscription; its deliveries not yet made are dropped.
    Remove {
        #[arg(long)]
        shop: ShopId,
        /// The subscription's id (`wh_…`).
        id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// Each pod: name, backend, whether it answers, schema version, the
    /// shops the pods file maps to it.
    List {
        #[arg(long)]
        json: bool,
    },
    /// The pod a shop lives in.
    Of {
        #[arg(long)]
        shop: ShopId,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// The shop's deliveries, newest first.
    List {
        #[arg(long)]
        shop: ShopId,
        /// Only pending, delivered or dead ones.
        #[arg(long)]
        status: Option<holdfast_core::DeliveryStatus>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// Send a dead delivery again: back to pending, due now.
    Retry {
        #[arg(long)]
        shop: ShopId,
        /// The delivery's id, as `events list` shows it.
        id: i64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StockCommand {
    /// Set on_hand.
    Set {
        #[command(flatten)]
        at: StockAt,
        #[arg(long, allow_hyphen_values = true)]
        on_hand: i64,
    },
    /// Add a delta (negative to remove) to on_hand.
    Adjust {
        #[command(flatten)]
        at: StockAt,
        #[arg(long, allow_hyphen_values = true)]
        delta: i64,
    },
    /// Ship committed units: on_hand and committed both fall.
    Fulfil {
        #[command(flatten)]
        at: StockAt,
        #[arg(long, allow_hyphen_values = true)]
        quantity: i64,
    },
}

#[derive(Debug, Args)]
pub struct StockAt {
    #[arg(long)]
    pub shop: ShopId,
    #[arg(long)]
    pub item: ItemId,
    #[arg(long)]
    pub location: LocationId,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReserveArgs {
    #[arg(long)]
    pub shop: ShopId,
    /// Idempotency key, unique per shop (e.g. the checkout token).
    #[arg(long)]
    pub key: String,
    /// ITEM:QTY or ITEM:QTY@LOC[,LOC…] (candidate locations in order); repeat for more lines.
    #[arg(long = "line", required = true, value_parser = parse_line)]
    pub lines: Vec<Line>,
    /// Seconds the hold lives (1…86400).
    #[arg(long, default_value_t = 600, allow_hyphen_values = true)]
    pub ttl: i64,
    /// Hold what there is instead of nothing.
    #[arg(long)]
    pub allow_partial: bool,
    /// Fill a line from several locations.
    #[arg(long)]
    pub allow_split: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    #[arg(long)]
    pub shop: ShopId,
    pub id: ReservationId,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    pub target: IdArgs,
    #[arg(long, allow_hyphen_values = true)]
    pub ttl: i64,
}

#[derive(Debug, Args)]
pub struct ExpireArgs {
    /// Most holds released by this sweep.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limit: u32,
    /// Also remove every finished reservation (claimed, released, expired)
    /// older than SECONDS, with its lines, in transactions of --limit each.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub retention: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LevelsArgs {
    #[arg(long)]
    pub shop: ShopId,
    #[arg(long)]
    pub item: ItemId,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this shop (default: every shop).
    #[arg(long)]
    pub shop: Option<ShopId>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Units on sale.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub stock: u32,
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub buyers: u32,
    /// Buyers in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Units per cart.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub cart_size: u32,
    /// Share of holds that pay (the rest release).
    #[arg(long, default_value_t = 0.8)]
    pub claim_ratio: f64,
    #[arg(long)]
    pub json: bool,
}

/// `ITEM:QTY[@LOC[,LOC…]]`.
pub fn parse_line(s: &str) -> Result<Line, String> {
    let (item_qty, locs) = match s.split_once('@') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let (item, qty) = item_qty.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected ITEM:QTY[@LOC[,LOC…]]"))?;
    let item = ItemId::new(item).map_err(|e: Invalid| e.to_string())?;
    let qty: i64 = qty.parse().map_err(|_| format!("{s:?}: quantity {qty:?} is not a whole number"))?;
    let quantity = Quantity::new(qty).map_err(|e| e.to_string())?;
    let locations = locs
        .map(|l| l.split(',').map(LocationId::new).collect::<Result<Vec<_>, _>>())
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(Line { item, quantity, locations })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse() {
        let l = parse_line("sku-1:3@wh1,wh2").unwrap();
        assert_eq!((l.item.as_str(), l.quantity.get()), ("sku-1", 3));
        assert_eq!(l.locations.unwrap().len(), 2);
        assert!(parse_line("sku").is_err());
        assert!(parse_line("sku:0").is_err());
        assert!(parse_line("sku:x").is_err());
        assert!(parse_line("sku:1@").is_err());
    }

    #[test]
    fn faults_parse_into_the_verifier_s_faults_or_none() {
        let faults = |args: &[&str]| {
            let argv = [&["holdfast", "bench", "verify"], args].concat();
            match Cli::try_parse_from(argv).expect("the flags parse").command {
                Command::Bench(BenchCommand::Verify(v)) => v.faults,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(faults(&[]), [Some(Fault::Cut), Some(Fault::Outage), Some(Fault::Stall)]);
        assert_eq!(faults(&["--faults", "none"]), [None]);
        assert_eq!(
            faults(&["--faults", "kill,redis,restart,none"]),
            [Some(Fault::Kill), Some(Fault::Redis), Some(Fault::Restart), None]
        );
        assert!(Cli::try_parse_from(["holdfast", "bench", "verify", "--faults", "Cut"]).is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// One flash sale against one backend, with throughput, latency
    /// percentiles, oversold/undersold and retries.
    FlashSale(FlashSaleArgs),
    /// Every backend at several concurrencies and latencies, several runs
    /// each; medians into BENCHMARKS.md and plots into docs/bench/.
    Matrix(MatrixArgs),
    /// Record a checkout workload's history while faults are injected, then
    /// check every answer against the inventory model (linearizability).
    /// Exits 1 on a violation.
    Verify(VerifyArgs),
    /// A shop in business: a mixed checkout load (carts with candidate
    /// locations, split and partial, short holds, claims, releases, extends,
    /// stock changes, reads) on a few items that sell out and come back;
    /// requests/s and latency per operation, errors by code, and a check of
    /// every answer. Exits 1 if an answer was wrong.
    Churn(ChurnArgs),
}

#[derive(Debug, Args)]
pub struct ChurnArgs {
    /// holdfast on sqlite|postgres|mysql, on the database --database-url
    /// names (default: a holdfast_bench database on the local server, or a
    /// throw-away SQLite file). Not with --target. [default: postgres]
    #[arg(long, value_enum, conflicts_with = "target")]
    pub backend: Option<holdfast_bench::bench::BenchBackend>,
    /// Seconds the load runs.
    #[arg(long, default_value_t = 15.0)]
    pub duration: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Items on sale (one cart may hold two of them).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=100))]
    pub items: u32,
    /// Locations per item.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=26))]
    pub locations: u32,
    /// Units each (item, location) starts with: MIN,MAX.
    #[arg(long, value_delimiter = ',', default_values_t = [15, 60])]
    pub stock: Vec<u32>,
    /// Drive running `holdfast serve` replicas instead: URL[,URL…], clients
    /// spread over them round-robin.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub target: Vec<String>,
    /// Bearer token for --target (an admin's also runs the audit).
    #[arg(long, env = "HOLDFAST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// With --target: the shop to run in (default: one of the run's own,
    /// which needs `serve --insecure-no-auth`).
    #[arg(long)]
    pub shop: Option<holdfast_core::ShopId>,
    /// Seed of the load's random choices.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also check every recorded answer for linearizability (as `bench
    /// verify` does); on this shape the search may give no verdict.
    #[arg(long)]
    pub check: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// holdfast on sqlite|postgres|mysql, on the database --database-url
    /// names (default: a holdfast_bench database on the local server, or a
    /// throw-away SQLite file). [default: postgres]
    #[arg(long, value_enum, default_value = "postgres")]
    pub backend: holdfast_bench::bench::BenchBackend,
    /// Seconds the workload runs.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// Faults to inject: cut, outage and stall between the store and its
    /// database (PostgreSQL and MySQL/MariaDB), kill of the `serve` process
    /// (with --serve), redis (with --mode), restart (runs --restart-cmd);
    /// "none" for none.
    #[arg(long, value_delimiter = ',', default_value = "cut,outage,stall", value_parser = fault_or_none())]
    pub faults: Vec<Option<Fault>>,
    /// Seconds between faults: MIN,MAX.
    #[arg(long, value_delimiter = ',', default_values_t = [10.0, 30.0])]
    pub fault_every: Vec<f64>,
    /// Hold lifetimes in seconds: MIN,MAX (1 to 86400). Short ones expire
    /// during the run, so expiry is part of what is checked.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 3])]
    pub ttl: Vec<u32>,
    /// Seed of the workload's and the faults' random choices.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the history (JSON lines) to this file.
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// Check this recorded history instead of running a workload.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["history"])]
    pub check: Option<std::path::PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the workload against a `holdfast serve` child process over HTTP
    /// (started on a free local port), not the library.
    #[arg(long)]
    pub serve: bool,
    /// Serve the run's shop in this migration mode (shadow: Redis decides;
    /// sql-primary: SQL decides, Redis follows), with --serve.
    #[arg(long, value_enum, requires = "serve")]
    pub mode: Option<VerifyMode>,
    /// The Redis of --mode (reached through a proxy the redis fault breaks).
    #[arg(long, env = "HOLDFAST_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// Shell command the restart fault runs to restart the database server,
    /// e.g. "pg_ctlcluster 16 main restart -m immediate". A command that
    /// fails ends the run with an error.
    #[arg(long, value_name = "CMD")]
    pub restart_cmd: Option<String>,
    /// Drive a running `holdfast serve` at http://HOST:PORT instead (its
    /// database named by --backend, for the report). Only the restart fault
    /// applies; the audit is run when --token is an admin's.
    #[arg(long, value_name = "URL", conflicts_with_all = ["serve", "check"])]
    pub target: Option<String>,
    /// Bearer token for --target (none against `serve --insecure-no-auth`).
    #[arg(long, env = "HOLDFAST_TOKEN", hide_env_values = true, requires = "target")]
    pub token: Option<String>,
    /// With --target: the shop to run in, one the token reaches (default: a
    /// shop of the run's own, which needs `serve --insecure-no-auth`). Its
    /// items f0-item0 … f3-item1 at loc-a … loc-c are set and sold.
    #[arg(long, requires = "target")]
    pub shop: Option<holdfast_core::ShopId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyMode {
    Shadow,
    SqlPrimary,
}

/// `--faults`' values: `none` (parsed as `None`: no fault), then each
/// [`Fault`] by its value name. The names alone are listed, so that `--help`
/// keeps one line of possible values rather than a paragraph per fault.
fn fault_or_none() -> impl clap::builder::TypedValueParser<Value = Option<Fault>> {
    use clap::ValueEnum;
    use clap::builder::TypedValueParser;
    let faults = Fault::value_variants().iter().filter_map(|f| f.to_possible_value());
    let names =
        std::iter::once(clap::builder::PossibleValue::new("none")).chain(faults.map(|p| p.help(None::<&'static str>)));
    clap::builder::PossibleValuesParser::new(names)
        .map(|s: String| (s != "none").then(|| Fault::from_str(&s, false).expect("a possible value names a fault")))
}

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Backends to run (holdfast on sqlite|postgres|mysql; counter and ceiling
    /// run on both PostgreSQL and MySQL; redis is the legacy Redis store, its
    /// SQL ledger on a throw-away SQLite file).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sqlite,postgres,mysql,counter,ceiling,redis")]
    pub backends: Vec<holdfast_bench::bench::BenchBackend>,
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    pub concurrency: Vec<u32>,
    /// Added latencies in milliseconds.
    #[arg(long, value_delimiter = ',', default_value = "0,0.5")]
    pub db_latency: Vec<f64>,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// PostgreSQL server for holdfast, counter and ceiling.
    #[arg(long, default_value = holdfast_bench::bench::DEFAULT_POSTGRES_URL)]
    pub postgres_url: String,
    /// MySQL/MariaDB server for holdfast, counter and ceiling.
    #[arg(long, default_value = holdfast_bench::bench::DEFAULT_MYSQL_URL)]
    pub mysql_url: String,
    /// Redis for the redis backend (each run under a key prefix of its own,
    /// deleted after the run).
    #[arg(long, env = "HOLDFAST_REDIS_URL", default_value = holdfast_bench::bench::DEFAULT_REDIS_URL)]
    pub redis_url: String,
    /// Write the Markdown report (how it was produced, every cell's
    /// medians, the plots) to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<std::path::PathBuf>,
    /// Write the SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// Write every cell's medians (and each run's throughput) as JSON to this
    /// file: `{"flash_sale": [...], "mixed_load": [...]}`.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
    /// Pool sizes (`--max-connections`) of the mixed load (`bench churn`),
    /// run on PostgreSQL and MySQL when they are among --backends.
    #[arg(long, value_delimiter = ',', default_value = "8,32,64")]
    pub churn_connections: Vec<u32>,
    /// Clients of the mixed load.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub churn_clients: u32,
    /// Seconds per mixed-load run.
    #[arg(long, default_value_t = 15.0)]
    pub churn_duration: f64,
    /// Leave the mixed load out.
    #[arg(long)]
    pub no_churn: bool,
}

#[derive(Debug, Args)]
pub struct FlashSaleArgs {
    /// holdfast on sqlite|postgres|mysql; a baseline: counter (single-row
    /// UPDATE … WHERE available >= n) or ceiling (one durable INSERT per
    /// request), on the database --database-url names (default: a
    /// holdfast_bench database on the local PostgreSQL); or redis: the legacy
    /// Redis counter store at --redis-url, its SQL ledger (claims) on
    /// --database-url (default: a throw-away SQLite file). [default: postgres]
    #[arg(long, value_enum, conflicts_with = "target")]
    pub backend: Option<holdfast_bench::bench::BenchBackend>,
    /// Redis for --backend redis. Each run uses a key prefix of its own
    /// (hfbench:RUN:) and deletes its keys afterwards.
    #[arg(long, env = "HOLDFAST_REDIS_URL", default_value = holdfast_bench::bench::DEFAULT_REDIS_URL)]
    pub redis_url: String,
    /// Drive a running `holdfast serve` over HTTP instead of the library:
    /// http://HOST:PORT, or https:// for a serve with --tls-cert (trusted
    /// through the system's roots or SSL_CERT_FILE). --database-url, --pool-cap and
    /// --db-latency do not apply: the server has its own.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Bearer token for --target. It must reach the shop the sale runs in
    /// (see --shop); an admin token also gives the audit and the connection
    /// report. None is needed against `serve --insecure-no-auth`.
    #[arg(long, env = "HOLDFAST_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// With --target: the shop to sell in (one the token reaches); the item is
    /// the run's own. Default: a shop of the run's own, which only a server
    /// started with --insecure-no-auth lets a caller use.
    #[arg(long, requires = "target")]
    pub shop: Option<holdfast_core::ShopId>,
    /// Units on sale.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000))]
    pub stock: u32,
    /// Most buyers (default: as many as come before --duration ends).
    #[arg(long)]
    pub buyers: Option<u64>,
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub cart_size: u32,
    /// Share of holds that pay; the rest release.
    #[arg(long, default_value_t = 1.0)]
    pub claim_ratio: f64,
    /// Leave holds open (no claim, no release): a pure reserve load.
    #[arg(long)]
    pub hold_only: bool,
    /// Seconds the sale lasts (default 10 unless --buyers is given).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open loop: buyers arrive at this many per second; latency counts from
    /// the intended arrival.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Milliseconds added to every read in each direction between client and
    /// database (a latency proxy inside the bench); for --backend redis in
    /// front of Redis and of a network ledger. Not with --target.
    #[arg(long, default_value_t = 0.0)]
    pub db_latency: f64,
    /// Write the report as JSON to this file ("-" for stdout).
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Draw the run's reserve latency distribution (p0 to p99.99, log scale)
    /// with the headline figures into this SVG file (and, with --interval,
    /// throughput, p99 and table size over time into FILE-intervals.svg).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Report throughput, p99, the size of holdfast's tables and (MySQL/
    /// MariaDB) the purge backlog for every interval of SECONDS.
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<f64>,
    /// Library targets: run the sweeper beside the sale, releasing expired
    /// holds and removing finished reservations older than SECONDS, as
    /// `serve --retention` does (0: the sweeper runs, keeping everything).
    #[arg(long, value_name = "SECONDS", conflicts_with = "target")]
    pub retention: Option<u64>,
    /// Library targets: subscribe the run's shop to every event at a
    /// receiver in this process and deliver with N workers beside the sale
    /// (0: the events are written and left pending, to measure writing them
    /// alone); the report gains `webhooks` (delivered, pending,
    /// drain_seconds, deliveries_per_second).
    #[arg(long, value_name = "N", conflicts_with = "target")]
    pub webhooks: Option<u32>,
    /// With `--webhooks`: subscribe to this topic only (repeat for more;
    /// default: every topic).
    #[arg(long = "webhook-topic", value_name = "TOPIC", requires = "webhooks")]
    pub webhook_topics: Vec<holdfast_core::Topic>,
}
