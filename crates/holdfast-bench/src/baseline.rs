//! The baselines holdfast is measured against, built as carefully as holdfast
//! itself (they are benchmark fixtures, not product features):
//!
//! * `counter` — one row per (item, location) holding the available quantity.
//!   A reserve is `UPDATE … SET available = available - n WHERE … AND
//!   available >= n` plus the same durable hold record holdfast writes, in one
//!   transaction: every checkout of a hot item queues on that row's lock, held
//!   across the round trips of the transaction.
//! * `ceiling` — one durable single-row INSERT per request: the rate of
//!   commits the database can do at that concurrency, the upper bound for any
//!   design that commits once per request.
//!
//! Both run on PostgreSQL and MySQL/MariaDB with SQL written for each.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use holdfast_core::Error;
use sqlx::{MySqlPool, PgPool, Row};

use crate::target::{Books, Target, TargetStats};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Ceiling,
}

#[derive(Debug)]
enum Pool {
    Pg(PgPool),
    My(MySqlPool),
}

/// A baseline on one database; `run` names its rows so runs never mix.
#[derive(Debug)]
pub struct Baseline {
    kind: Kind,
    pool: Pool,
    run: String,
    stock: AtomicU64,
    retries: AtomicU64,
    deadlocks: AtomicU64,
}

fn db_err(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => Error::Unavailable(e.to_string()),
        e => Error::Internal(e.to_string()),
    }
}

/// Deadlock or serialization failure: PostgreSQL 40P01/40001, MySQL 1213.
fn is_deadlock(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(d.code().as_deref(), Some("40P01" | "40001")) || {
                d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().is_some_and(|m| m.number() == 1213)
            }
        }
        _ => false,
    }
}

