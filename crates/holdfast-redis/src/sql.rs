//! The SQL this crate sends itself: the mode tables (rules and kill switch)
//! and the legacy ledger, both created by migration 0003 of each dialect.
//!
//! It opens a small pool of its own on the service's database rather than
//! reach into `holdfast-sql`'s engine: these statements are plain single-row
//! reads and writes with no part in the reservation engine's lock order, and
//! keeping them here leaves the engine untouched. The statements are written
//! once with `?` placeholders (MySQL and SQLite); PostgreSQL gets them
//! renumbered to `$n`. The few that differ by dialect (upserts, the clock,
//! booleans) are spelled out per dialect, never hidden behind a runtime `Any`
//! driver.

use std::str::FromStr;
use std::time::Duration;

use holdfast_core::{Error, Invalid, ItemId, LocationId, ShopId};
use sqlx::{MySqlPool, PgPool, SqlitePool};

use crate::modes::{Mode, Rules};

/// A connection pool on the service's database, by dialect.
#[derive(Debug, Clone)]
pub enum ControlDb {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

/// One row of the legacy ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    pub on_hand: i64,
    pub committed: i64,
}

/// Maps a driver error: a lost connection is `unavailable` (503), anything
/// else internal. Never carries SQL text to the caller.
pub(crate) fn db_error(what: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |e| match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::WorkerCrashed => {
            Error::Unavailable(format!("{what}: {e}"))
        }
        e => Error::Internal(format!("{what}: {e}")),
    }
}

/// `?` placeholders renumbered `$1, $2, …` for PostgreSQL.
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `T(col)` marks a text column read back: MySQL/MariaDB return the
/// `ascii_bin` columns as bytes, so there it becomes `CAST(col AS CHAR)`.
fn text_columns(sql: &str, cast: bool) -> String {
    let mut out = String::with_capacity(sql.len() + 32);
    let mut rest = sql;
    while let Some(i) = rest.find("T(") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let j = after.find(')').expect("T( closed");
        if cast {
            out.push_str(&format!("CAST({} AS CHAR)", &after[..j]));
        } else {
            out.push_str(&after[..j]);
        }
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    out
}

/// Runs `$body` with `$pool` bound to whichever pool this is and `$sql`
/// turned into that dialect's placeholders.
macro_rules! each {
    ($self:expr, |$pool:ident, $q:ident| $body:expr) => {
        match $self {
            ControlDb::Pg($pool) => {
                let $q = |s: &str| numbered(&text_columns(s, false));
                $body
            }
            ControlDb::My($pool) => {
                let $q = |s: &str| text_columns(s, true);
                $body
            }
            ControlDb::Lite($pool) => {
                let $q = |s: &str| text_columns(s, false);
                $body
            }
        }
    };
}

fn parse_name<T: FromStr<Err = Invalid>>(s: String, table: &str) -> Result<T, Error> {
    s.parse().map_err(|e| Error::Internal(format!("bad value in {table}: {e}")))
}

/// shop_modes rows, mode_rollout rows, the kill switch, as read.
type RawRules = (Vec<(String, String)>, Vec<(String, i32)>, bool);

