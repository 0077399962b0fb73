//! The PostgreSQL store (13 and later). Transactions run at READ COMMITTED,
//! PostgreSQL's default: every statement sees what committed before it, which
//! the slow path relies on to find rows other refills committed meanwhile.
//! Reports read one snapshot (REPEATABLE READ READ ONLY). Lists travel as
//! arrays, and a step that is several statements elsewhere is one statement
//! with writable CTEs here.

use chrono::{DateTime, Utc};
use holdfast_core::{Allocation, Backend, IdempotencyKey, ReservationId, ReservationStatus, ReserveRequest, ShopId};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Postgres, Row};

use crate::dialect::{
    Conn, Dialect, Fast, Fault, Folded, Gone, Inserted, Ledger, LedgerLock, LineState, Spec, Stmt, Taken, Unit, Want,
};
use crate::migrate::{Migration, migrations};
use crate::run;
use crate::tag;

/// PostgreSQL; `POOLED`: reached through a pooler in transaction mode
/// (`?pooler=transaction`), which needs statements sent unnamed.
#[derive(Debug)]
pub struct Pg<const POOLED: bool = false>;

/// A statement: kept prepared on its connection, or sent unnamed behind a
/// pooler (`POOLED`).
/// For the rest of the transaction, statements are planned for the values
/// bound (docs/design.md, "Plans"). The sweep and the purge are statements
/// whose best plan depends on one: their LIMIT. A generic plan assumes a tenth of the table's
/// matching rows and joins their lines through hash joins over whole-table
/// scans, so each batch got slower as the tables grew — a purge took 230 ms
/// for 500 rows at 230k rows under a sale, and retention fell behind for
/// good. Planned for the batch given, they go by primary key (7 ms).
async fn custom_plan<const POOLED: bool>(c: &mut PgConnection) -> sqlx::Result<()> {
    query::<POOLED>(&tag::sql("SET LOCAL plan_cache_mode = force_custom_plan")).execute(c).await?;
    Ok(())
}

fn query<const POOLED: bool>(sql: &str) -> sqlx::query::Query<'_, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql).persistent(!POOLED)
}

/// A statement's text from `queries/`.
macro_rules! raw {
    ($name:literal) => {
        include_str!(concat!("queries/", $name, ".sql"))
    };
}

/// The locking clauses the statements below are built with: taking pool or
/// ledger rows other transactions hold is skipping them, waiting for them, or
/// (ledger rows only) waiting until they are free and holding nothing.
macro_rules! skip_locked {
    () => {
        "FOR UPDATE SKIP LOCKED\n"
    };
}
macro_rules! wait_locked {
    () => {
        "FOR UPDATE\n"
    };
}

/// `pick_units.sql`, its locking clause, and the rest of the statement.
macro_rules! picked {
    ($clause:expr, $rest:literal) => {
        concat!(raw!("pick_units"), $clause, raw!("pick_units_end"), raw!($rest))
    };
}

const TAKE_UNITS: &str = picked!(skip_locked!(), "take_units");
const TAKE_UNITS_WAITING: &str = picked!(wait_locked!(), "take_units");
const RESERVE_FAST: &str = picked!(skip_locked!(), "reserve_fast");
const PICK_BATCH: &str = picked!(skip_locked!(), "pick_batch");

const LOCK_LEDGERS: &str = concat!(raw!("lock_ledgers"), raw!("candidates"), wait_locked!());
const LOCK_LEDGERS_SKIP: &str = concat!(raw!("lock_ledgers"), raw!("candidates"), skip_locked!());
/// The weakest row lock, which an autocommit statement gives back at once.
const AWAIT_LEDGERS: &str = concat!(raw!("lock_ledgers"), raw!("candidates"), "FOR KEY SHARE\n");
const AVAILABLE: &str = concat!(raw!("available"), raw!("candidates"));

const LEVELS: &str = concat!(raw!("ledger_terms"), raw!("levels"));
const AUDIT: &str = concat!(raw!("ledger_terms"), raw!("audit"));

const EXPIRE_AT: &str = concat!(raw!("expire_at"), raw!("expire_due"));
const SWEEP: &str = concat!(raw!("sweep"), raw!("expire_due"));

fn text<T: ToString>(v: &T) -> String {
    v.to_string()
}

