//! The PostgreSQL store (13 and later). Transactions run at READ COMMITTED,
//! PostgreSQL's default: every statement sees what committed before it, which
//! the slow path relies on to find rows other refills committed meanwhile.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, AuditRow, Backend, IdempotencyKey, ItemId, LocationId, LocationLevel, Quantities, ReservationId,
    ReservationStatus, ShopId, Ttl,
};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Executor, PgPool, Postgres, Row};

use crate::dialect::{Dialect, Fast, Fault, Folded, Head, Ledger, Taken, Tx, TxMode, Want};
use crate::migrate::Migration;

#[derive(Debug)]
pub struct Pg;

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("migrations/0001_init.sql") },
    Migration { version: 2, name: "tokens", sql: include_str!("migrations/0002_tokens.sql") },
    Migration { version: 3, name: "modes", sql: include_str!("migrations/0003_modes.sql") },
];

/// A statement's text from `queries/`, raw (for templates that are built
/// into the statement sent).
macro_rules! raw {
    ($name:literal) => {
        include_str!(concat!("queries/", $name, ".sql"))
    };
}

/// A statement that starts with `queries/pick_units.sql` (the units each
/// line locks) and goes on with `queries/<name>.sql`: the fast path and the
/// slow path pick units with the same text.
macro_rules! after_pick {
    ($name:literal) => {
        concat!(raw!("pick_units"), raw!($name))
    };
}

/// A statement from `queries/` with the comment naming who sends it (see
/// `tag.rs`); a temporary, so use it where the statement is sent.
macro_rules! q {
    ($name:literal) => {
        &*crate::tag::sql(raw!($name))
    };
}

fn text<T: ToString>(v: &T) -> String {
    v.to_string()
}

fn name<T: std::str::FromStr<Err = holdfast_core::Invalid>>(row: &PgRow, col: &str) -> sqlx::Result<T> {
    let s: String = row.try_get(col)?;
    s.parse().map_err(|e: holdfast_core::Invalid| sqlx::Error::Decode(Box::new(e)))
}

