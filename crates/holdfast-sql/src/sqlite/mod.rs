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

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, Backend, Error, IdempotencyKey, ReservationId, ReservationStatus, ReserveRequest, ShopId,
};
use serde_json::json;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Sqlite, SqlitePool};

use crate::ConnectOptions;
use crate::dialect::{
    Conn, Dialect, Fault, Folded, Gone, Inserted, Ledger, LedgerLock, LineState, Spec, Taken, Unit, Want,
};
use crate::driver::{Arg, Driver};
use crate::migrate::{Migration, migrations};
use crate::run;
use crate::tag;

#[derive(Debug)]
pub struct Lite;

/// How long a writer waits for another process to let go of the write lock
/// before the attempt fails as busy (and the engine retries it).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A statement's text from `queries/`, with the comment naming who sends it.
macro_rules! q {
    ($name:literal) => {
        &*tag::sql(include_str!(concat!("queries/", $name, ".sql")))
    };
    // A statement whose text is followed by a shared fragment.
    ($name:literal + $tail:literal) => {
        &*tag::sql(concat!(
            include_str!(concat!("queries/", $name, ".sql")),
            include_str!(concat!("queries/", $tail, ".sql"))
        ))
    };
}

/// Candidate (item, location) pairs as the JSON array `lock_ledgers.sql`
/// and `available.sql` read: `[item, location or null]` each.
fn spec_json(spec: &Spec) -> String {
    json!(spec.iter().map(|(i, l)| json!([i.as_str(), l.as_ref().map(|l| l.as_str())])).collect::<Vec<_>>()).to_string()
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

/// Moves the held units of the reservations `rows` named (columns `shop_id`
/// and `id`, as expire_at and sweep return them) to `state`.
async fn move_held(c: &mut SqliteConnection, rows: &[SqliteRow], state: LineState) -> sqlx::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    Sqlite::execute(c, q!("move_held"), &[Arg::Text(&id_pairs(rows)?), Arg::Text(state.as_str())]).await?;
    Ok(())
}

/// (shop_id, id) rows as the JSON array `[[shop_id, id], …]` that
/// move_held.sql and purge_lines.sql read.
fn id_pairs(rows: &[SqliteRow]) -> sqlx::Result<String> {
    let ids = rows
        .iter()
        .map(|r| Ok(json!([Sqlite::text(r, "shop_id")?, Sqlite::int(r, "id")?])))
        .collect::<sqlx::Result<Vec<_>>>()?;
    Ok(json!(ids).to_string())
}

/// A hold's lines as insert_lines.sql reads them.
fn lines_json(id: ReservationId, lines: &[Allocation]) -> Vec<serde_json::Value> {
    lines.iter().map(|l| json!([id.get(), l.item.as_str(), l.location.as_str(), l.quantity])).collect()
}

impl Dialect for Lite {
    type Db = Sqlite;
    const BACKEND: Backend = Backend::Sqlite;
    const MIGRATIONS: &'static [Migration] = migrations!(1 "0001_init", 2 "0002_tokens", 3 "0003_modes", 4 "0004_retention", 5 "0005_webhooks", 6 "0006_refills", 7 "0007_inventory_watch");
    /// The write lock serialises concurrent `migrate` runs on one file.
    const BEGIN_MIGRATION: &'static str = "BEGIN IMMEDIATE";
    /// The write lock now, not at the first write: a deferred transaction
    /// that read first could find, when it writes, that another writer got in
    /// between (SQLITE_BUSY_SNAPSHOT), and everything it read would be stale.
    /// Waits up to BUSY_TIMEOUT.
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    /// Deferred: under WAL a reader sees one snapshot from its first read to
    /// its end and neither blocks nor waits for the writer.
    const BEGIN_SNAPSHOT: &'static str = "BEGIN";

