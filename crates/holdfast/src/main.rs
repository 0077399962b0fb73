//! `holdfast`: the command-line interface. Composition only: parse, open the
//! store, call it, print.

mod bench;
mod cli;
mod output;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use holdfast_bench::flash_sale::{self, FlashSale};
use holdfast_bench::target::StoreTarget;
use holdfast_core::{Error, IdempotencyKey, ReserveRequest, ShopId, StockChange, StockRequest, Store, Ttl};
use holdfast_sql::ConnectOptions;
use serde_json::json;

use crate::cli::{Cli, Command, DbArgs, StockCommand};
use crate::output::Printer;

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if let Err(error) = cli.db.resolve_files() {
        Printer { json: false }.error(&error);
        return ExitCode::from(error.exit_code() as u8);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let outcome = runtime.block_on(async {
        match cli.db.conn_tag.clone() {
            Some(tag) => holdfast_sql::with_conn_tag(tag, run(cli)).await,
            None => run(cli).await,
        }
    });
    match outcome {
        Ok(code) => code,
        Err(Failure { error, json }) => {
            Printer { json }.error(&error);
            ExitCode::from(error.exit_code() as u8)
        }
    }
}

/// An error and how to print it.
pub(crate) struct Failure {
    error: Error,
    json: bool,
}

pub(crate) trait OrFail<T> {
    fn or_fail(self, json: bool) -> Result<T, Failure>;
}

impl<T, E: Into<Error>> OrFail<T> for Result<T, E> {
    fn or_fail(self, json: bool) -> Result<T, Failure> {
        self.map_err(|e| Failure { error: e.into(), json })
    }
}

/// Opens the store for `--database-url`. The embedded SQLite default is
/// created and migrated on first use; servers are migrated by `holdfast migrate`.
async fn open(db: &DbArgs, url: Option<String>) -> Result<Arc<dyn Store>, Error> {
    Ok(open_database(db, url).await?.store)
}

/// Like [`open`], with the token, mode and legacy tables of the same pool.
async fn open_database(db: &DbArgs, url: Option<String>) -> Result<holdfast_sql::Database, Error> {
    let pods = match (&url, &db.pods) {
        (None, Some(path)) => Some(holdfast_sql::PodsFile::read(path)?),
        _ => None,
    };
    let url = url.or_else(|| db.database_url.clone()).unwrap_or_else(holdfast_sql::default_database_url);
    let mut opts = ConnectOptions::new(&url);
    opts.max_connections = db.max_connections;
    (opts.max_lifetime, opts.idle_timeout) = db.lifetimes();
    opts.store = db.store_config();
    opts.pods = pods;
    let database = holdfast_sql::open(&opts).await?;
    if opts.pods.is_none() && url.starts_with("sqlite:") {
        database.store.migrate().await?;
    }
    Ok(database)
}