/// Runs a statement over a shop's wants ($1 shop, then the wants' items,
/// locations and quantities as arrays), as the pick and the takes are.
async fn by_wants<const P: bool>(
    c: &mut PgConnection,
    sql: &'static str,
    shop: &ShopId,
    wants: &[Want],
) -> sqlx::Result<Vec<PgRow>> {
    let (items, locs, qtys) = want_arrays(wants);
    query::<P>(&tag::sql(sql)).bind(shop.as_str()).bind(items).bind(locs).bind(qtys).fetch_all(c).await
}

/// The three parallel arrays a cart's wants travel in.
fn want_arrays(wants: &[Want]) -> (Vec<String>, Vec<Option<String>>, Vec<i32>) {
    (
        wants.iter().map(|w| text(&w.item)).collect(),
        wants.iter().map(|w| w.location.as_ref().map(text)).collect(),
        wants.iter().map(|w| w.qty as i32).collect(),
    )
}

/// The two parallel arrays of candidate (item, location) pairs.
fn spec_arrays(spec: &Spec) -> (Vec<String>, Vec<Option<String>>) {
    (spec.iter().map(|(i, _)| text(i)).collect(), spec.iter().map(|(_, l)| l.as_ref().map(text)).collect())
}

impl<const P: bool> Dialect for Pg<P> {
    type Db = Postgres;
    const BACKEND: Backend = Backend::Postgres;
    const ONE_STATEMENT_FAST_PATH: bool = true;
    const STATEMENT_CACHE: bool = !P;

    /// The UPDATEs driven by a list of ids are planned on each run: joined
    /// to the list or filtered by it, a table can always be scanned instead,
    /// and a generic plan made while it was small would scan it for good
    /// (docs/design.md, "Plans").
    fn cached(stmt: Stmt) -> bool {
        !P && !matches!(stmt, Stmt::WebhookLease | Stmt::WebhookRecordMany)
    }
    const MIGRATE_LOCK_IN_TX: Option<&'static str> = if P { Some(raw!("migrate_lock_tx")) } else { None };
    const MIGRATIONS: &'static [Migration] = migrations!(1 "0001_init", 2 "0002_tokens", 3 "0003_modes", 4 "0004_retention", 5 "0005_webhooks", 6 "0006_refills", 7 "0007_inventory_watch");
    const BEGIN_MIGRATION: &'static str = "BEGIN";
    /// Said explicitly, not left to the server's default_transaction_isolation.
    const BEGIN_WRITE: &'static str = "BEGIN ISOLATION LEVEL READ COMMITTED";
    const BEGIN_SNAPSHOT: &'static str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

    queries!(Levels => LEVELS, Audit => AUDIT);

