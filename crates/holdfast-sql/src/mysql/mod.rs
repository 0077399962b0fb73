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

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, Backend, IdempotencyKey, ItemId, LocationId, MAX_LINES, ReservationId, ReservationStatus,
    ReserveRequest, ShopId,
};
use serde_json::json;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError, MySqlRow};
use sqlx::{MySql, Row};

use crate::dialect::{
    Conn, Dialect, Fast, Fault, Folded, Gone, Inserted, Ledger, LedgerLock, LineState, Spec, Stmt, Taken, Unit, Want,
};
use crate::driver::{Arg, Driver};
use crate::migrate::{Migration, migrations};
use crate::run;
use crate::tag;

#[derive(Debug)]
pub struct My;

/// A statement's text from `queries/`.
macro_rules! raw {
    ($name:literal) => {
        include_str!(concat!("queries/", $name, ".sql"))
    };
}

/// One branch of `take_units.sql` per want: skipping rows other
/// transactions hold, or waiting for them (under the ledger lock).
const TAKE_BRANCH: &str = concat!("(", raw!("take_units_branch"), "FOR UPDATE SKIP LOCKED)");
const TAKE_BRANCH_WAITING: &str = concat!("(", raw!("take_units_branch"), "FOR UPDATE)");

/// The candidates of `lock_ledgers.sql` and `available.sql`: one exact
/// primary-key range per candidate.
const CANDIDATE_AT: &str = "(l.item_id = ? AND l.location_id = ?)";
const CANDIDATE_ANYWHERE: &str = "(l.item_id = ?)";
const CANDIDATES_ORDER: &str = "ORDER BY l.item_id, l.location_id\n";

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

/// The whole cart's take as one statement (`take_units.sql`), built once per
/// number of wants and kind of lock.
fn take_units_sql(n: usize, waiting: bool) -> &'static str {
    static BUILT: [OnceLock<String>; 2 * MAX_LINES] = [const { OnceLock::new() }; 2 * MAX_LINES];
    let slot = &BUILT[(n.clamp(1, MAX_LINES) - 1) * 2 + waiting as usize];
    slot.get_or_init(|| {
        let branch = if waiting { TAKE_BRANCH_WAITING } else { TAKE_BRANCH };
        let mut sql = String::from(raw!("take_units"));
        sql.push_str(&vec![branch; n].join("\nUNION ALL\n"));
        sql
    })
}

/// `head` (`lock_ledgers.sql` or `available.sql`) with one range per
/// candidate, ORed, then the order and `clause`, and its arguments.
fn with_candidates<'a>(head: &str, shop: &'a ShopId, spec: &'a Spec, clause: &str) -> (String, Vec<Arg<'a>>) {
    let ranges: Vec<&str> =
        spec.iter().map(|(_, l)| if l.is_some() { CANDIDATE_AT } else { CANDIDATE_ANYWHERE }).collect();
    let sql = format!("{head}  AND ({})\n{CANDIDATES_ORDER}{clause}", ranges.join(" OR "));
    let mut args = vec![Arg::Text(shop.as_str())];
    for (item, location) in spec {
        args.push(Arg::Text(item.as_str()));
        if let Some(l) = location {
            args.push(Arg::Text(l.as_str()));
        }
    }
    (tag::owned(sql), args)
}

/// Up to `qty` free unit rows for every want, locked (skipping rows other
/// transactions hold, or waiting for them): one locking SELECT for the whole
/// cart, or per [`MAX_LINES`] wants of a batch.
async fn pick(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want], waiting: bool) -> sqlx::Result<Vec<Unit>> {
    let mut units = Vec::new();
    for chunk in wants.chunks(MAX_LINES) {
        let sql = tag::sql(take_units_sql(chunk.len(), waiting));
        let mut args = Vec::with_capacity(chunk.len() * 6);
        for w in chunk {
            let location = Arg::MaybeText(w.location.as_ref().map(|l| l.as_str()));
            let (s, i) = (Arg::Text(shop.as_str()), Arg::Text(w.item.as_str()));
            args.extend([s, i, location, s, i, Arg::Int(w.qty.into())]);
        }
        for r in MySql::fetch(c, &sql, &args).await? {
            units.push(run::unit::<MySql>(&r)?);
        }
    }
    Ok(units)
}

/// Deletes unit rows this transaction locked: one DELETE naming them.
async fn delete(c: &mut MySqlConnection, shop: &ShopId, units: &[Unit]) -> sqlx::Result<()> {
    let picked: Vec<_> =
        units.iter().map(|u| json!({"item": u.item.as_str(), "location": u.location.as_str(), "id": u.id})).collect();
    let picked = serde_json::Value::Array(picked).to_string();
    MySql::execute(c, &tag::sql(raw!("delete_units")), &[Arg::Text(&picked), Arg::Text(shop.as_str())]).await?;
    Ok(())
}