/// `holdfast webhook …`.
async fn webhook(db: &DbArgs, cmd: cli::WebhookCommand) -> Result<ExitCode, Failure> {
    use cli::WebhookCommand::*;
    match cmd {
        Add { shop, url, topics, json } => {
            let topics = holdfast_server::routes::webhooks::topics(&topics).or_fail(json)?;
            let hooks = open_database(db, None).await.or_fail(json)?.webhooks;
            let (sub, secret) =
                holdfast_server::webhooks::subscribe(&*hooks, &shop, &url, topics).await.or_fail(json)?;
            Printer { json }.subscribed(&sub, &secret);
        }
        List { shop, json } => {
            let hooks = open_database(db, None).await.or_fail(json)?.webhooks;
            Printer { json }.subscriptions(&hooks.list_subscriptions(&shop).await.or_fail(json)?);
        }
        Remove { shop, id, json } => {
            let hooks = open_database(db, None).await.or_fail(json)?.webhooks;
            if !hooks.remove_subscription(&shop, &id).await.or_fail(json)? {
                return Ok(Printer { json }.not_found(&format!("shop {shop} has no webhook subscription {id}")));
            }
            Printer { json }.done(&format!("removed webhook subscription {id}"), json!({ "removed": id }));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `holdfast events …`.
async fn events(db: &DbArgs, cmd: cli::EventsCommand) -> Result<ExitCode, Failure> {
    use cli::EventsCommand::*;
    match cmd {
        List { shop, status, limit, json } => {
            let hooks = open_database(db, None).await.or_fail(json)?.webhooks;
            Printer { json }.deliveries(&hooks.list_deliveries(&shop, status, limit).await.or_fail(json)?);
        }
        Retry { shop, id, json } => {
            let hooks = open_database(db, None).await.or_fail(json)?.webhooks;
            if !hooks.retry_delivery(&shop, id).await.or_fail(json)? {
                return Ok(Printer { json }.not_found(&format!("shop {shop} has no dead delivery {id}")));
            }
            Printer { json }.done(&format!("delivery {id} is pending again"), json!({ "retried": id }));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `holdfast pod …`.
async fn pod(db: &DbArgs, cmd: cli::PodCommand) -> Result<ExitCode, Failure> {
    let json = match &cmd {
        cli::PodCommand::List { json } | cli::PodCommand::Of { json, .. } => *json,
    };
    if db.pods.is_none() {
        let e = holdfast_core::Invalid::new("pods", "give --pods FILE.toml (or HOLDFAST_PODS)");
        return Err(Error::from(e)).or_fail(json);
    }
    let database = open_database(db, None).await.or_fail(json)?;
    match cmd {
        cli::PodCommand::Of { shop, json } => {
            let pod = database.pod_of(&shop).expect("opened from a pods file");
            Printer { json }.pod_of(&shop, &pod);
        }
        cli::PodCommand::List { json } => {
            let checks: Vec<_> = database
                .pods()
                .into_iter()
                .map(|pod| {
                    tokio::spawn(async move {
                        let look = pod.db.housekeeping.schema_version();
                        let version = tokio::time::timeout(std::time::Duration::from_secs(10), look)
                            .await
                            .unwrap_or_else(|_| Err(Error::Unavailable("no answer in 10 s".into())));
                        (pod, version)
                    })
                })
                .collect();
            let mut rows = Vec::new();
            for check in checks {
                rows.push(check.await.map_err(|e| Error::Internal(e.to_string())).or_fail(json)?);
            }
            let reachable = rows.iter().all(|(_, v)| v.is_ok());
            Printer { json }.pods(&rows);
            if !reachable {
                return Ok(ExitCode::from(5));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn db_flags(db: &DbArgs) -> holdfast_server::cli::DbFlags {
    holdfast_server::cli::DbFlags {
        database_url: db.database_url.clone(),
        pods: db.pods.clone(),
        max_connections: db.max_connections,
        pool_cap: db.pool_cap,
        coalesce: db.coalescing(),
        coalesce_max_batch: db.coalesce_max_batch,
        lifetimes: db.lifetimes(),
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    let db = cli.db;
    if db.pods.is_some() && matches!(cli.command, Command::Demo(_) | Command::Bench(_)) {
        let e = holdfast_core::Invalid::new("pods", "demo and bench run on one database: give --database-url instead");
        return Err(Error::from(e)).or_fail(false);
    }
    match cli.command {
        Command::Migrate => {
            let database = open_database(&db, None).await.or_fail(false)?;
            database.store.migrate().await.or_fail(false)?;
            if database.has_pods() {
                for pod in database.pods() {
                    println!("pod {}: schema is up to date ({})", pod.name, pod.db.store.backend().name());
                }
            } else {
                println!("schema is up to date ({})", database.store.backend().name());
            }
        }
        Command::Stock(cmd) => {
            let (at, change) = match cmd {
                StockCommand::Set { at, on_hand } => (at, StockChange::Set(on_hand)),
                StockCommand::Adjust { at, delta } => (at, StockChange::Adjust(delta)),
                StockCommand::Fulfil { at, quantity } => (at, StockChange::Fulfil(quantity)),
            };
            let json = at.json;
            let req = StockRequest::new(at.shop, at.item.clone(), at.location, change).or_fail(json)?;
            let store = open(&db, None).await.or_fail(json)?;
            let level = store.change_stock(&req).await.or_fail(json)?;
            Printer { json }.level(&at.item, &level);
        }
        Command::Reserve(a) => {
            let json = a.json;
            let key = IdempotencyKey::new(a.key).or_fail(json)?;
            let ttl = Ttl::from_secs(a.ttl).or_fail(json)?;
            let req = ReserveRequest::new(a.shop, key, a.lines, ttl, a.allow_partial, a.allow_split).or_fail(json)?;
            let store = open(&db, None).await.or_fail(json)?;
            let r = store.reserve(&req).await.or_fail(json)?;
            Printer { json }.reservation(&r.reservation, if r.created { "held" } else { "already held (replay)" });
        }
        Command::Claim(a) => {
            let store = open(&db, None).await.or_fail(a.json)?;
            let r = store.claim(&a.shop, a.id).await.or_fail(a.json)?;
            Printer { json: a.json }.reservation(&r, "claimed");
        }
        Command::Release(a) => {
            let store = open(&db, None).await.or_fail(a.json)?;
            let r = store.release(&a.shop, a.id).await.or_fail(a.json)?;
            Printer { json: a.json }.reservation(&r, &r.status.to_string());
        }
        Command::Extend(a) => {
            let json = a.target.json;
            let ttl = Ttl::from_secs(a.ttl).or_fail(json)?;
            let store = open(&db, None).await.or_fail(json)?;
            let r = store.extend(&a.target.shop, a.target.id, ttl).await.or_fail(json)?;
            Printer { json }.reservation(&r, "extended");
        }
        Command::Get(a) => {
            let store = open(&db, None).await.or_fail(a.json)?;
            let r = store.get(&a.shop, a.id).await.or_fail(a.json)?;
            Printer { json: a.json }.reservation(&r, &r.status.to_string());
        }
        Command::Expire(a) => {
            let store = open(&db, None).await.or_fail(a.json)?;
            let n = store.expire(a.limit).await.or_fail(a.json)?;
            let purged = match a.retention {
                None => None,
                Some(secs) => {
                    let retention = Some(std::time::Duration::from_secs(secs));
                    let sweeper = holdfast_sql::Sweeper::new(store.clone(), a.limit).with_retention(retention);
                    Some(sweeper.purge_all().await.or_fail(a.json)?)
                }
            };
            Printer { json: a.json }.expired(n, purged);
        }
        Command::Levels(a) => {
            let store = open(&db, None).await.or_fail(a.json)?;
            let levels = store.levels(&a.shop, &a.item).await.or_fail(a.json)?;
            Printer { json: a.json }.levels(&levels);
        }
        Command::Audit(a) => {
            let database = open_database(&db, None).await.or_fail(a.json)?;
            let report = database.store.audit(a.shop.as_ref()).await.or_fail(a.json)?;
            Printer { json: a.json }.audit(&report, |shop| database.pod_of(shop).map(|p| p.name));
            if !report.ok() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Demo(a) => return demo(&db, a).await,
        Command::Serve(a) => return Ok(holdfast_server::cli::serve(a, db_flags(&db)).await),
        Command::Token(cmd) => return Ok(holdfast_server::cli::token(cmd, db_flags(&db)).await),
        Command::ConnReport(a) => return Ok(holdfast_server::cli::conn_report(a).await),
        Command::Worker(a) => return Ok(holdfast_server::cli::worker(a, db_flags(&db)).await),
        Command::Webhook(cmd) => return webhook(&db, cmd).await,
        Command::Events(cmd) => return events(&db, cmd).await,
        Command::Pod(cmd) => return pod(&db, cmd).await,
        Command::Bench(cli::BenchCommand::FlashSale(a)) => return bench::flash_sale(&db, a).await,
        Command::Bench(cli::BenchCommand::Matrix(a)) => return bench::matrix(&db, a).await,
        Command::Bench(cli::BenchCommand::Verify(a)) => return bench::verify(&db, a).await,
        Command::Bench(cli::BenchCommand::Churn(a)) => return bench::churn(&db, a).await,
        Command::Mode(a) => {
            let json = a.json;
            let database = open_database(&db, None).await.or_fail(json)?;
            holdfast_redis::cli::run(a, &database).await.or_fail(json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The flash sale of `holdfast demo`: on a throw-away SQLite file unless
/// `--database-url` names a database, where it uses a shop of its own.
async fn demo(db: &DbArgs, a: cli::DemoArgs) -> Result<ExitCode, Failure> {
    let json = a.json;
    if !(0.0..=1.0).contains(&a.claim_ratio) {
        let e = holdfast_core::Invalid::new("claim_ratio", "must be between 0 and 1");
        return Err(Failure { error: e.into(), json });
    }
    let tmp = std::env::temp_dir().join(format!("holdfast-demo-{}", std::process::id()));
    let url = match &db.database_url {
        Some(u) => u.clone(),
        None => {
            std::fs::create_dir_all(&tmp)
                .map_err(|e| Error::Unavailable(format!("cannot create {}: {e}", tmp.display())))
                .or_fail(json)?;
            format!("sqlite://{}", tmp.join("demo.db").display())
        }
    };
    let store = open(db, Some(url.clone())).await.or_fail(json)?;
    if !url.starts_with("sqlite:") {
        store.migrate().await.or_fail(json)?;
    }
    let shop = ShopId::new(format!("demo-{}-{}", std::process::id(), chrono::Utc::now().timestamp())).or_fail(json)?;
    let backend = store.backend().name();
    let target = StoreTarget::new(store, shop);
    let sale = FlashSale {
        stock: a.stock,
        buyers: a.buyers as u64,
        duration: None,
        concurrency: a.concurrency,
        cart_size: a.cart_size,
        claim_ratio: a.claim_ratio,
        settle: true,
        rate: None,
        key_prefix: "demo".into(),
        progress: !json && std::io::stderr().is_terminal(),
        interval: None,
    };
    if !json {
        println!(
            "flash sale on {backend}: {} units of {}, {} buyers, {} at a time, {} per cart, {:.0}% pay",
            sale.stock,
            target.item,
            sale.buyers,
            sale.concurrency,
            sale.cart_size,
            sale.claim_ratio * 100.0
        );
    }
    let report = flash_sale::run(Arc::new(target), &sale).await.or_fail(json);
    let _ = std::fs::remove_dir_all(&tmp);
    let report = report?;
    Printer { json }.flash_sale(&report);
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
