//! The SQLite store: the embedded default, for `holdfast demo` and a single
//! node with no database server. SQLite runs one writer at a time, so every
//! writing transaction starts with `BEGIN IMMEDIATE` and holds the database's
//! write lock from its first statement: nothing it reads can change under it,
//! it needs no row locks and no SKIP LOCKED, and a second writer queues
//! instead of failing halfway with "database is locked". WAL mode lets
//! reports read one snapshot while a writer works.
//!
//! Writers of one process queue in the connection pool, which holds a single
//! connection (see [`pool`]); writers of other processes wait in SQLite's busy
//! handler for up to [`BUSY_TIMEOUT`].

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, AuditRow, Backend, Error, IdempotencyKey, ItemId, LocationId, LocationLevel, Quantities, ReservationId,
    ReservationStatus, ShopId, Ttl,
};
use serde_json::json;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Executor, Row, Sqlite, SqlitePool};

use crate::ConnectOptions;
use crate::dialect::{Dialect, Fault, Folded, Head, Ledger, Taken, Tx, TxMode, Want};
use crate::migrate::Migration;

#[derive(Debug)]
pub struct Lite;

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("migrations/0001_init.sql") },
    Migration { version: 2, name: "tokens", sql: include_str!("migrations/0002_tokens.sql") },
    Migration { version: 3, name: "modes", sql: include_str!("migrations/0003_modes.sql") },
];

/// How long a writer waits for another process to let go of the write lock
/// before the attempt fails as busy (and the engine retries it).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Opens the pool for a `sqlite:` URL: the file and its directory are
/// created when missing, the journal is WAL, writers wait [`BUSY_TIMEOUT`].
///
/// One connection per process, whatever `max_connections` says. SQLite admits
/// one writer at a time; a connection that finds the write lock taken sleeps
/// in the busy handler and polls (1 ms, 2 ms, 5 ms, … 100 ms), so who goes
/// next is luck, and under a long queue an unlucky writer can run out its busy
/// timeout. With one connection, writers of this process wait in the pool's
/// FIFO queue instead and are woken when the holder commits; only other
/// processes meet the busy handler. (Throughput is the same either way, about
/// 500 reserve+claim pairs a second in the sell-out test on 2 shared cores
/// with synchronous = FULL: the single writer is the limit.) Reports wait in
/// the same queue; their transactions are short.
pub(crate) async fn pool(opts: &ConnectOptions) -> Result<SqlitePool, Error> {
    let invalid = |msg: String| Error::Invalid(holdfast_core::Invalid::new("database_url", msg));
    let options = SqliteConnectOptions::from_str(&opts.url)
        .map_err(|e| invalid(format!("bad SQLite URL {:?}: {e}", opts.url)))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a claim acknowledged to the buyer survives a power cut too. A
        // claim lost after payment would put sold units back on sale.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    // The default database lives in a per-user directory that may not exist
    // yet. An in-memory URL has no directory to create.
    if let Some(dir) = options.get_filename().parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        create_dir(dir)?;
    }
    SqlitePoolOptions::new()
        .max_connections(1)
        .acquire_timeout(opts.acquire_timeout)
        // In-process: there is no network between us and the file to break.
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .map_err(|e| Error::Unavailable(format!("cannot open SQLite database {:?}: {e}", opts.url)))
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Unavailable(format!("cannot create the directory {}: {e}", dir.display())))
}

fn text<T: ToString>(v: &T) -> String {
    v.to_string()
}

fn name<T: std::str::FromStr<Err = holdfast_core::Invalid>>(row: &SqliteRow, col: &str) -> sqlx::Result<T> {
    let s: String = row.try_get(col)?;
    s.parse().map_err(|e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e)))
}

/// A stored time: integer unix milliseconds, UTC.
fn millis(row: &SqliteRow, col: &str) -> sqlx::Result<DateTime<Utc>> {
    let ms: i64 = row.try_get(col)?;
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| sqlx::Error::Decode(format!("{col} out of range: {ms} ms").into()))
}