/// Takes and deletes unit rows for every want: [`pick`], then [`delete`].
async fn take(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want], waiting: bool) -> sqlx::Result<Vec<Taken>> {
    let units = pick(c, shop, wants, waiting).await?;
    if units.is_empty() {
        return Ok(Vec::new());
    }
    delete(c, shop, &units).await?;
    let mut counts: BTreeMap<(&ItemId, &LocationId), u32> = BTreeMap::new();
    for u in &units {
        *counts.entry((&u.item, &u.location)).or_default() += 1;
    }
    Ok(counts
        .into_iter()
        .map(|((item, location), count)| Taken { item: item.clone(), location: location.clone(), count })
        .collect())
}

/// A batch's keys as holds_by_key.sql reads them, and its rows by key.
async fn holds_by_key(
    c: &mut MySqlConnection,
    shop: &ShopId,
    keys: &[&IdempotencyKey],
) -> sqlx::Result<HashMap<IdempotencyKey, (ReservationId, DateTime<Utc>)>> {
    let list = json!(keys.iter().map(|k| k.as_str()).collect::<Vec<_>>()).to_string();
    let rows = MySql::fetch(c, &tag::sql(raw!("holds_by_key")), &[Arg::Text(&list), Arg::Text(shop.as_str())]).await?;
    rows.iter()
        .map(|r| {
            let key = run::name::<MySql, IdempotencyKey>(r, "idempotency_key")?;
            Ok((key, (run::reservation_id(MySql::int(r, "id")?)?, MySql::time(r, "expires_at")?)))
        })
        .collect()
}

/// A hold's lines as insert_lines.sql reads them.
fn lines_json(id: ReservationId, lines: &[Allocation]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|l| json!({"id": id.get(), "item": l.item.as_str(), "location": l.location.as_str(), "qty": l.quantity}))
        .collect()
}

/// A cart's wants as the stored procedures read them.
fn wants_json(wants: &[Want]) -> serde_json::Value {
    wants
        .iter()
        .map(|w| json!({"item": w.item.as_str(), "location": w.location.as_ref().map(|l| l.as_str()), "qty": w.qty}))
        .collect()
}

/// Runs `stmt` (expire_ids.sql, purge_ids.sql) on the reservations a
/// locking read returned as (shop_id, id) rows, passed as a JSON array of
/// `{shop, id}`; returns how many rows there were.
async fn on_rows(c: &mut MySqlConnection, stmt: &'static str, rows: &[MySqlRow]) -> sqlx::Result<u64> {
    if rows.is_empty() {
        return Ok(0);
    }
    let ids = rows
        .iter()
        .map(|r| Ok(json!({"shop": MySql::text(r, "shop_id")?, "id": MySql::int(r, "id")?})))
        .collect::<sqlx::Result<Vec<_>>>()?;
    let ids = serde_json::Value::Array(ids).to_string();
    MySql::execute(c, &tag::sql(stmt), &[Arg::Text(&ids)]).await?;
    Ok(rows.len() as u64)
}

/// Expires the holds a locking read returned as (shop_id, id) rows.
async fn expire_rows(c: &mut MySqlConnection, rows: &[MySqlRow]) -> sqlx::Result<Gone> {
    on_rows(c, raw!("expire_ids"), rows).await?;
    run::gone::<MySql>(rows)
}

