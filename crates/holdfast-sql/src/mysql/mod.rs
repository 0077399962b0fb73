//! The MySQL 8.0+ / MariaDB 10.6+ store (InnoDB). It keeps to SQL both
//! servers accept; where they differ the statement's comment says so.
//!
//! Write transactions run at READ COMMITTED, set on each transaction, never
//! on the server or the session: under InnoDB's default REPEATABLE READ a
//! locking read that finds an empty range (a drained pool) takes a gap lock up
//! to the next record, and those gap locks block the refill's inserts — two
//! short reserves that both read the empty pool, then queue for the ledger
//! lock, deadlock as soon as the first one refills. READ COMMITTED takes no
//! gap locks, and every statement sees what committed before it, which the
//! slow path relies on to find rows other refills committed meanwhile.
//!
//! MySQL has no `RETURNING` on UPDATE or DELETE, no writable CTEs and no
//! arrays, so steps that are one statement on PostgreSQL are a locking
//! SELECT followed by a write naming the locked rows by key, and lists travel
//! as one JSON parameter read with `JSON_TABLE` (both servers have it).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, AuditRow, Backend, IdempotencyKey, ItemId, LocationId, LocationLevel, Quantities, ReservationId,
    ReservationStatus, ShopId, Ttl,
};
use serde_json::json;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlRow};
use sqlx::{Executor, MySql, MySqlPool, Row};

use crate::dialect::{Dialect, Fast, Fault, Folded, Head, Ledger, Taken, Tx, TxMode, Want};
use crate::migrate::Migration;

#[derive(Debug)]
pub struct My;

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("migrations/0001_init.sql") },
    Migration { version: 2, name: "tokens", sql: include_str!("migrations/0002_tokens.sql") },
    Migration { version: 3, name: "modes", sql: include_str!("migrations/0003_modes.sql") },
    Migration { version: 4, name: "reserve_fast", sql: include_str!("migrations/0004_reserve_fast.sql") },
];

/// A statement's text from `queries/`, raw (for templates that are built
/// into the statement sent).
macro_rules! raw {
    ($name:literal) => {
        include_str!(concat!("queries/", $name, ".sql"))
    };
}

/// A statement from `queries/` with the comment naming who sends it (see
/// `tag.rs`); a temporary, so use it where the statement is sent.
macro_rules! q {
    ($name:literal) => {
        &*crate::tag::sql(raw!($name))
    };
}

/// Write transactions: READ COMMITTED for this transaction only (see the
/// module doc for why). `SET TRANSACTION` without SESSION applies to the next
/// transaction on the connection; sqlx sends both statements in one round
/// trip (text protocol, multi-statements), and checks that a transaction is
/// open afterwards.
const BEGIN_WRITE: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

/// Reports: one consistent snapshot for every statement, taken at once.
const BEGIN_SNAPSHOT: &str =
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

/// Serialises concurrent `migrate` runs on one server (DDL cannot run in a
/// transaction here, so there is no transaction-scoped lock to take).
const MIGRATE_LOCK: &str = "holdfast_migrate";

/// Server error numbers (shared by MySQL and MariaDB unless noted).
mod errno {
    pub const LOCK_DEADLOCK: u16 = 1213;
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// MySQL 8: `NOWAIT` found a locked row (MariaDB reports 1205).
    pub const LOCK_NOWAIT: u16 = 3572;
    pub const CON_COUNT: u16 = 1040;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    pub const NET_ERRORS: std::ops::RangeInclusive<u16> = 1152..=1161;
    /// MariaDB: the connection was killed.
    pub const CONNECTION_KILLED: u16 = 1927;
    /// MySQL 8.0.24+: the server closed an idle connection.
    pub const CLIENT_INTERACTION_TIMEOUT: u16 = 4031;
}

/// An identifier column. Columns with a binary collation (`ascii_bin`) carry
/// the BINARY flag, so the driver hands them over as bytes.
fn ascii(row: &MySqlRow, col: &str) -> sqlx::Result<String> {
    let bytes: Vec<u8> = row.try_get(col)?;
    String::from_utf8(bytes).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

fn name<T: std::str::FromStr<Err = holdfast_core::Invalid>>(row: &MySqlRow, col: &str) -> sqlx::Result<T> {
    let s = ascii(row, col)?;
    s.parse().map_err(|e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e)))
}

