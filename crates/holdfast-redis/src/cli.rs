//! `holdfast mode …`: the command body, so that the binary only composes.
//! Every subcommand writes to the database the serving processes poll, so a
//! change reaches all of them within a second, without a restart.

use holdfast_core::{Error, ShopId};

use holdfast_core::Mode;

use crate::modes::{KillSwitch, ModeChange, ModeControl};
use crate::reconcile::{Direction, reconcile};
use crate::store::{RedisOptions, RedisStore};

#[derive(Debug, clap::Args)]
pub struct ModeArgs {
    /// The legacy Redis (reconcile only).
    #[arg(
        long,
        global = true,
        env = "HOLDFAST_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,
    /// A file holding the Redis URL (a mounted secret), instead of --redis-url.
    #[arg(long, global = true, env = "HOLDFAST_REDIS_URL_FILE", value_name = "FILE")]
    pub redis_url_file: Option<std::path::PathBuf>,
    /// Prefix of every key holdfast keeps in Redis.
    #[arg(long, global = true, env = "HOLDFAST_REDIS_PREFIX", default_value = "hf:")]
    pub redis_prefix: String,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: ModeCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ModeCommand {
    /// The rules, the kill switch, and the mode each named shop is served in.
    Show {
        #[arg(long = "shop")]
        shops: Vec<ShopId>,
    },
    /// Pin a shop to a mode (redis, shadow, sql-primary, sql), or `auto` to
    /// let the rollout percentages decide.
    Set {
        #[arg(long)]
        shop: ShopId,
        mode: String,
    },
    /// Put PERCENT of all shops (by a stable hash of shop_id) at MODE or later.
    Rollout {
        mode: Mode,
        #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
        percent: u8,
        /// With --pods: of this pod's shops only (a rollout pod by pod).
        #[arg(long)]
        pod: Option<String>,
    },
    /// `on`: every sql-primary shop is served by Redis again (as shadow).
    KillSwitch {
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Make Redis and SQL equal for a shop (default: Redis from SQL).
    Reconcile {
        #[arg(long)]
        shop: ShopId,
        #[arg(long, value_enum, default_value_t = Direction::FromSql)]
        from: Direction,
    },
}

fn print<T: serde::Serialize>(json: bool, value: &T, text: impl FnOnce() -> String) {
    if json {
        println!("{}", serde_json::to_string_pretty(value).expect("serialisable"));
    } else {
        println!("{}", text());
    }
}

/// Runs one `holdfast mode` command against the database `db`.
pub async fn run(args: ModeArgs, db: &holdfast_sql::Database) -> Result<(), Error> {
    let json = args.json;
    let control = || ModeControl::load(db.modes.clone());
    match args.command {
        ModeCommand::Show { shops } => {
            let view = control().await?.view(&shops);
            print(json, &view, || {
                let r = &view.rules;
                let mut out = format!("kill switch: {}\n", if r.kill_switch { "ON" } else { "off" });
                for m in [Mode::Shadow, Mode::SqlPrimary, Mode::Sql] {
                    out += &format!("rollout {m}: {}% of shops at {m} or later\n", r.rollout.get(&m).unwrap_or(&0));
                }
                for (s, m) in &r.shops {
                    out += &format!("pinned {s}: {m}\n");
                }
                for (s, m) in &view.resolved {
                    out += &format!("shop {s} is served in: {m}\n");
                }
                out.trim_end().to_owned()
            });
        }
        ModeCommand::Set { shop, mode } => {
            let mode = if mode == "auto" { None } else { Some(mode.parse::<Mode>()?) };
            let view = control().await?.apply(&ModeChange::Shop { shop: shop.clone(), mode }).await?;
            print(json, &view, || format!("shop {shop} is now served in: {}", view.resolved[&shop]));
        }
        ModeCommand::Rollout { mode, percent, pod } => {
            let view = control().await?.apply(&ModeChange::Rollout { mode, percent, pod }).await?;
            print(json, &view, || format!("{percent}% of shops are now at {mode} or later"));
        }
        // The emergency stop needs no rules read first: with pods, it is
        // written to every pod that answers even while another is down (and
        // the pods it missed are named in the error).
        ModeCommand::KillSwitch { state } => {
            let engaged = state == "on";
            db.modes.set_kill_switch(engaged).await?;
            print(json, &KillSwitch { engaged }, || {
                if engaged {
                    "kill switch ON: sql-primary shops are served by Redis (as shadow) within a second".into()
                } else {
                    "kill switch off: sql-primary shops are served by SQL again within a second".into()
                }
            });
        }
        ModeCommand::Reconcile { shop, from } => {
            let url = match &args.redis_url_file {
                Some(path) => holdfast_sql::read_url_file(path, "redis_url_file")?,
                None => args.redis_url,
            };
            let mut opts = RedisOptions::new(url);
            opts.prefix = args.redis_prefix;
            let redis = RedisStore::new(opts, db.legacy.clone())?;
            redis.ping().await?;
            let report = reconcile(&*db.store, &redis, &*db.legacy, &shop, from).await?;
            print(json, &report, || {
                let mut out = format!("reconciled shop {shop} ({:?}): {} location(s)\n", from, report.rows.len());
                for r in &report.rows {
                    out += &format!("  {} @ {}: available {} -> {}\n", r.item, r.location, r.before, r.after);
                }
                out.trim_end().to_owned()
            });
        }
    }
    Ok(())
}