impl Dialect for My {
    type Db = MySql;
    const BACKEND: Backend = Backend::MySql;
    const ONE_STATEMENT_FAST_PATH: bool = true;
    const MIGRATIONS: &'static [Migration] = migrations!(
        1 "0001_init", 2 "0002_tokens", 3 "0003_modes", 4 "0004_reserve_fast", 5 "0005_reserve_batch",
        6 "0006_drop_reserve_batch", 7 "0007_retention", 8 "0008_webhooks", 9 "0009_refills", 10 "0010_inventory_watch"
    );
    /// DDL commits implicitly; the migrations are written to run again.
    const BEGIN_MIGRATION: &'static str = "BEGIN";
    /// READ COMMITTED for this transaction only (see the module doc for
    /// why). `SET TRANSACTION` without SESSION applies to the next
    /// transaction on the connection; sqlx sends both statements in one
    /// round trip (text protocol, multi-statements), and checks that a
    /// transaction is open afterwards.
    const BEGIN_WRITE: &'static str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";
    /// One consistent snapshot for every statement, taken at once, and a
    /// time just before it, which `levels.sql` reads.
    const BEGIN_SNAPSHOT: &'static str = "SET @snapshot_after = UTC_TIMESTAMP(6); \
        SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY";

    queries!();

    /// `?` is positional here: a parameter used twice is bound twice.
    fn placeholders(stmt: Stmt) -> Option<&'static [usize]> {
        Some(match stmt {
            Stmt::HeadForUpdate | Stmt::Lines => &[1, 0],
            Stmt::Levels => &[0, 1, 0, 1, 1, 0, 0, 1],
            Stmt::Audit => &[0, 0, 0, 0, 0, 0],
            Stmt::WriteLedger => &[3, 4, 5, 6, 0, 1, 2],
            Stmt::HotItems => &[0, 1],
            Stmt::ItemPool => &[0, 1, 0, 1],
            Stmt::Refill => &[0, 1, 2, 3, 3, 0, 1, 2, 4],
            Stmt::InFlight => &[1, 2, 3, 0, 0, 1, 2, 0, 1, 2, 4],
            Stmt::Extend => &[2, 0, 1],
            Stmt::LegacyRows => &[0, 0, 1, 1],
            Stmt::LegacySwapOnHand => &[4, 0, 1, 2, 3],
            Stmt::LegacyFulfil => &[3, 3, 0, 1, 2, 3],
            Stmt::LegacyCommit => &[3, 0, 1, 2],
            Stmt::LegacyPut => &[3, 4, 0, 1, 2],
            Stmt::OutboxInsert => &[1, 1, 0],
            Stmt::WatchLock | Stmt::WatchSet => &[1, 0],
            Stmt::WebhookLease => &[0, 1, 1],
            Stmt::WebhookRecord => &[2, 3, 2, 3, 4, 5, 0, 1],
            Stmt::WebhookDisable => &[1, 0],
            Stmt::WebhookList => &[0, 1, 1, 2],
            Stmt::WebhookRetry => &[2, 0, 1],
            _ => return None,
        })
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
            e => crate::dialect::plumbing_fault(e),
        }
    }

    /// One CALL of the stored procedure of migration 0004 (its comment
    /// says why, and what both servers do with it).
    async fn reserve_fast(c: &mut MySqlConnection, req: &ReserveRequest, wants: &[Want]) -> sqlx::Result<Fast> {
        let (shop, key, fingerprint, ttl) = (req.shop(), req.key(), req.fingerprint(), req.ttl());
        let lines = wants_json(wants);
        let rows = sqlx::query(&tag::sql(raw!("reserve_fast")))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(&fingerprint)
            .bind(ttl.as_secs() as i64)
            .bind(lines.to_string())
            .fetch_all(c)
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
                let bad = |e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e));
                let item: ItemId = field(v, "item").parse().map_err(bad)?;
                let location: LocationId = field(v, "location").parse().map_err(bad)?;
                let count = wants.iter().find(|w| w.item == item).map(|w| w.qty).unwrap_or(0);
                Ok(Taken { item, location, count })
            })
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Fast::Held { id: run::reservation_id(row.try_get(2)?)?, expires_at: row.try_get(3)?, taken })
    }

    async fn take_units(
        c: &mut MySqlConnection,
        shop: &ShopId,
        wants: &[Want],
        waiting: bool,
    ) -> sqlx::Result<Vec<Taken>> {
        take(c, shop, wants, waiting).await
    }

    async fn pick_units(c: &mut MySqlConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Unit>> {
        pick(c, shop, wants, false).await
    }

    async fn delete_units(c: &mut MySqlConnection, shop: &ShopId, units: &[Unit]) -> sqlx::Result<()> {
        delete(c, shop, units).await
    }

    async fn keys_used(
        c: &mut MySqlConnection,
        shop: &ShopId,
        keys: &[&IdempotencyKey],
    ) -> sqlx::Result<Vec<IdempotencyKey>> {
        Ok(holds_by_key(c, shop, keys).await?.into_keys().collect())
    }

    async fn insert_holds(
        c: &mut MySqlConnection,
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>> {
        let Some((first, _)) = holds.first() else { return Ok(Vec::new()) };
        let shop = first.shop();
        let list: Vec<_> = holds
            .iter()
            .map(|(r, _)| json!({"key": r.key().as_str(), "fp": r.fingerprint(), "ttl": r.ttl().as_secs()}))
            .collect();
        let list = serde_json::Value::Array(list).to_string();
        MySql::execute(c, &tag::sql(raw!("insert_holds")), &[Arg::Text(shop.as_str()), Arg::Text(&list)]).await?;
        let keys: Vec<&IdempotencyKey> = holds.iter().map(|(r, _)| r.key()).collect();
        let made = holds_by_key(c, shop, &keys).await?;
        let mut out = Vec::with_capacity(holds.len());
        for (req, _) in holds {
            out.push(
                *made
                    .get(req.key())
                    .ok_or_else(|| sqlx::Error::Protocol("insert_holds: a hold was not inserted".into()))?,
            );
        }
        let lines: Vec<_> = holds.iter().zip(&out).flat_map(|((_, lines), (id, _))| lines_json(*id, lines)).collect();
        let lines = serde_json::Value::Array(lines).to_string();
        MySql::execute(c, &tag::sql(raw!("insert_lines")), &[Arg::Text(shop.as_str()), Arg::Text(&lines)]).await?;
        Ok(out)
    }

    async fn lock_ledgers(
        c: &mut MySqlConnection,
        shop: &ShopId,
        spec: &Spec,
        lock: LedgerLock,
    ) -> sqlx::Result<Vec<Ledger>> {
        if spec.is_empty() {
            return Ok(Vec::new());
        }
        let clause = match lock {
            LedgerLock::Wait => "FOR UPDATE",
            LedgerLock::Skip => "FOR UPDATE SKIP LOCKED",
            // Sent in autocommit (Await), the shared lock goes with the
            // statement; in a transaction (Share), with the transaction.
            LedgerLock::Await | LedgerLock::Share => "LOCK IN SHARE MODE",
        };
        let (sql, args) = with_candidates(raw!("lock_ledgers"), shop, spec, clause);
        MySql::fetch(c, &sql, &args).await?.iter().map(run::ledger::<Self>).collect()
    }

    async fn available(c: &mut MySqlConnection, shop: &ShopId, spec: &Spec) -> sqlx::Result<crate::dialect::Available> {
        if spec.is_empty() {
            return Ok((Vec::new(), false));
        }
        let (sql, args) = with_candidates(raw!("available"), shop, spec, "");
        run::available::<Self>(&MySql::fetch(c, &sql, &args).await?)
    }

    async fn expire_at(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Gone> {
        let (item, location) = (&at.item, &at.location);
        let rows = MySql::fetch(c, &tag::sql(raw!("expire_at")), &run::place(shop, item, location)).await?;
        expire_rows(c, &rows).await
    }

    async fn sweep(c: &mut MySqlConnection, limit: u32) -> sqlx::Result<Gone> {
        let rows = MySql::fetch(c, &tag::sql(raw!("sweep")), &[Arg::Int(limit.into())]).await?;
        expire_rows(c, &rows).await
    }

    async fn purge(c: &mut MySqlConnection, older_than: std::time::Duration, limit: u32) -> sqlx::Result<u64> {
        let ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let rows = MySql::fetch(c, &tag::sql(raw!("purge")), &[Arg::Int(ms), Arg::Int(limit.into())]).await?;
        on_rows(c, raw!("purge_ids"), &rows).await
    }

    async fn fold(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Folded> {
        let (item, location) = (&at.item, &at.location);
        let place = run::place(shop, item, location);
        let rows = MySql::fetch(c, &tag::sql(raw!("fold")), &place).await?;
        if rows.is_empty() {
            return Ok(Folded::default());
        }
        let mut folded = Folded::default();
        let mut ids = Vec::with_capacity(rows.len());
        for r in &rows {
            let quantity = MySql::int(r, "quantity")?;
            match MySql::text(r, "state")?.as_str() {
                "returned" => folded.restocked += quantity,
                _ => folded.settled += quantity,
            }
            ids.push(MySql::int(r, "reservation_id")?);
        }
        let ids = json!(ids).to_string();
        let args = [Arg::Text(&ids), place[0], place[1], place[2]];
        MySql::execute(c, &tag::sql(raw!("fold_mark")), &args).await?;
        Ok(folded)
    }

    async fn insert_hold(c: &mut Conn<Self>, req: &ReserveRequest, lines: &[Allocation]) -> sqlx::Result<Inserted> {
        let (shop, key, fingerprint, ttl) = (req.shop(), req.key(), req.fingerprint(), req.ttl());
        let done = sqlx::query(&tag::sql(raw!("insert_reservation")))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(&fingerprint)
            .bind(ttl.as_secs() as i64)
            .execute(&mut *c)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let id = run::reservation_id(done.last_insert_id() as i64)?;
        let lines = serde_json::Value::Array(lines_json(id, lines)).to_string();
        MySql::execute(c, &tag::sql(raw!("insert_lines")), &[Arg::Text(shop.as_str()), Arg::Text(&lines)]).await?;
        // No INSERT … RETURNING on MySQL: read the database's expiry back.
        let head = run::head_of::<Self>(c, shop, id).await?;
        Ok(head.map(|h| (id, h.expires_at)))
    }

    async fn transition(
        c: &mut MySqlConnection,
        shop: &ShopId,
        ids: &[ReservationId],
        status: ReservationStatus,
        state: LineState,
    ) -> sqlx::Result<()> {
        let ids = run::id_list(ids);
        let args = [Arg::Text(&ids), Arg::Text(shop.as_str()), Arg::Text(status.as_str()), Arg::Text(state.as_str())];
        MySql::execute(c, &tag::sql(raw!("transition")), &args).await?;
        Ok(())
    }
}