fn reservation_id(id: i64) -> sqlx::Result<ReservationId> {
    ReservationId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

fn head(row: &MySqlRow) -> sqlx::Result<Head> {
    let status = ascii(row, "status")?;
    Ok(Head {
        id: reservation_id(row.try_get("id")?)?,
        key: name::<IdempotencyKey>(row, "idempotency_key")?,
        fingerprint: row.try_get("fingerprint")?,
        status: ReservationStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown status {status:?}").into()))?,
        expires_at: row.try_get("expires_at")?,
        expired: row.try_get::<i64, _>("expired")? != 0,
    })
}

/// A statement file's leading `--` comment, and the statement after it.
fn split_doc(sql: &str) -> (&str, &str) {
    let mut at = 0;
    for line in sql.split_inclusive('\n') {
        if !line.starts_with("--") {
            break;
        }
        at += line.len();
    }
    sql.split_at(at)
}

/// The whole cart's take as one statement: the branch of `take_units.sql`
/// once per want, joined with UNION ALL, its comment once on top. `waiting`:
/// a plain FOR UPDATE that waits for rows other transactions hold
/// ([`Dialect::take_units_waiting`]) instead of skipping them.
fn take_units_sql(n: usize, waiting: bool) -> String {
    let (doc, branch) = split_doc(raw!("take_units"));
    let branch = branch.trim_end();
    debug_assert!(branch.ends_with("FOR UPDATE SKIP LOCKED)"));
    let branch = if waiting { branch.replacen("FOR UPDATE SKIP LOCKED)", "FOR UPDATE)", 1) } else { branch.into() };
    let mut sql = String::with_capacity(doc.len() + n * (branch.len() + 11));
    sql.push_str(doc);
    for i in 0..n {
        if i > 0 {
            sql.push_str("\nUNION ALL\n");
        }
        sql.push_str(&branch);
    }
    crate::tag::owned(sql)
}

/// A statement with a `/* ranges */` marker (`lock_ledgers.sql`,
/// `available.sql`), filled with one primary-key range per candidate and
/// bound: the shop, then each candidate's item and location.
fn ranges_query<'q>(
    template: &str,
    shop: &'q ShopId,
    spec: &'q [(ItemId, Option<LocationId>)],
    sql: &'q mut String,
) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments> {
    let ranges: Vec<&str> = spec
        .iter()
        .map(|(_, l)| if l.is_some() { "(l.item_id = ? AND l.location_id = ?)" } else { "(l.item_id = ?)" })
        .collect();
    *sql = template.replace("/* ranges */", &ranges.join(" OR "));
    let mut query = sqlx::query(sql.as_str()).bind(shop.as_str());
    for (item, location) in spec {
        query = query.bind(item.as_str());
        if let Some(l) = location {
            query = query.bind(l.as_str());
        }
    }
    query
}

/// `lock_ledgers.sql`, its closing `FOR UPDATE` replaced by `clause` when
/// given (SKIP LOCKED, or a shared lock to wait with).
async fn ledgers<'e, E: sqlx::MySqlExecutor<'e>>(
    c: E,
    shop: &ShopId,
    spec: &[(ItemId, Option<LocationId>)],
    clause: Option<&str>,
) -> sqlx::Result<Vec<Ledger>> {
    if spec.is_empty() {
        return Ok(Vec::new());
    }
    let template = match clause {
        None => raw!("lock_ledgers").to_string(),
        Some(clause) => {
            let base = raw!("lock_ledgers").trim_end();
            let base = base.strip_suffix("FOR UPDATE").expect("lock_ledgers.sql ends with FOR UPDATE");
            format!("{base}{clause}")
        }
    };
    let mut sql = String::new();
    let rows = ranges_query(&crate::tag::owned(template), shop, spec, &mut sql).fetch_all(c).await?;
    rows.iter()
        .map(|r| {
            Ok(Ledger {
                item: name(r, "item_id")?,
                location: name(r, "location_id")?,
                on_hand: r.try_get("on_hand")?,
                committed: r.try_get("committed")?,
                unpooled: r.try_get("unpooled")?,
            })
        })
        .collect()
}