fn head(row: &PgRow) -> sqlx::Result<Head> {
    let status: String = row.try_get("status")?;
    Ok(Head {
        id: ReservationId::new(row.try_get("id")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        key: name::<IdempotencyKey>(row, "idempotency_key")?,
        fingerprint: row.try_get("fingerprint")?,
        status: ReservationStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown status {status:?}").into()))?,
        expires_at: row.try_get("expires_at")?,
        expired: row.try_get("expired")?,
    })
}

/// `pick_units.sql` + `take_units.sql` with a plain `FOR UPDATE`: the same statement, waiting for
/// rows other transactions hold instead of skipping them.
static TAKE_UNITS_WAITING: LazyLock<String> = LazyLock::new(|| {
    let sql = after_pick!("take_units");
    assert!(sql.contains("\n        FOR UPDATE SKIP LOCKED\n"));
    sql.replacen("\n        FOR UPDATE SKIP LOCKED\n", "\n        FOR UPDATE\n", 1)
});

/// `lock_ledgers.sql` ending in another locking clause.
fn lock_ledgers_with(clause: &str) -> String {
    let sql = raw!("lock_ledgers").trim_end();
    let base = sql.strip_suffix("FOR UPDATE").expect("lock_ledgers.sql ends with FOR UPDATE");
    format!("{base}{clause}")
}

/// Skips ledger rows a refill holds (`Dialect::lock_ledgers_skip`).
static LOCK_LEDGERS_SKIP: LazyLock<String> = LazyLock::new(|| lock_ledgers_with("FOR UPDATE SKIP LOCKED"));
/// Waits for them with the weakest lock, which an autocommit statement gives
/// back at once (`Dialect::await_ledgers`).
static AWAIT_LEDGERS: LazyLock<String> = LazyLock::new(|| lock_ledgers_with("FOR KEY SHARE"));

async fn ledgers<'e, E: sqlx::PgExecutor<'e>>(
    c: E,
    shop: &ShopId,
    spec: &[(ItemId, Option<LocationId>)],
    sql: &'static str,
) -> sqlx::Result<Vec<Ledger>> {
    let items: Vec<String> = spec.iter().map(|(i, _)| text(i)).collect();
    let locs: Vec<Option<String>> = spec.iter().map(|(_, l)| l.as_ref().map(text)).collect();
    let sql = crate::tag::sql(sql);
    let rows = sqlx::query(&sql).bind(shop.as_str()).bind(items).bind(locs).fetch_all(c).await?;
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

async fn take(c: &mut PgConnection, shop: &ShopId, wants: &[Want], sql: &'static str) -> sqlx::Result<Vec<Taken>> {
    let items: Vec<String> = wants.iter().map(|w| text(&w.item)).collect();
    let locs: Vec<Option<String>> = wants.iter().map(|w| w.location.as_ref().map(text)).collect();
    let qtys: Vec<i32> = wants.iter().map(|w| w.qty as i32).collect();
    let sql = crate::tag::sql(sql);
    let rows = sqlx::query(&sql).bind(shop.as_str()).bind(items).bind(locs).bind(qtys).fetch_all(c).await?;
    rows.iter()
        .map(|r| {
            Ok(Taken {
                item: name(r, "item_id")?,
                location: name(r, "location_id")?,
                count: r.try_get::<i64, _>("n")? as u32,
            })
        })
        .collect()
}

impl Dialect for Pg {
    type Db = Postgres;
    const BACKEND: Backend = Backend::Postgres;
    const ONE_STATEMENT_FAST_PATH: bool = true;

    async fn begin(pool: &PgPool, mode: TxMode) -> sqlx::Result<Tx<Self>> {
        match mode {
            TxMode::Write => pool.begin_with(crate::tag::sql("BEGIN")).await,
            // One snapshot for every statement of a report.
            TxMode::Snapshot => {
                pool.begin_with(crate::tag::sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")).await
            }
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
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Fault::Connection,
            _ => Fault::Other,
        }
    }

    async fn migrate(pool: &PgPool) -> sqlx::Result<()> {
        let mut tx = pool.begin_with(crate::tag::sql("BEGIN")).await?;
        // Serialises concurrent `migrate` runs on one database.
        sqlx::query(&crate::tag::sql("SELECT pg_advisory_xact_lock(7304961)")).execute(&mut *tx).await?;
        sqlx::query(&crate::tag::sql(
            "CREATE TABLE IF NOT EXISTS holdfast_migrations (
                 version integer PRIMARY KEY, name text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now())",
        ))
        .execute(&mut *tx)
        .await?;
        let done: Vec<i32> =
            sqlx::query_scalar(&crate::tag::sql("SELECT version FROM holdfast_migrations")).fetch_all(&mut *tx).await?;
        for m in MIGRATIONS {
            if !done.contains(&m.version) {
                // A plain string runs as a simple query: several statements.
                (&mut *tx).execute(&*crate::tag::sql(m.sql)).await?;
                sqlx::query(&crate::tag::sql("INSERT INTO holdfast_migrations (version, name) VALUES ($1, $2)"))
                    .bind(m.version)
                    .bind(m.name)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await
    }

    async fn reserve_fast(
        pool: &PgPool,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        wants: &[Want],
    ) -> sqlx::Result<Fast> {
        let items: Vec<String> = wants.iter().map(|w| text(&w.item)).collect();
        let locs: Vec<Option<String>> = wants.iter().map(|w| w.location.as_ref().map(text)).collect();
        let qtys: Vec<i32> = wants.iter().map(|w| w.qty as i32).collect();
        let rows = sqlx::query(&crate::tag::sql(after_pick!("reserve_fast")))
            .bind(shop.as_str())
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(ttl.as_secs() as i64)
            .fetch_all(pool)
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
        let taken = rows
            .iter()
            .map(|r| {
                Ok(Taken {
                    item: name(r, "item_id")?,
                    location: name(r, "location_id")?,
                    count: r.try_get::<i32, _>("n")? as u32,
                })
            })
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Fast::Held {
            id: ReservationId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
            expires_at: first.try_get("expires_at")?,
            taken,
        })
    }

    async fn take_units(c: &mut PgConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Taken>> {
        take(c, shop, wants, after_pick!("take_units")).await
    }

    async fn take_units_waiting(c: &mut PgConnection, shop: &ShopId, wants: &[Want]) -> sqlx::Result<Vec<Taken>> {
        take(c, shop, wants, &TAKE_UNITS_WAITING).await
    }

    async fn lock_ledgers(
        c: &mut PgConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Vec<Ledger>> {
        ledgers(c, shop, spec, raw!("lock_ledgers")).await
    }

    async fn lock_ledgers_skip(
        c: &mut PgConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Vec<Ledger>> {
        ledgers(c, shop, spec, &LOCK_LEDGERS_SKIP).await
    }

    async fn await_ledgers(pool: &PgPool, shop: &ShopId, spec: &[(ItemId, Option<LocationId>)]) -> sqlx::Result<()> {
        ledgers(pool, shop, spec, &AWAIT_LEDGERS).await.map(|_| ())
    }

    async fn available(
        c: &mut PgConnection,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> sqlx::Result<Option<Vec<(ItemId, LocationId, i64)>>> {
        let items: Vec<String> = spec.iter().map(|(i, _)| text(i)).collect();
        let locs: Vec<Option<String>> = spec.iter().map(|(_, l)| l.as_ref().map(text)).collect();
        let rows = sqlx::query(q!("available")).bind(shop.as_str()).bind(items).bind(locs).fetch_all(c).await?;
        let rows = rows
            .iter()
            .map(|r| Ok((name(r, "item_id")?, name(r, "location_id")?, r.try_get::<i64, _>("available")?)))
            .collect::<sqlx::Result<Vec<_>>>()?;
        Ok(Some(rows))
    }

    async fn ensure_ledger(
        c: &mut PgConnection,
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

    async fn write_ledger(c: &mut PgConnection, shop: &ShopId, row: &Ledger) -> sqlx::Result<()> {
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

    async fn expire_at(c: &mut PgConnection, shop: &ShopId, item: &ItemId, location: &LocationId) -> sqlx::Result<u64> {
        let n: i64 = sqlx::query_scalar(q!("expire_at"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_one(c)
            .await?;
        Ok(n as u64)
    }

    async fn fold(c: &mut PgConnection, shop: &ShopId, item: &ItemId, location: &LocationId) -> sqlx::Result<Folded> {
        let r = sqlx::query(q!("fold"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_one(c)
            .await?;
        Ok(Folded { restocked: r.try_get("restocked")?, settled: r.try_get("settled")? })
    }

    async fn refill(
        c: &mut PgConnection,
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
            .bind(cap as i32)
            .bind(n)
            .execute(c)
            .await?;
        Ok(done.rows_affected())
    }

    async fn in_flight(c: &mut PgConnection, shop: &ShopId, item: &ItemId, location: &LocationId) -> sqlx::Result<i64> {
        sqlx::query_scalar(q!("in_flight"))
            .bind(shop.as_str())
            .bind(item.as_str())
            .bind(location.as_str())
            .fetch_one(c)
            .await
    }

    async fn insert_reservation(
        c: &mut PgConnection,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        lines: &[Allocation],
    ) -> sqlx::Result<Option<(ReservationId, DateTime<Utc>)>> {
        let items: Vec<String> = lines.iter().map(|l| text(&l.item)).collect();
        let locs: Vec<String> = lines.iter().map(|l| text(&l.location)).collect();
        let qtys: Vec<i32> = lines.iter().map(|l| l.quantity as i32).collect();
        let row = sqlx::query(q!("insert_reservation"))
            .bind(shop.as_str())
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(ttl.as_secs() as i64)
            .bind(items)
            .bind(locs)
            .bind(qtys)
            .fetch_optional(c)
            .await?;
        row.map(|r| {
            Ok((
                ReservationId::new(r.try_get("id")?).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                r.try_get("expires_at")?,
            ))
        })
        .transpose()
    }

    async fn find_by_key(c: &mut PgConnection, shop: &ShopId, key: &IdempotencyKey) -> sqlx::Result<Option<Head>> {
        let row = sqlx::query(q!("find_by_key")).bind(shop.as_str()).bind(key.as_str()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    async fn head(c: &mut PgConnection, shop: &ShopId, id: ReservationId, lock: bool) -> sqlx::Result<Option<Head>> {
        let sql = crate::tag::sql(if lock { raw!("head_for_update") } else { raw!("head") });
        let row = sqlx::query(&sql).bind(shop.as_str()).bind(id.get()).fetch_optional(c).await?;
        row.as_ref().map(head).transpose()
    }

    async fn lines(c: &mut PgConnection, shop: &ShopId, id: ReservationId) -> sqlx::Result<Vec<Allocation>> {
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
        c: &mut PgConnection,
        shop: &ShopId,
        id: ReservationId,
        status: ReservationStatus,
        state: &'static str,
    ) -> sqlx::Result<()> {
        sqlx::query(q!("transition"))
            .bind(shop.as_str())
            .bind(id.get())
            .bind(status.as_str())
            .bind(state)
            .execute(c)
            .await?;
        Ok(())
    }

    async fn extend(c: &mut PgConnection, shop: &ShopId, id: ReservationId, ttl: Ttl) -> sqlx::Result<DateTime<Utc>> {
        sqlx::query_scalar(q!("extend"))
            .bind(shop.as_str())
            .bind(id.get())
            .bind(ttl.as_secs() as i64)
            .fetch_one(c)
            .await
    }

    async fn sweep(c: &mut PgConnection, limit: u32) -> sqlx::Result<u64> {
        let n: i64 = sqlx::query_scalar(q!("sweep")).bind(limit as i64).fetch_one(c).await?;
        Ok(n as u64)
    }

    async fn levels(c: &mut PgConnection, shop: &ShopId, item: &ItemId) -> sqlx::Result<Vec<LocationLevel>> {
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

    async fn audit(c: &mut PgConnection, shop: Option<&ShopId>) -> sqlx::Result<(Vec<AuditRow>, Vec<AuditRow>)> {
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