    /// Levels are judged by the server's clock alone: the caller's time
    /// is not bound.
    fn placeholders(stmt: Stmt) -> Option<&'static [usize]> {
        match stmt {
            Stmt::Levels => Some(&[0, 1]),
            _ => None,
        }
    }

    fn fault(err: &sqlx::Error) -> Fault {
        match err {
            sqlx::Error::Database(db) => match db.code().as_deref() {
                Some("40P01" | "40001") => Fault::Deadlock,
                Some("55P03") => Fault::Busy,
                Some(c) if c.starts_with("08") || c.starts_with("57P") => Fault::Connection,
                _ => Fault::Other,
            },
            e => crate::dialect::plumbing_fault(e),
        }
    }

    async fn reserve_fast(c: &mut PgConnection, req: &ReserveRequest, wants: &[Want]) -> sqlx::Result<Fast> {
        let (shop, key, fingerprint, ttl) = (req.shop(), req.key(), req.fingerprint(), req.ttl());
        let (items, locs, qtys) = want_arrays(wants);
        let rows = query::<P>(&tag::sql(RESERVE_FAST))
            .bind(shop.as_str())
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .bind(key.as_str())
            .bind(&fingerprint)
            .bind(ttl.as_secs() as i64)
            .fetch_all(c)
            .await;
        let rows = match rows {
            // A concurrent request inserted the same key first; this
            // statement was aborted whole.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23505") => return Ok(Fast::KeyTaken),
            other => other?,
        };
        let Some(first) = rows.first() else {
            return Err(sqlx::Error::Protocol("reserve_fast returned no row".into()));
        };
        if first.try_get::<bool, _>("key_taken")? {
            return Ok(Fast::KeyTaken);
        }
        let Some(id) = first.try_get::<Option<i64>, _>("id")? else {
            return Ok(Fast::Short);
        };
        let taken = rows.iter().map(run::taken::<Self>).collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Fast::Held { id: run::reservation_id(id)?, expires_at: first.try_get("expires_at")?, taken })
    }

    async fn take_units(
        c: &mut PgConnection,
        shop: &ShopId,
        wants: &[Want],
        waiting: bool,
    ) -> sqlx::Result<Vec<Taken>> {
        let rows = by_wants::<P>(c, if waiting { TAKE_UNITS_WAITING } else { TAKE_UNITS }, shop, wants).await?;
        rows.iter().map(run::taken::<Self>).collect()
    }

    async fn pick_units(c: &mut PgConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Unit>> {
        Ok(Self::pick_batch(c, shop, wants, &[]).await?.0)
    }

    async fn pick_batch(
        c: &mut PgConnection,
        shop: &ShopId,
        wants: &[Want],
        keys: &[&IdempotencyKey],
    ) -> sqlx::Result<(Vec<Unit>, Vec<IdempotencyKey>)> {
        let (items, locs, qtys) = want_arrays(wants);
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let rows = query::<P>(&tag::sql(PICK_BATCH))
            .bind(shop.as_str())
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .bind(keys)
            .fetch_all(c)
            .await?;
        let (mut units, mut used) = (Vec::new(), Vec::new());
        for r in &rows {
            match r.try_get::<Option<String>, _>("idempotency_key")? {
                Some(_) => used.push(run::name::<Postgres, IdempotencyKey>(r, "idempotency_key")?),
                None => units.push(run::unit::<Postgres>(r)?),
            }
        }
        Ok((units, used))
    }

    async fn delete_units(c: &mut PgConnection, shop: &ShopId, units: &[Unit]) -> sqlx::Result<()> {
        Self::hold_batch(c, shop, units, &[]).await.map(drop)
    }

    async fn keys_used(
        c: &mut PgConnection,
        shop: &ShopId,
        keys: &[&IdempotencyKey],
    ) -> sqlx::Result<Vec<IdempotencyKey>> {
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let rows = query::<P>(&tag::sql(raw!("keys_used"))).bind(shop.as_str()).bind(keys).fetch_all(c).await?;
        rows.iter().map(|r| run::name::<Postgres, IdempotencyKey>(r, "idempotency_key")).collect()
    }

    async fn insert_holds(
        c: &mut PgConnection,
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>> {
        let Some((first, _)) = holds.first() else { return Ok(Vec::new()) };
        Self::hold_batch(c, first.shop(), &[], holds).await
    }

    async fn hold_batch(
        c: &mut PgConnection,
        shop: &ShopId,
        given: &[Unit],
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>> {
        let keys: Vec<&str> = holds.iter().map(|(r, _)| r.key().as_str()).collect();
        let fingerprints: Vec<String> = holds.iter().map(|(r, _)| r.fingerprint()).collect();
        let ttls: Vec<i64> = holds.iter().map(|(r, _)| r.ttl().as_secs() as i64).collect();
        let (mut of, mut items, mut locs, mut qtys) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (r, lines) in holds {
            for l in lines {
                of.push(r.key().as_str());
                items.push(l.item.as_str());
                locs.push(l.location.as_str());
                qtys.push(l.quantity as i32);
            }
        }
        let rows = query::<P>(&tag::sql(raw!("hold_batch")))
            .bind(shop.as_str())
            .bind(keys)
            .bind(fingerprints)
            .bind(ttls)
            .bind(of)
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .bind(given.iter().map(|u| u.item.as_str()).collect::<Vec<_>>())
            .bind(given.iter().map(|u| u.location.as_str()).collect::<Vec<_>>())
            .bind(given.iter().map(|u| u.id).collect::<Vec<i64>>())
            .fetch_all(c)
            .await?;
        let mut made = std::collections::HashMap::new();
        for r in &rows {
            made.insert(
                r.try_get::<String, _>("idempotency_key")?,
                (run::reservation_id(r.try_get("id")?)?, r.try_get("expires_at")?),
            );
        }
        holds
            .iter()
            .map(|(r, _)| {
                made.get(r.key().as_str())
                    .copied()
                    .ok_or_else(|| sqlx::Error::Protocol("hold_batch: a hold was not inserted".into()))
            })
            .collect()
    }

    async fn lock_ledgers(
        c: &mut PgConnection,
        shop: &ShopId,
        spec: &Spec,
        lock: LedgerLock,
    ) -> sqlx::Result<Vec<Ledger>> {
        let (items, locs) = spec_arrays(spec);
        let sql = tag::sql(match lock {
            LedgerLock::Wait => LOCK_LEDGERS,
            LedgerLock::Skip => LOCK_LEDGERS_SKIP,
            LedgerLock::Await | LedgerLock::Share => AWAIT_LEDGERS,
        });
        let rows = query::<P>(&sql).bind(shop.as_str()).bind(items).bind(locs).fetch_all(c).await?;
        rows.iter().map(run::ledger::<Self>).collect()
    }

    async fn available(c: &mut PgConnection, shop: &ShopId, spec: &Spec) -> sqlx::Result<crate::dialect::Available> {
        let (items, locs) = spec_arrays(spec);
        let rows = query::<P>(&tag::sql(AVAILABLE)).bind(shop.as_str()).bind(items).bind(locs).fetch_all(c).await?;
        run::available::<Self>(&rows)
    }

    async fn expire_at(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Gone> {
        let (item, location) = (&at.item, &at.location);
        let sql = tag::sql(EXPIRE_AT);
        let rows =
            query::<P>(&sql).bind(shop.as_str()).bind(item.as_str()).bind(location.as_str()).fetch_all(c).await?;
        run::gone::<Postgres>(&rows)
    }

    async fn sweep(c: &mut PgConnection, limit: u32) -> sqlx::Result<Gone> {
        custom_plan::<P>(c).await?;
        let rows = query::<P>(&tag::sql(SWEEP)).bind(limit as i64).fetch_all(c).await?;
        run::gone::<Postgres>(&rows)
    }

    async fn purge(c: &mut PgConnection, older_than: std::time::Duration, limit: u32) -> sqlx::Result<u64> {
        custom_plan::<P>(c).await?;
        let row = query::<P>(&tag::sql(raw!("purge")))
            .bind(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX))
            .bind(limit as i64)
            .fetch_one(c)
            .await?;
        Ok(row.try_get::<i64, _>(0)? as u64)
    }

    async fn fold(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> sqlx::Result<Folded> {
        let (item, location) = (&at.item, &at.location);
        let r = query::<P>(&tag::sql(raw!("fold")))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_one(c)
            .await?;
        Ok(Folded { restocked: r.try_get("restocked")?, settled: r.try_get("settled")? })
    }

    async fn insert_hold(c: &mut Conn<Self>, req: &ReserveRequest, lines: &[Allocation]) -> sqlx::Result<Inserted> {
        let (shop, key, fingerprint, ttl) = (req.shop(), req.key(), req.fingerprint(), req.ttl());
        let items: Vec<String> = lines.iter().map(|l| text(&l.item)).collect();
        let locs: Vec<String> = lines.iter().map(|l| text(&l.location)).collect();
        let qtys: Vec<i32> = lines.iter().map(|l| l.quantity as i32).collect();
        let row: Option<PgRow> = query::<P>(&tag::sql(raw!("insert_reservation")))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(&fingerprint)
            .bind(ttl.as_secs() as i64)
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .fetch_optional(c)
            .await?;
        row.map(|r| Ok((run::reservation_id(r.try_get("id")?)?, r.try_get("expires_at")?))).transpose()
    }

    async fn transition(
        c: &mut PgConnection,
        shop: &ShopId,
        ids: &[ReservationId],
        status: ReservationStatus,
        state: LineState,
    ) -> sqlx::Result<()> {
        // An UPDATE driven by a list has no form whose generic plan stays
        // right as the tables grow: sent unnamed, it is planned on each run
        // (docs/design.md, "Plans").
        sqlx::query(&tag::sql(raw!("transition")))
            .persistent(false)
            .bind(shop.as_str())
            .bind(run::id_list(ids))
            .bind(status.as_str())
            .bind(state.as_str())
            .execute(c)
            .await?;
        Ok(())
    }
}