/// Takes and deletes unit rows for every want: one locking SELECT for the
/// whole cart, then one DELETE naming the rows it locked.
async fn take(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want], waiting: bool) -> sqlx::Result<Vec<Taken>> {
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let sql = take_units_sql(wants.len(), waiting);
    let mut query = sqlx::query(&sql);
    for w in wants {
        query = query
            .bind(shop.as_str())
            .bind(w.item.as_str())
            .bind(w.location.as_ref().map(|l| l.as_str()))
            .bind(shop.as_str())
            .bind(w.item.as_str())
            .bind(w.qty as i64);
    }
    let rows = query.fetch_all(&mut *c).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut counts: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut picked = Vec::with_capacity(rows.len());
    for r in &rows {
        let item = ascii(r, "item_id")?;
        let location = ascii(r, "location_id")?;
        picked.push(json!({"item": item, "location": location, "id": r.try_get::<i32, _>("id")?}));
        *counts.entry((item, location)).or_default() += 1;
    }
    sqlx::query(q!("delete_units"))
        .bind(serde_json::Value::Array(picked).to_string())
        .bind(shop.as_str())
        .execute(&mut *c)
        .await?;
    counts
        .into_iter()
        .map(|((item, location), count)| {
            let bad = |e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e));
            Ok(Taken { item: item.parse().map_err(bad)?, location: location.parse().map_err(bad)?, count })
        })
        .collect()
}

/// Expires the holds a locking read returned as (shop_id, id) rows.
async fn expire_rows(c: &mut MySqlConnection, rows: &[MySqlRow]) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids = rows
        .iter()
        .map(|r| Ok(json!({"shop": ascii(r, "shop_id")?, "id": r.try_get::<i64, _>("id")?})))
        .collect::<sqlx::Result<Vec<_>>>()?;
    sqlx::query(q!("expire_ids")).bind(serde_json::Value::Array(ids).to_string()).execute(c).await?;
    Ok(rows.len() as u64)
}

impl Dialect for My {
    type Db = MySql;
    const BACKEND: Backend = Backend::MySql;
    const ONE_STATEMENT_FAST_PATH: bool = true;

    async fn begin(pool: &MySqlPool, mode: TxMode) -> sqlx::Result<Tx<Self>> {
        match mode {
            TxMode::Write => pool.begin_with(crate::tag::sql(BEGIN_WRITE)).await,
            TxMode::Snapshot => pool.begin_with(crate::tag::sql(BEGIN_SNAPSHOT)).await,
        }
    }

    fn fault(err: &sqlx::Error) -> Fault {
        match err {
            sqlx::Error::Database(db) => match db.try_downcast_ref::<MySqlDatabaseError>().map(|e| e.number()) {
                Some(errno::LOCK_DEADLOCK) => Fault::Deadlock,
                Some(errno::LOCK_WAIT_TIMEOUT | errno::LOCK_NOWAIT) => Fault::Busy,
                Some(
                    errno::CON_COUNT
                    | errno::SERVER_SHUTDOWN
                    | errno::CONNECTION_KILLED
                    | errno::CLIENT_INTERACTION_TIMEOUT,
                ) => Fault::Connection,
                Some(n) if errno::NET_ERRORS.contains(&n) => Fault::Connection,
                _ => Fault::Other,
            },
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Fault::Connection,
            _ => Fault::Other,
        }
    }