/// The rows a statement changed, whichever database ran it (each driver
/// has its own result type).
trait RowsAffected {
    fn rows(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

/// The counter's reserve, in one transaction on either database: `take`
/// moves the units off the run's counter row (no row changed: fewer units
/// are left, and the transaction is rolled back), then `hold` writes the
/// hold record and gives its id.
async fn take_then_hold<DB>(
    mut tx: sqlx::Transaction<'_, DB>,
    take: impl AsyncFnOnce(&mut DB::Connection) -> Result<DB::QueryResult, sqlx::Error>,
    hold: impl AsyncFnOnce(&mut DB::Connection) -> Result<i64, sqlx::Error>,
) -> Result<Option<i64>, sqlx::Error>
where
    DB: sqlx::Database,
    DB::QueryResult: RowsAffected,
{
    if take(&mut tx).await?.rows() == 0 {
        tx.rollback().await?;
        return Ok(None);
    }
    let id = hold(&mut tx).await?;
    tx.commit().await?;
    Ok(Some(id))
}

/// `$body` once for each database, with `$p` its pool and `$sql` the
/// statement written for it: the pools' types differ, the code on them
/// does not.
macro_rules! on_pool {
    ($pool:expr, $pg:expr, $my:expr, |$p:ident, $sql:ident| $body:expr) => {
        match $pool {
            Pool::Pg($p) => {
                let $sql = $pg;
                $body
            }
            Pool::My($p) => {
                let $sql = $my;
                $body
            }
        }
    };
}

const PG_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bench_counter (
    run text NOT NULL PRIMARY KEY,
    available bigint NOT NULL CHECK (available >= 0));
CREATE TABLE IF NOT EXISTS bench_holds (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run text NOT NULL, key text NOT NULL, quantity integer NOT NULL,
    status text NOT NULL, expires_at timestamptz NOT NULL,
    UNIQUE (run, key));
CREATE TABLE IF NOT EXISTS bench_ceiling (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run text NOT NULL, key text NOT NULL, at timestamptz NOT NULL DEFAULT now());";

const MY_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bench_counter (
    run VARCHAR(64) NOT NULL PRIMARY KEY,
    available BIGINT NOT NULL CHECK (available >= 0)) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS bench_holds (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run VARCHAR(64) NOT NULL, `key` VARCHAR(128) NOT NULL, quantity INT NOT NULL,
    status VARCHAR(16) NOT NULL, expires_at DATETIME(6) NOT NULL,
    UNIQUE KEY run_key (run, `key`)) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS bench_ceiling (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run VARCHAR(64) NOT NULL, `key` VARCHAR(128) NOT NULL,
    at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB;";

impl Baseline {
    /// Connects to `url` (postgres:// or mysql://) and creates the tables.
    pub async fn connect(kind: Kind, url: &str, max_connections: u32, run: &str) -> Result<Self, Error> {
        let pool = if url.starts_with("postgres") {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(max_connections)
                .connect(url)
                .await
                .map_err(db_err)?;
            sqlx::raw_sql(PG_SCHEMA).execute(&pool).await.map_err(db_err)?;
            Pool::Pg(pool)
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(max_connections)
                .connect(&url)
                .await
                .map_err(db_err)?;
            sqlx::raw_sql(MY_SCHEMA).execute(&pool).await.map_err(db_err)?;
            Pool::My(pool)
        } else {
            return Err(Error::Invalid(holdfast_core::Invalid::new(
                "database_url",
                "the counter and ceiling baselines run on postgres:// or mysql://",
            )));
        };
        Ok(Self {
            kind,
            pool,
            run: run.to_string(),
            stock: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            deadlocks: AtomicU64::new(0),
        })
    }

    async fn counter_reserve(&self, key: &str, qty: u32) -> Result<Option<i64>, sqlx::Error> {
        match &self.pool {
            Pool::Pg(p) => {
                take_then_hold(
                    p.begin().await?,
                    async |c| {
                        sqlx::query(
                            "UPDATE bench_counter SET available = available - $2 WHERE run = $1 AND available >= $2",
                        )
                        .bind(&self.run)
                        .bind(qty as i64)
                        .execute(c)
                        .await
                    },
                    async |c| {
                        sqlx::query_scalar(
                            "INSERT INTO bench_holds (run, key, quantity, status, expires_at)
                             VALUES ($1, $2, $3, 'held', now() + interval '10 minutes') RETURNING id",
                        )
                        .bind(&self.run)
                        .bind(key)
                        .bind(qty as i32)
                        .fetch_one(c)
                        .await
                    },
                )
                .await
            }
            Pool::My(p) => {
                take_then_hold(
                    p.begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION").await?,
                    async |c| {
                        sqlx::query(
                            "UPDATE bench_counter SET available = available - ? WHERE run = ? AND available >= ?",
                        )
                        .bind(qty as i64)
                        .bind(&self.run)
                        .bind(qty as i64)
                        .execute(c)
                        .await
                    },
                    async |c| {
                        let done = sqlx::query(
                            "INSERT INTO bench_holds (run, `key`, quantity, status, expires_at)
                             VALUES (?, ?, ?, 'held', UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE)",
                        )
                        .bind(&self.run)
                        .bind(key)
                        .bind(qty as i32)
                        .execute(c)
                        .await?;
                        Ok(done.last_insert_id() as i64)
                    },
                )
                .await
            }
        }
    }

    async fn ceiling_insert(&self, key: &str) -> Result<Option<i64>, sqlx::Error> {
        let id = match &self.pool {
            Pool::Pg(p) => {
                sqlx::query_scalar("INSERT INTO bench_ceiling (run, key) VALUES ($1, $2) RETURNING id")
                    .bind(&self.run)
                    .bind(key)
                    .fetch_one(p)
                    .await?
            }
            Pool::My(p) => sqlx::query("INSERT INTO bench_ceiling (run, `key`) VALUES (?, ?)")
                .bind(&self.run)
                .bind(key)
                .execute(p)
                .await?
                .last_insert_id() as i64,
        };
        Ok(Some(id))
    }

    /// Claim: the hold row only; the counter row already counts the units.
    async fn counter_claim(&self, id: i64) -> Result<u64, sqlx::Error> {
        let sql_pg = "UPDATE bench_holds SET status = 'claimed' WHERE id = $1 AND status = 'held' RETURNING quantity";
        let sql_my = "UPDATE bench_holds SET status = 'claimed' WHERE id = ? AND status = 'held'";
        match &self.pool {
            Pool::Pg(p) => {
                let q: Option<i32> = sqlx::query_scalar(sql_pg).bind(id).fetch_optional(p).await?;
                Ok(q.unwrap_or(0) as u64)
            }
            Pool::My(p) => {
                sqlx::query(sql_my).bind(id).execute(p).await?;
                let q: i32 =
                    sqlx::query_scalar("SELECT quantity FROM bench_holds WHERE id = ?").bind(id).fetch_one(p).await?;
                Ok(q as u64)
            }
        }
    }

    /// Release: the hold row and the units back on the counter, in one
    /// transaction (hold row first, then the hot row, as reserve does).
    async fn counter_release(&self, id: i64) -> Result<(), sqlx::Error> {
        match &self.pool {
            Pool::Pg(p) => {
                let mut tx = p.begin().await?;
                let q: Option<i32> = sqlx::query_scalar(
                    "UPDATE bench_holds SET status = 'released' WHERE id = $1 AND status = 'held' RETURNING quantity",
                )
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(q) = q {
                    sqlx::query("UPDATE bench_counter SET available = available + $2 WHERE run = $1")
                        .bind(&self.run)
                        .bind(q as i64)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await
            }
            Pool::My(p) => {
                let mut tx = p.begin_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION").await?;
                let q: Option<i32> =
                    sqlx::query_scalar("SELECT quantity FROM bench_holds WHERE id = ? AND status = 'held' FOR UPDATE")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                if let Some(q) = q {
                    sqlx::query("UPDATE bench_holds SET status = 'released' WHERE id = ?")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("UPDATE bench_counter SET available = available + ? WHERE run = ?")
                        .bind(q as i64)
                        .bind(&self.run)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await
            }
        }
    }

    /// Retries deadlocks like holdfast does, counting them.
    async fn retrying<T, F, Fut>(&self, mut f: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if is_deadlock(&e) && attempt < 20 => {
                    self.deadlocks.fetch_add(1, Ordering::Relaxed);
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(std::time::Duration::from_millis(attempt)).await;
                }
                Err(e) => return Err(db_err(e)),
            }
        }
    }
}

#[async_trait]
impl Target for Baseline {
    async fn setup(&self, stock: u32) -> Result<(), Error> {
        self.stock.store(stock as u64, Ordering::Relaxed);
        if self.kind == Kind::Ceiling {
            return Ok(());
        }
        on_pool!(
            &self.pool,
            "INSERT INTO bench_counter (run, available) VALUES ($1, $2)
             ON CONFLICT (run) DO UPDATE SET available = EXCLUDED.available",
            "INSERT INTO bench_counter (run, available) VALUES (?, ?)
             ON DUPLICATE KEY UPDATE available = VALUES(available)",
            |p, sql| sqlx::query(sql)
                .bind(&self.run)
                .bind(stock as i64)
                .execute(p)
                .await
                .map(|_| ())
                .map_err(db_err)?
        );
        Ok(())
    }

    async fn reserve(&self, key: &str, qty: u32) -> Result<Option<i64>, Error> {
        match self.kind {
            Kind::Counter => self.retrying(|| self.counter_reserve(key, qty)).await,
            Kind::Ceiling => self.retrying(|| self.ceiling_insert(key)).await,
        }
    }

    async fn claim(&self, id: i64) -> Result<u64, Error> {
        match self.kind {
            Kind::Counter => self.retrying(|| self.counter_claim(id)).await,
            Kind::Ceiling => Ok(0),
        }
    }

    async fn release(&self, id: i64) -> Result<(), Error> {
        match self.kind {
            Kind::Counter => self.retrying(|| self.counter_release(id)).await,
            Kind::Ceiling => Ok(()),
        }
    }

    /// The counter's books: its row and the hold records. The ceiling keeps
    /// no stock: each request "holds" one record, and the books are the
    /// count of records.
    async fn books(&self) -> Result<Books, Error> {
        let stock = self.stock.load(Ordering::Relaxed) as i64;
        if self.kind == Kind::Ceiling {
            let n: i64 = on_pool!(
                &self.pool,
                "SELECT count(*) FROM bench_ceiling WHERE run = $1",
                "SELECT COUNT(*) FROM bench_ceiling WHERE run = ?",
                |p, sql| sqlx::query_scalar(sql).bind(&self.run).fetch_one(p).await.map_err(db_err)?
            );
            return Ok(Books { committed: 0, reserved: n, available: stock - n, audit_ok: Some(n <= stock) });
        }
        let (available, committed, reserved): (i64, i64, i64) = match &self.pool {
            Pool::Pg(p) => {
                let r = sqlx::query(
                    "SELECT (SELECT available FROM bench_counter WHERE run = $1) AS available,
                            COALESCE(sum(quantity) FILTER (WHERE status = 'claimed'), 0)::bigint AS committed,
                            COALESCE(sum(quantity) FILTER (WHERE status = 'held'), 0)::bigint AS reserved
                     FROM bench_holds WHERE run = $1",
                )
                .bind(&self.run)
                .fetch_one(p)
                .await
                .map_err(db_err)?;
                (r.get("available"), r.get("committed"), r.get("reserved"))
            }
            Pool::My(p) => {
                let r = sqlx::query(
                    "SELECT (SELECT available FROM bench_counter WHERE run = ?) AS available,
                            CAST(COALESCE(SUM(CASE WHEN status = 'claimed' THEN quantity END), 0) AS SIGNED) AS committed,
                            CAST(COALESCE(SUM(CASE WHEN status = 'held' THEN quantity END), 0) AS SIGNED) AS reserved
                     FROM bench_holds WHERE run = ?",
                )
                .bind(&self.run)
                .bind(&self.run)
                .fetch_one(p)
                .await
                .map_err(db_err)?;
                (r.get("available"), r.get("committed"), r.get("reserved"))
            }
        };
        Ok(Books { committed, reserved, available, audit_ok: Some(available + committed + reserved == stock) })
    }

    async fn stats(&self) -> TargetStats {
        TargetStats {
            retries: self.retries.load(Ordering::Relaxed),
            deadlocks: self.deadlocks.load(Ordering::Relaxed),
            ..TargetStats::default()
        }
    }
}