    queries!();

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
            e => crate::dialect::plumbing_fault(e),
        }
    }

    /// The writer holds the whole database: nothing to skip or wait for.
    /// Pick and delete: under the write lock nothing can take the rows
    /// between the two statements.
    async fn take_units(
        c: &mut SqliteConnection,
        shop: &ShopId,
        wants: &[Want],
        _waiting: bool,
    ) -> sqlx::Result<Vec<Taken>> {
        let units = Self::pick_units(c, shop, wants).await?;
        if !units.is_empty() {
            Self::delete_units(c, shop, &units).await?;
        }
        let mut taken: Vec<Taken> = Vec::new();
        for u in units {
            match taken.iter_mut().find(|t| t.item == u.item && t.location == u.location) {
                Some(t) => t.count += 1,
                None => taken.push(Taken { item: u.item, location: u.location, count: 1 }),
            }
        }
        Ok(taken)
    }

    async fn pick_units(c: &mut SqliteConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Unit>> {
        let want = json!(
            wants
                .iter()
                .map(|w| json!([w.item.as_str(), w.location.as_ref().map(|l| l.as_str()), w.qty]))
                .collect::<Vec<_>>()
        )
        .to_string();
        let rows = Sqlite::fetch(c, q!("pick_units"), &[Arg::Text(shop.as_str()), Arg::Text(&want)]).await?;
        rows.iter().map(run::unit::<Sqlite>).collect()
    }

    async fn delete_units(c: &mut SqliteConnection, shop: &ShopId, units: &[Unit]) -> sqlx::Result<()> {
        let list = json!(units.iter().map(|u| json!([u.item.as_str(), u.location.as_str(), u.id])).collect::<Vec<_>>())
            .to_string();
        Sqlite::execute(c, q!("delete_units"), &[Arg::Text(shop.as_str()), Arg::Text(&list)]).await?;
        Ok(())
    }

    async fn keys_used(
        c: &mut SqliteConnection,
        shop: &ShopId,
        keys: &[&IdempotencyKey],
    ) -> sqlx::Result<Vec<IdempotencyKey>> {
        let list = json!(keys.iter().map(|k| k.as_str()).collect::<Vec<_>>()).to_string();
        let rows = Sqlite::fetch(c, q!("keys_used"), &[Arg::Text(shop.as_str()), Arg::Text(&list)]).await?;
        rows.iter().map(|r| run::name::<Sqlite, IdempotencyKey>(r, "idempotency_key")).collect()
    }

    async fn insert_holds(
        c: &mut SqliteConnection,
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>> {
        let Some((first, _)) = holds.first() else { return Ok(Vec::new()) };
        let shop = first.shop();
        let list = json!(
            holds
                .iter()
                .map(|(r, _)| json!([r.key().as_str(), r.fingerprint(), r.ttl().as_secs()]))
                .collect::<Vec<_>>()
        )
        .to_string();
        let rows = Sqlite::fetch(c, q!("insert_holds"), &[Arg::Text(shop.as_str()), Arg::Text(&list)]).await?;
        let mut made: HashMap<String, (ReservationId, DateTime<Utc>)> = HashMap::new();
        for r in &rows {
            made.insert(
                Sqlite::text(r, "idempotency_key")?,
                (run::reservation_id(Sqlite::int(r, "id")?)?, Sqlite::time(r, "expires_at")?),
            );
        }
        let mut out = Vec::with_capacity(holds.len());
        for (req, _) in holds {
            out.push(
                *made
                    .get(req.key().as_str())
                    .ok_or_else(|| sqlx::Error::Protocol("insert_holds: a hold was not inserted".into()))?,
            );
        }
        let lines: Vec<_> = holds.iter().zip(&out).flat_map(|((_, lines), (id, _))| lines_json(*id, lines)).collect();
        Sqlite::execute(c, q!("insert_lines"), &[Arg::Text(shop.as_str()), Arg::Text(&json!(lines).to_string())])
            .await?;
        Ok(out)
    }

    /// One writer at a time: every kind of lock is the write lock this
    /// transaction already holds (and a reader waits for nobody).
    async fn lock_ledgers(
        c: &mut SqliteConnection,
        shop: &ShopId,
        spec: &Spec,
        _lock: LedgerLock,
    ) -> sqlx::Result<Vec<Ledger>> {
        let spec = spec_json(spec);
        let rows =
            Sqlite::fetch(c, q!("lock_ledgers" + "candidates"), &[Arg::Text(shop.as_str()), Arg::Text(&spec)]).await?;
        rows.iter().map(run::ledger::<Self>).collect()
    }

    async fn available(
        c: &mut SqliteConnection,
        shop: &ShopId,
        spec: &Spec,
    ) -> sqlx::Result<crate::dialect::Available> {
        let spec = spec_json(spec);
        let args = [Arg::Text(shop.as_str()), Arg::Text(&spec), Arg::Time(chrono::Utc::now())];
        run::available::<Self>(&Sqlite::fetch(c, q!("available" + "candidates"), &args).await?)
    }

    async fn expire_at(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Gone> {
        let (item, location) = (&at.item, &at.location);
        let gone = Sqlite::fetch(c, q!("expire_at"), &run::place(shop, item, location)).await?;
        move_held(c, &gone, LineState::Returned).await?;
        run::gone::<Sqlite>(&gone)
    }

    async fn sweep(c: &mut SqliteConnection, limit: u32) -> sqlx::Result<Gone> {
        let gone = Sqlite::fetch(c, q!("sweep"), &[Arg::Int(limit.into())]).await?;
        move_held(c, &gone, LineState::Returned).await?;
        run::gone::<Sqlite>(&gone)
    }

    async fn purge(c: &mut SqliteConnection, older_than: std::time::Duration, limit: u32) -> sqlx::Result<u64> {
        let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let gone = Sqlite::fetch(c, q!("purge"), &[Arg::Int(ms), Arg::Int(limit.into())]).await?;
        if !gone.is_empty() {
            Sqlite::execute(c, q!("purge_lines"), &[Arg::Text(&id_pairs(&gone)?)]).await?;
        }
        Ok(gone.len() as u64)
    }

    async fn fold(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Folded> {
        let (item, location) = (&at.item, &at.location);
        let rows = Sqlite::fetch(c, q!("fold"), &run::place(shop, item, location)).await?;
        let mut folded = Folded::default();
        for r in &rows {
            let quantity = Sqlite::int(r, "quantity")?;
            match Sqlite::text(r, "state")?.as_str() {
                "restocked" => folded.restocked += quantity,
                _ => folded.settled += quantity,
            }
        }
        Ok(folded)
    }

    async fn insert_hold(c: &mut Conn<Self>, req: &ReserveRequest, lines: &[Allocation]) -> sqlx::Result<Inserted> {
        let (shop, key, fingerprint, ttl) = (req.shop(), req.key(), req.fingerprint(), req.ttl());
        let args = [
            Arg::Text(shop.as_str()),
            Arg::Text(key.as_str()),
            Arg::Text(&fingerprint),
            Arg::Int(ttl.as_secs() as i64),
        ];
        let rows = Sqlite::fetch(c, q!("insert_reservation"), &args).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let id = run::reservation_id(Sqlite::int(row, "id")?)?;
        let lines = json!(lines_json(id, lines)).to_string();
        Sqlite::execute(c, q!("insert_lines"), &[Arg::Text(shop.as_str()), Arg::Text(&lines)]).await?;
        Ok(Some((id, Sqlite::time(row, "expires_at")?)))
    }

    async fn transition(
        c: &mut SqliteConnection,
        shop: &ShopId,
        ids: &[ReservationId],
        status: ReservationStatus,
        state: LineState,
    ) -> sqlx::Result<()> {
        let list = run::id_list(ids);
        let args = [Arg::Text(shop.as_str()), Arg::Text(&list), Arg::Text(status.as_str())];
        Sqlite::execute(c, q!("transition"), &args).await?;
        let ids = json!(ids.iter().map(|id| json!([shop.as_str(), id.get()])).collect::<Vec<_>>()).to_string();
        Sqlite::execute(c, q!("move_held"), &[Arg::Text(&ids), Arg::Text(state.as_str())]).await?;
        Ok(())
    }
}