    async fn migrate(pool: &MySqlPool) -> sqlx::Result<()> {
        let mut c = pool.acquire().await?;
        let got: Option<i64> = sqlx::query_scalar(&crate::tag::sql("SELECT GET_LOCK(?, 60)"))
            .bind(MIGRATE_LOCK)
            .fetch_one(&mut *c)
            .await?;
        if got != Some(1) {
            return Err(sqlx::Error::Protocol("another `holdfast migrate` held the migration lock for 60 s".into()));
        }
        let outcome = async {
            sqlx::query(&crate::tag::sql(
                "CREATE TABLE IF NOT EXISTS holdfast_migrations (
                     version INT PRIMARY KEY, name VARCHAR(64) NOT NULL,
                     applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB",
            ))
            .execute(&mut *c)
            .await?;
            let done: Vec<i32> = sqlx::query_scalar(&crate::tag::sql("SELECT version FROM holdfast_migrations"))
                .fetch_all(&mut *c)
                .await?;
            for m in MIGRATIONS {
                if !done.contains(&m.version) {
                    // A plain string goes over the text protocol, where
                    // several statements may be sent at once. DDL commits
                    // implicitly; the migrations are written to run again.
                    (&mut *c).execute(&*crate::tag::sql(m.sql)).await?;
                    sqlx::query(&crate::tag::sql("INSERT INTO holdfast_migrations (version, name) VALUES (?, ?)"))
                        .bind(m.version)
                        .bind(m.name)
                        .execute(&mut *c)
                        .await?;
                }
            }
            Ok(())
        }
        .await;
        let released =
            sqlx::query(&crate::tag::sql("SELECT RELEASE_LOCK(?)")).bind(MIGRATE_LOCK).execute(&mut *c).await;
        outcome.and(released.map(|_| ()))
    }