impl ControlDb {
    /// Opens a pool of at most `max` connections on `url` (same schemes as
    /// `holdfast_sql::connect`).
    pub async fn connect(url: &str, max: u32) -> Result<Self, Error> {
        let scheme = url.split(':').next().unwrap_or_default();
        let timeout = Duration::from_secs(5);
        let unavailable = |e: sqlx::Error| Error::Unavailable(format!("cannot connect to the database: {e}"));
        Ok(match scheme {
            "postgres" | "postgresql" => ControlDb::Pg(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(timeout)
                    .connect(url)
                    .await
                    .map_err(unavailable)?,
            ),
            "mysql" | "mariadb" => {
                let url = match url.strip_prefix("mariadb:") {
                    Some(rest) => format!("mysql:{rest}"),
                    None => url.to_owned(),
                };
                ControlDb::My(
                    sqlx::mysql::MySqlPoolOptions::new()
                        .max_connections(max)
                        .acquire_timeout(timeout)
                        .connect(&url)
                        .await
                        .map_err(unavailable)?,
                )
            }
            "sqlite" => {
                // A second pool on the service's file: WAL lets these reads
                // run beside the store's writer; a write waits its turn.
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
                    .map_err(|e| Error::Invalid(Invalid::new("database_url", format!("bad SQLite URL: {e}"))))?
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(10));
                ControlDb::Lite(
                    sqlx::sqlite::SqlitePoolOptions::new()
                        .max_connections(1)
                        .acquire_timeout(timeout)
                        .connect_with(options)
                        .await
                        .map_err(unavailable)?,
                )
            }
            other => {
                return Err(Error::Invalid(Invalid::new(
                    "database_url",
                    format!("unsupported scheme {other:?}; use postgres://, mysql:// or sqlite://"),
                )));
            }
        })
    }

    // ---- modes -----------------------------------------------------------

    /// Every rule, read in one round trip per table (polled about every
    /// half second by each serving process).
    pub async fn load_rules(&self) -> Result<Rules, Error> {
        let err = db_error("reading the mode rules");
        let (shops, rollout, engaged): RawRules = each!(self, |pool, q| {
            let shops = sqlx::query_as(&q("SELECT T(shop_id), T(mode) FROM shop_modes ORDER BY shop_id"))
                .fetch_all(pool)
                .await
                .map_err(&err)?;
            let rollout =
                sqlx::query_as(&q("SELECT T(mode), percent FROM mode_rollout")).fetch_all(pool).await.map_err(&err)?;
            let (engaged,): (bool,) = sqlx::query_as(&q("SELECT engaged FROM kill_switch WHERE id = 1"))
                .fetch_one(pool)
                .await
                .map_err(&err)?;
            (shops, rollout, engaged)
        });
        let mut rules = Rules { kill_switch: engaged, ..Rules::default() };
        for (shop, mode) in shops {
            rules.shops.insert(parse_name(shop, "shop_modes")?, parse_mode(&mode)?);
        }
        for (mode, percent) in rollout {
            rules.rollout.insert(parse_mode(&mode)?, percent.clamp(0, 100) as u8);
        }
        Ok(rules)
    }

    /// Pins `shop` to `mode`, or (None) lets the rollout percentages decide.
    pub async fn set_shop_mode(&self, shop: &ShopId, mode: Option<Mode>) -> Result<(), Error> {
        let err = db_error("writing shop_modes");
        let Some(mode) = mode else {
            each!(self, |pool, q| sqlx::query(&q("DELETE FROM shop_modes WHERE shop_id = ?"))
                .bind(shop.as_str())
                .execute(pool)
                .await
                .map(|_| ())
                .map_err(&err)?);
            return Ok(());
        };
        let (pg, my, lite) = (
            "INSERT INTO shop_modes (shop_id, mode) VALUES ($1, $2)
             ON CONFLICT (shop_id) DO UPDATE SET mode = excluded.mode, updated_at = now()",
            "INSERT INTO shop_modes (shop_id, mode) VALUES (?, ?)
             ON DUPLICATE KEY UPDATE mode = VALUES(mode), updated_at = CURRENT_TIMESTAMP(6)",
            "INSERT INTO shop_modes (shop_id, mode) VALUES (?, ?)
             ON CONFLICT (shop_id) DO UPDATE SET mode = excluded.mode,
               updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        );
        match self {
            ControlDb::Pg(p) => sqlx::query(pg).bind(shop.as_str()).bind(mode.as_str()).execute(p).await.map(|_| ()),
            ControlDb::My(p) => sqlx::query(my).bind(shop.as_str()).bind(mode.as_str()).execute(p).await.map(|_| ()),
            ControlDb::Lite(p) => {
                sqlx::query(lite).bind(shop.as_str()).bind(mode.as_str()).execute(p).await.map(|_| ())
            }
        }
        .map_err(err)?;
        Ok(())
    }

    /// Sets the share of shops at `mode` or beyond (see [`Rules::mode_of`]).
    pub async fn set_rollout(&self, mode: Mode, percent: u8) -> Result<(), Error> {
        let err = db_error("writing mode_rollout");
        let (pg, my, lite) = (
            "INSERT INTO mode_rollout (mode, percent) VALUES ($1, $2)
             ON CONFLICT (mode) DO UPDATE SET percent = excluded.percent, updated_at = now()",
            "INSERT INTO mode_rollout (mode, percent) VALUES (?, ?)
             ON DUPLICATE KEY UPDATE percent = VALUES(percent), updated_at = CURRENT_TIMESTAMP(6)",
            "INSERT INTO mode_rollout (mode, percent) VALUES (?, ?)
             ON CONFLICT (mode) DO UPDATE SET percent = excluded.percent,
               updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        );
        let p = percent as i32;
        match self {
            ControlDb::Pg(pool) => sqlx::query(pg).bind(mode.as_str()).bind(p).execute(pool).await.map(|_| ()),
            ControlDb::My(pool) => sqlx::query(my).bind(mode.as_str()).bind(p).execute(pool).await.map(|_| ()),
            ControlDb::Lite(pool) => sqlx::query(lite).bind(mode.as_str()).bind(p).execute(pool).await.map(|_| ()),
        }
        .map_err(err)
    }

    pub async fn set_kill_switch(&self, engaged: bool) -> Result<(), Error> {
        let err = db_error("writing kill_switch");
        match self {
            ControlDb::Pg(p) => sqlx::query("UPDATE kill_switch SET engaged = $1, changed_at = now() WHERE id = 1")
                .bind(engaged)
                .execute(p)
                .await
                .map(|_| ()),
            ControlDb::My(p) => {
                sqlx::query("UPDATE kill_switch SET engaged = ?, changed_at = CURRENT_TIMESTAMP(6) WHERE id = 1")
                    .bind(engaged)
                    .execute(p)
                    .await
                    .map(|_| ())
            }
            ControlDb::Lite(p) => sqlx::query(
                "UPDATE kill_switch SET engaged = ?,
                   changed_at = CAST(unixepoch('subsec') * 1000 AS INTEGER) WHERE id = 1",
            )
            .bind(engaged as i64)
            .execute(p)
            .await
            .map(|_| ()),
        }
        .map_err(err)
    }

    // ---- the legacy ledger -------------------------------------------------

    /// Creates the ledger row of an (item, location) if missing.
    pub async fn ledger_ensure(&self, shop: &ShopId, item: &ItemId, loc: &LocationId) -> Result<(), Error> {
        let err = db_error("writing legacy_ledger");
        let (pg, my, lite) = (
            "INSERT INTO legacy_ledger (shop_id, item_id, location_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            "INSERT IGNORE INTO legacy_ledger (shop_id, item_id, location_id) VALUES (?, ?, ?)",
            "INSERT INTO legacy_ledger (shop_id, item_id, location_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        );
        let (s, i, l) = (shop.as_str(), item.as_str(), loc.as_str());
        match self {
            ControlDb::Pg(p) => sqlx::query(pg).bind(s).bind(i).bind(l).execute(p).await.map(|_| ()),
            ControlDb::My(p) => sqlx::query(my).bind(s).bind(i).bind(l).execute(p).await.map(|_| ()),
            ControlDb::Lite(p) => sqlx::query(lite).bind(s).bind(i).bind(l).execute(p).await.map(|_| ()),
        }
        .map_err(err)
    }

    /// Ledger rows of one shop (and item), or of every shop.
    pub async fn ledger_rows(&self, shop: Option<&ShopId>, item: Option<&ItemId>) -> Result<Vec<LedgerRow>, Error> {
        let err = db_error("reading legacy_ledger");
        let sql = "SELECT T(shop_id), T(item_id), T(location_id), on_hand, committed FROM legacy_ledger
                   WHERE (? IS NULL OR shop_id = ?) AND (? IS NULL OR item_id = ?)
                   ORDER BY shop_id, item_id, location_id";
        let s = shop.map(|s| s.as_str().to_owned());
        let i = item.map(|i| i.as_str().to_owned());
        let rows: Vec<(String, String, String, i64, i64)> = match self {
            // PostgreSQL needs the parameter types of `? IS NULL` spelled out.
            ControlDb::Pg(p) => {
                sqlx::query_as(&numbered(&text_columns(&sql.replace("? IS NULL", "?::text IS NULL"), false)))
                    .bind(&s)
                    .bind(&s)
                    .bind(&i)
                    .bind(&i)
                    .fetch_all(p)
                    .await
                    .map_err(err)?
            }
            ControlDb::My(p) => sqlx::query_as(&text_columns(sql, true))
                .bind(&s)
                .bind(&s)
                .bind(&i)
                .bind(&i)
                .fetch_all(p)
                .await
                .map_err(err)?,
            ControlDb::Lite(p) => sqlx::query_as(&text_columns(sql, false))
                .bind(&s)
                .bind(&s)
                .bind(&i)
                .bind(&i)
                .fetch_all(p)
                .await
                .map_err(err)?,
        };
        rows.into_iter()
            .map(|(s, i, l, on_hand, committed)| {
                Ok(LedgerRow {
                    shop: parse_name(s, "legacy_ledger")?,
                    item: parse_name(i, "legacy_ledger")?,
                    location: parse_name(l, "legacy_ledger")?,
                    on_hand,
                    committed,
                })
            })
            .collect()
    }

    /// Moves `on_hand` from `old` to `new` if nobody changed it meanwhile.
    pub async fn ledger_swap_on_hand(
        &self,
        shop: &ShopId,
        item: &ItemId,
        loc: &LocationId,
        old: i64,
        new: i64,
    ) -> Result<bool, Error> {
        let err = db_error("writing legacy_ledger");
        let sql = "UPDATE legacy_ledger SET on_hand = ?
                   WHERE shop_id = ? AND item_id = ? AND location_id = ? AND on_hand = ?";
        let done = each!(self, |pool, q| sqlx::query(&q(sql))
            .bind(new)
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(loc.as_str())
            .bind(old)
            .execute(pool)
            .await
            .map_err(&err)?
            .rows_affected());
        Ok(done == 1)
    }

    /// Ships `quantity` committed units: on_hand and committed both fall.
    pub async fn ledger_fulfil(
        &self,
        shop: &ShopId,
        item: &ItemId,
        loc: &LocationId,
        quantity: i64,
    ) -> Result<bool, Error> {
        let err = db_error("writing legacy_ledger");
        let sql = "UPDATE legacy_ledger SET on_hand = on_hand - ?, committed = committed - ?
                   WHERE shop_id = ? AND item_id = ? AND location_id = ? AND committed >= ?";
        let done = each!(self, |pool, q| sqlx::query(&q(sql))
            .bind(quantity)
            .bind(quantity)
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(loc.as_str())
            .bind(quantity)
            .execute(pool)
            .await
            .map_err(&err)?
            .rows_affected());
        Ok(done == 1)
    }

    /// The SQL half of a legacy claim: adds each line to `committed`, in one
    /// transaction (rows in (item, location) order, so two claims never
    /// deadlock on each other).
    pub async fn ledger_commit(&self, shop: &ShopId, lines: &[(ItemId, LocationId, u32)]) -> Result<(), Error> {
        let err = db_error("the legacy claim's ledger write");
        let mut lines = lines.to_vec();
        lines.sort();
        let sql = "UPDATE legacy_ledger SET committed = committed + ?
                   WHERE shop_id = ? AND item_id = ? AND location_id = ?";
        each!(self, |pool, q| {
            let sql = q(sql);
            let mut tx = pool.begin().await.map_err(&err)?;
            for (item, loc, n) in &lines {
                sqlx::query(&sql)
                    .bind(*n as i64)
                    .bind(shop.as_str())
                    .bind(item.as_str())
                    .bind(loc.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(&err)?;
            }
            tx.commit().await.map_err(&err)?;
        });
        Ok(())
    }

    /// Reconcile: overwrites one ledger row.
    pub async fn ledger_put(&self, row: &LedgerRow) -> Result<(), Error> {
        self.ledger_ensure(&row.shop, &row.item, &row.location).await?;
        let err = db_error("writing legacy_ledger");
        let sql = "UPDATE legacy_ledger SET on_hand = ?, committed = ?
                   WHERE shop_id = ? AND item_id = ? AND location_id = ?";
        each!(self, |pool, q| sqlx::query(&q(sql))
            .bind(row.on_hand)
            .bind(row.committed)
            .bind(row.shop.as_str())
            .bind(row.item.as_str())
            .bind(row.location.as_str())
            .execute(pool)
            .await
            .map(|_| ())
            .map_err(&err)?);
        Ok(())
    }

    /// The (item, location) pairs holdfast's own ledger knows for a shop
    /// (plain read), for reconciling Redis from SQL.
    pub async fn sql_locations(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId)>, Error> {
        let err = db_error("reading inventory_levels");
        let sql =
            "SELECT T(item_id), T(location_id) FROM inventory_levels WHERE shop_id = ? ORDER BY item_id, location_id";
        let rows: Vec<(String, String)> =
            each!(self, |pool, q| sqlx::query_as(&q(sql)).bind(shop.as_str()).fetch_all(pool).await.map_err(&err)?);
        rows.into_iter()
            .map(|(i, l)| Ok((parse_name(i, "inventory_levels")?, parse_name(l, "inventory_levels")?)))
            .collect()
    }
}

fn parse_mode(s: &str) -> Result<Mode, Error> {
    s.parse().map_err(|e: Invalid| Error::Internal(format!("bad mode in the database: {e}")))
}