fn reservation_id(row: &SqliteRow) -> sqlx::Result<ReservationId> {
    ReservationId::new(row.try_get("id")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

fn head(row: &SqliteRow) -> sqlx::Result<Head> {
    let status: String = row.try_get("status")?;
    Ok(Head {
        id: reservation_id(row)?,
        key: name::<IdempotencyKey>(row, "idempotency_key")?,
        fingerprint: row.try_get("fingerprint")?,
        status: ReservationStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown status {status:?}").into()))?,
        expires_at: millis(row, "expires_at")?,
        expired: row.try_get("expired")?,
    })
}

/// Moves the held units of the reservations `rows` named (columns `shop_id`
/// and `id`, as expire_at and sweep return them) to `state`.
async fn move_held(c: &mut SqliteConnection, rows: &[SqliteRow], state: &str) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let ids = rows
        .iter()
        .map(|r| Ok(json!([r.try_get::<String, _>("shop_id")?, r.try_get::<i64, _>("id")?])))
        .collect::<sqlx::Result<Vec<_>>>()?;
    sqlx::query(q!("move_held")).bind(json!(ids).to_string()).bind(state).execute(c).await?;
    Ok(())
}

impl Dialect for Lite {
    type Db = Sqlite;
    const BACKEND: Backend = Backend::Sqlite;

    async fn begin(pool: &SqlitePool, mode: TxMode) -> sqlx::Result<Tx<Self>> {
        match mode {
            // Take the write lock now, not at the first write: a deferred
            // transaction that read first could find, when it writes, that
            // another writer got in between (SQLITE_BUSY_SNAPSHOT), and
            // everything it read would be stale. Waits up to BUSY_TIMEOUT.
            TxMode::Write => pool.begin_with(crate::tag::sql("BEGIN IMMEDIATE")).await,
            // Deferred: under WAL a reader sees one snapshot from its first
            // read to its end and neither blocks nor waits for the writer.
            TxMode::Snapshot => pool.begin_with(crate::tag::sql("BEGIN")).await,
        }
    }

    fn fault(err: &sqlx::Error) -> Fault {
        match err {
            // sqlx reports the extended result code; the primary code is its
            // low byte.
            sqlx::Error::Database(db) => match db.code().and_then(|c| c.parse::<i32>().ok()).map(|c| c & 0xff) {
                // SQLITE_BUSY, SQLITE_LOCKED (and BUSY_SNAPSHOT, BUSY_TIMEOUT,
                // LOCKED_SHAREDCACHE, …): another writer has the database.
                Some(5 | 6) => Fault::Busy,
                // SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN: the file cannot
                // be read or written; as unavailable as a lost server.
                Some(10 | 13 | 14) => Fault::Connection,
                _ => Fault::Other,
            },
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
                Fault::Connection
            }
            _ => Fault::Other,
        }
    }

    async fn migrate(pool: &SqlitePool) -> sqlx::Result<()> {
        // BEGIN IMMEDIATE serialises concurrent `migrate` runs on one file.
        let mut tx = pool.begin_with(crate::tag::sql("BEGIN IMMEDIATE")).await?;
        sqlx::query(&crate::tag::sql(
            "CREATE TABLE IF NOT EXISTS holdfast_migrations (
                 version INTEGER PRIMARY KEY, name TEXT NOT NULL,
                 applied_at INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
             ) STRICT",
        ))
        .execute(&mut *tx)
        .await?;
        let done: Vec<i32> =
            sqlx::query_scalar(&crate::tag::sql("SELECT version FROM holdfast_migrations")).fetch_all(&mut *tx).await?;
        for m in MIGRATIONS {
            if !done.contains(&m.version) {
                // A plain string runs every statement in it.
                (&mut *tx).execute(&*crate::tag::sql(m.sql)).await?;
                sqlx::query(&crate::tag::sql("INSERT INTO holdfast_migrations (version, name) VALUES (?1, ?2)"))
                    .bind(m.version)
                    .bind(m.name)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await
    }

    async fn take_units(c: &mut SqliteConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Taken>> {
        let want = json!(
            wants.iter().map(|w| json!([text(&w.item), w.location.as_ref().map(text), w.qty])).collect::<Vec<_>>()
        );
        let rows = sqlx::query(q!("take_units")).bind(shop.as_str()).bind(want.to_string()).fetch_all(c).await?;
        let mut taken: Vec<Taken> = Vec::new();
        for r in &rows {
            let (item, location): (ItemId, LocationId) = (name(r, "item_id")?, name(r, "location_id")?);
            match taken.iter_mut().find(|t| t.item == item && t.location == location) {
                Some(t) => t.count += 1,
                None => taken.push(Taken { item, location, count: 1 }),
            }
        }
        Ok(taken)
    }

    async fn lock_ledgers(
        c: &mut SqliteConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Vec<Ledger>> {
        let spec = json!(spec.iter().map(|(i, l)| json!([text(i), l.as_ref().map(text)])).collect::<Vec<_>>());
        let rows = sqlx::query(q!("lock_ledgers")).bind(shop.as_str()).bind(spec.to_string()).fetch_all(c).await?;
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

    async fn ensure_ledger(
        c: &mut SqliteConnection,
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

    async fn write_ledger(c: &mut SqliteConnection, shop: &ShopId, row: &Ledger) -> sqlx::Result<()> {
        sqlx::query(q!("write_ledger"))
            .bind(shop.as_str())
            .bind(row.item.as_str())
            .bind(row.location.as_str())
            .bind(row.on_hand)
            .bind(row.committed)
            .bind(row.unpooled)
            .execute(c)
            .await?;
        Ok(())
    }

    async fn expire_at(
        c: &mut SqliteConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<u64> {
        let gone = sqlx::query(q!("expire_at"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_all(&mut *c)
            .await?;
        move_held(c, &gone, "returned").await?;
        Ok(gone.len() as u64)
    }

    async fn fold(
        c: &mut SqliteConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<Folded> {
        let rows = sqlx::query(q!("fold"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_all(c)
            .await?;
        let mut folded = Folded::default();
        for r in &rows {
            let quantity: i64 = r.try_get("quantity")?;
            match r.try_get::<&str, _>("state")? {
                "restocked" => folded.restocked += quantity,
                _ => folded.settled += quantity,
            }
        }
        Ok(folded)
    }

    async fn refill(
        c: &mut SqliteConnection,
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
            .bind(n)
            .execute(c)
            .await?;
        Ok(done.rows_affected())
    }

    async fn in_flight(
        c: &mut SqliteConnection,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> sqlx::Result<i64> {
        sqlx::query_scalar(q!("in_flight"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_one(c)
            .await
    }

    async fn insert_reservation(
        c: &mut SqliteConnection,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        lines: &[Allocation],
    ) -> sqlx::Result<Option<(ReservationId, DateTime<Utc>)>> {
        let Some(row) = sqlx::query(q!("insert_reservation"))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(ttl.as_secs() as i64)
            .fetch_optional(&mut *c)
            .await?
        else {
            return Ok(None);
        };
        let id = reservation_id(&row)?;
        let lines =
            json!(lines.iter().map(|l| json!([text(&l.item), text(&l.location), l.quantity])).collect::<Vec<_>>());
        sqlx::query(q!("insert_lines")).bind(shop.as_str()).bind(id.get()).bind(lines.to_string()).execute(c).await?;
        Ok(Some((id, millis(&row, "expires_at")?)))
    }

    async fn find_by_key(c: &mut SqliteConnection, shop: &ShopId, key: &IdempotencyKey) -> sqlx::Result<Option<Head>> {
        let row = sqlx::query(q!("find_by_key")).bind(shop.as_str()).bind(key.as_str()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    /// `lock` needs no statement of its own: a writing transaction already
    /// holds the database's write lock.
    async fn head(
        c: &mut SqliteConnection,
        shop: &ShopId,
        id: ReservationId,
        _lock: bool,
    ) -> sqlx::Result<Option<Head>> {
        let row = sqlx::query(q!("head")).bind(shop.as_str()).bind(id.get()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    async fn lines(c: &mut SqliteConnection, shop: &ShopId, id: ReservationId) -> sqlx::Result<Vec<Allocation>> {
        let rows = sqlx::query(q!("lines")).bind(shop.as_str()).bind(id.get()).fetch_all(c).await?;
        rows.iter()
            .map(|r| {
                Ok(Allocation {
                    item: name(r, "item_id")?,
                    location: name(r, "location_id")?,
                    quantity: r.try_get::<i64, _>("quantity")? as u32,
                })
            })
            .collect()
    }

    async fn transition(
        c: &mut SqliteConnection,
        shop: &ShopId,
        id: ReservationId,
        status: ReservationStatus,
        state: &'static str,
    ) -> sqlx::Result<()> {
        sqlx::query(q!("transition")).bind(shop.as_str()).bind(id.get()).bind(status.as_str()).execute(&mut *c).await?;
        let ids = json!([[shop.as_str(), id.get()]]);
        sqlx::query(q!("move_held")).bind(ids.to_string()).bind(state).execute(c).await?;
        Ok(())
    }

    async fn extend(
        c: &mut SqliteConnection,
        shop: &ShopId,
        id: ReservationId,
        ttl: Ttl,
    ) -> sqlx::Result<DateTime<Utc>> {
        let row = sqlx::query(q!("extend"))
            .bind(shop.as_str())
            .bind(id.get())
            .bind(ttl.as_secs() as i64)
            .fetch_one(c)
            .await?;
        millis(&row, "expires_at")
    }

    async fn sweep(c: &mut SqliteConnection, limit: u32) -> sqlx::Result<u64> {
        let gone = sqlx::query(q!("sweep")).bind(limit as i64).fetch_all(&mut *c).await?;
        move_held(c, &gone, "returned").await?;
        Ok(gone.len() as u64)
    }

    async fn levels(c: &mut SqliteConnection, shop: &ShopId, item: &ItemId) -> sqlx::Result<Vec<LocationLevel>> {
        let rows = sqlx::query(q!("levels")).bind(shop.as_str()).bind(item.as_str()).fetch_all(c).await?;
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

    async fn audit(c: &mut SqliteConnection, shop: Option<&ShopId>) -> sqlx::Result<(Vec<AuditRow>, Vec<AuditRow>)> {
        let shop = shop.map(|s| s.as_str());
        let rows = sqlx::query(q!("audit")).bind(shop).fetch_all(&mut *c).await?;
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
        let orphans = sqlx::query(q!("audit_orphans")).bind(shop).fetch_all(c).await?;
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