    /// One CALL of the stored procedure of migration 0004 (its comment
    /// says why and what was found on the way).
    async fn reserve_fast(
        pool: &MySqlPool,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        wants: &[Want],
    ) -> sqlx::Result<Fast> {
        let lines: Vec<_> = wants
            .iter()
            .map(
                |w| json!({"item": w.item.as_str(), "location": w.location.as_ref().map(|l| l.as_str()), "qty": w.qty}),
            )
            .collect();
        let rows = sqlx::query(q!("reserve_fast"))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(ttl.as_secs() as i64)
            .bind(serde_json::Value::Array(lines).to_string())
            .fetch_all(pool)
            .await?;
        let row = rows.first().ok_or_else(|| sqlx::Error::Protocol("holdfast_reserve_fast answered no row".into()))?;
        // By position: sqlx knows no column names for a CALL's result set
        // (launchbadge/sqlx#1742). complete, key_taken, id, expires_at, taken.
        if row.try_get::<i64, _>(1)? != 0 {
            return Ok(Fast::KeyTaken);
        }
        if row.try_get::<i64, _>(0)? == 0 {
            return Ok(Fast::Short);
        }
        // Every line was filled at one location, so its count is its qty.
        let text = match row.try_get::<String, _>(4) {
            Ok(s) => s,
            Err(_) => String::from_utf8(row.try_get::<Vec<u8>, _>(4)?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        };
        let list: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        let field = |v: &serde_json::Value, f: &str| v[f].as_str().map(str::to_string).unwrap_or_default();
        let taken = list
            .iter()
            .map(|v| {
                let (item, location) = (field(v, "item"), field(v, "location"));
                let item: ItemId =
                    item.parse().map_err(|e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e)))?;
                let location: LocationId =
                    location.parse().map_err(|e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e)))?;
                let count = wants.iter().find(|w| w.item == item).map(|w| w.qty).unwrap_or(0);
                Ok(Taken { item, location, count })
            })
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Fast::Held { id: reservation_id(row.try_get(2)?)?, expires_at: row.try_get(3)?, taken })
    }

    async fn take_units(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Taken>> {
        take(c, shop, wants, false).await
    }

    async fn take_units_waiting(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Taken>> {
        take(c, shop, wants, true).await
    }

    async fn lock_ledgers(
        c: &mut MySqlConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Vec<Ledger>> {
        ledgers(c, shop, spec, None).await
    }

    async fn lock_ledgers_skip(
        c: &mut MySqlConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Vec<Ledger>> {
        ledgers(c, shop, spec, Some("FOR UPDATE SKIP LOCKED")).await
    }

    async fn await_ledgers(pool: &MySqlPool, shop: &ShopId, spec: &[(ItemId, Option<LocationId>)]) -> sqlx::Result<()> {
        // Autocommit: the shared lock goes back when the statement ends.
        ledgers(pool, shop, spec, Some("LOCK IN SHARE MODE")).await.map(|_| ())
    }

    async fn available(
        c: &mut MySqlConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Option<Vec<(ItemId, LocationId, i64)>>> {
        if spec.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let mut sql = String::new();
        let rows = ranges_query(q!("available"), shop, spec, &mut sql).fetch_all(c).await?;
        let rows = rows
            .iter()
            .map(|r| Ok((name(r, "item_id")?, name(r, "location_id")?, r.try_get::<i64, _>("available")?)))
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Some(rows))
    }

    async fn ensure_ledger(
        c: &mut MySqlConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<()> {
        sqlx::query(q!("ensure_ledger"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .execute(c)
            .await?;
        Ok(())
    }

    async fn write_ledger(c: &mut MySqlConnection, shop: &ShopId, row: &Ledger) -> sqlx::Result<()> {
        sqlx::query(q!("write_ledger"))
            .bind(row.on_hand)
            .bind(row.committed)
            .bind(row.unpooled)
            .bind(shop.as_str())
            .bind(row.item.as_str())
            .bind(row.location.as_str())
            .execute(c)
            .await?;
        Ok(())
    }

    async fn expire_at(
        c: &mut MySqlConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<u64> {
        let rows = sqlx::query(q!("expire_at"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_all(&mut *c)
            .await?;
        expire_rows(c, &rows).await
    }

    async fn fold(
        c: &mut MySqlConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<Folded> {
        let rows = sqlx::query(q!("fold"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_all(&mut *c)
            .await?;
        if rows.is_empty() {
            return Ok(Folded::default());
        }
        let mut folded = Folded::default();
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            let state = ascii(r, "state")?;
            let quantity: i64 = r.try_get("quantity")?;
            match state.as_str() {
                "returned" => folded.restocked += quantity,
                _ => folded.settled += quantity,
            }
            ids.push(r.try_get::<i64, _>("reservation_id")?);
        }
        sqlx::query(q!("fold_mark"))
            .bind(json!(ids).to_string())
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .execute(c)
            .await?;
        Ok(folded)
    }

    async fn refill(
        c: &mut MySqlConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
        cap: u32,
        n: i64,
    ) -> sqlx::Result<u64> {
        let done = sqlx::query(q!("refill"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .bind(cap as i64)
            .bind(cap as i64)
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .bind(n)
            .execute(c)
            .await?;
        Ok(done.rows_affected())
    }

    async fn in_flight(
        c: &mut MySqlConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<i64> {
        sqlx::query_scalar(q!("in_flight"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .bind(shop.as_str())
            .fetch_one(c)
            .await
    }

    async fn insert_reservation(
        c: &mut MySqlConnection,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        lines: &[Allocation],
    ) -> sqlx::Result<Option<(ReservationId, DateTime<Utc>)>> {
        let done = sqlx::query(q!("insert_reservation"))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(ttl.as_secs() as i64)
            .execute(&mut *c)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let id = reservation_id(done.last_insert_id() as i64)?;
        let lines: Vec<_> = lines
            .iter()
            .map(|l| json!({"item": l.item.as_str(), "location": l.location.as_str(), "qty": l.quantity}))
            .collect();
        sqlx::query(q!("insert_lines"))
            .bind(shop.as_str())
            .bind(id.get())
            .bind(serde_json::Value::Array(lines).to_string())
            .execute(&mut *c)
            .await?;
        // No INSERT … RETURNING on MySQL: read the database's expiry back.
        let row = sqlx::query(q!("head")).bind(shop.as_str()).bind(id.get()).fetch_one(c).await?;
        Ok(Some((id, row.try_get("expires_at")?)))
    }

    async fn find_by_key(c: &mut MySqlConnection, shop: &ShopId, key: &IdempotencyKey) -> sqlx::Result<Option<Head>> {
        let row = sqlx::query(q!("find_by_key")).bind(shop.as_str()).bind(key.as_str()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    async fn head(c: &mut MySqlConnection, shop: &ShopId, id: ReservationId, lock: bool) -> sqlx::Result<Option<Head>> {
        let sql = crate::tag::sql(if lock { raw!("head_for_update") } else { raw!("head") });
        let row = sqlx::query(&sql).bind(shop.as_str()).bind(id.get()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    async fn lines(c: &mut MySqlConnection, shop: &ShopId, id: ReservationId) -> sqlx::Result<Vec<Allocation>> {
        let rows = sqlx::query(q!("lines")).bind(shop.as_str()).bind(id.get()).fetch_all(c).await?;
        rows.iter()
            .map(|r| {
                Ok(Allocation {
                    item: name(r, "item_id")?,
                    location: name(r, "location_id")?,
                    quantity: r.try_get::<i32, _>("quantity")? as u32,
                })
            })
            .collect()
    }

    async fn transition(
        c: &mut MySqlConnection,
        shop: &ShopId,
        id: ReservationId,
        status: ReservationStatus,
        state: &'static str,
    ) -> sqlx::Result<()> {
        sqlx::query(q!("transition"))
            .bind(status.as_str())
            .bind(state)
            .bind(shop.as_str())
            .bind(id.get())
            .execute(c)
            .await?;
        Ok(())
    }

    async fn extend(
        c: &mut MySqlConnection,
        shop: &ShopId,
        id: ReservationId,
        ttl: Ttl,
    ) -> sqlx::Result<DateTime<Utc>> {
        sqlx::query(q!("extend"))
            .bind(ttl.as_secs() as i64)
            .bind(shop.as_str())
            .bind(id.get())
            .execute(&mut *c)
            .await?;
        let row = sqlx::query(q!("head")).bind(shop.as_str()).bind(id.get()).fetch_one(c).await?;
        row.try_get("expires_at")
    }

    async fn sweep(c: &mut MySqlConnection, limit: u32) -> sqlx::Result<u64> {
        let rows = sqlx::query(q!("sweep")).bind(limit as i64).fetch_all(&mut *c).await?;
        expire_rows(c, &rows).await
    }

    async fn levels(c: &mut MySqlConnection, shop: &ShopId, item: &ItemId) -> sqlx::Result<Vec<LocationLevel>> {
        let sql = crate::tag::sql(raw!("levels"));
        let mut query = sqlx::query(&sql);
        for _ in 0..3 {
            query = query.bind(shop.as_str()).bind(item.as_str());
        }
        let rows = query.fetch_all(c).await?;
        rows.iter()
            .map(|r| {
                Ok(LocationLevel {
                    location: name(r, "location_id")?,
                    quantities: Quantities {
                        on_hand: r.try_get("on_hand")?,
                        available: r.try_get("available")?,
                        reserved: r.try_get("reserved")?,
                        committed: r.try_get("committed")?,
                    },
                })
            })
            .collect()
    }

    async fn audit(c: &mut MySqlConnection, shop: Option<&ShopId>) -> sqlx::Result<(Vec<AuditRow>, Vec<AuditRow>)> {
        let shop = shop.map(|s| s.as_str());
        let sql = crate::tag::sql(raw!("audit"));
        let mut query = sqlx::query(&sql);
        for _ in 0..6 {
            query = query.bind(shop);
        }
        let rows = query.fetch_all(&mut *c).await?;
        let rows = rows
            .iter()
            .map(|r| {
                Ok(AuditRow {
                    shop: name(r, "shop_id")?,
                    item: name(r, "item_id")?,
                    location: name(r, "location_id")?,
                    on_hand: r.try_get("on_hand")?,
                    unpooled: r.try_get("unpooled")?,
                    pooled: r.try_get("pooled")?,
                    reserved: r.try_get("reserved")?,
                    committed: r.try_get("committed")?,
                })
            })
            .collect::<sqlx::Result<Vec<_>>>()?;
        let orphans = sqlx::query(q!("audit_orphans")).bind(shop).bind(shop).fetch_all(c).await?;
        let orphans = orphans
            .iter()
            .map(|r| {
                Ok(AuditRow {
                    shop: name(r, "shop_id")?,
                    item: name(r, "item_id")?,
                    location: name(r, "location_id")?,
                    on_hand: 0,
                    unpooled: 0,
                    pooled: r.try_get("pooled")?,
                    reserved: r.try_get("open")?,
                    committed: 0,
                })
            })
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok((rows, orphans))
    }
}
