//! Schema migrations: numbered SQL files per dialect, applied in order and
//! recorded in `holdfast_migrations`, so `holdfast migrate` is idempotent.
//! One runner for every dialect: a lock that serialises concurrent runs on
//! one database (an advisory lock, `GET_LOCK`, or SQLite's write lock taken
//! by each migration's `BEGIN IMMEDIATE`), then each missing migration in a
//! transaction of its own, checked again inside it.

use sqlx::Connection;

use crate::dialect::{Dialect, Stmt};
use crate::driver::Driver;
use crate::run;
use crate::tag;

/// One schema step of one dialect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The migrations of a dialect module: `migrations!(1 "0001_init")` reads
/// `migrations/0001_init.sql` as version 1.
macro_rules! migrations {
    ($($version:literal $name:literal),* $(,)?) => {
        &[$(crate::migrate::Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("migrations/", $name, ".sql")),
        }),*]
    };
}
pub(crate) use migrations;

pub(crate) async fn run<D: Dialect>(pool: &sqlx::Pool<D::Db>) -> sqlx::Result<()> {
    if let Some(lock) = D::MIGRATE_LOCK_IN_TX {
        return in_transactions::<D>(pool, lock).await;
    }
    let mut c = pool.acquire().await?;
    let locked = run::rows::<D>(&mut c, Stmt::MigrateLock, &[]).await?;
    if locked.is_empty() {
        return Err(sqlx::Error::Protocol("another `holdfast migrate` held the migration lock for 60 s".into()));
    }
    let outcome = apply::<D>(&mut c).await;
    let unlocked = run::rows::<D>(&mut c, Stmt::MigrateUnlock, &[]).await;
    outcome.and(unlocked.map(|_| ()))
}

/// Behind a pooler: the table, then each migration, in a transaction of its
/// own that first takes `lock`, so that the transaction is the lock's scope.
async fn in_transactions<D: Dialect>(pool: &sqlx::Pool<D::Db>, lock: &'static str) -> sqlx::Result<()> {
    let mut tx = pool.begin_with(tag::sql(D::BEGIN_MIGRATION)).await?;
    D::Db::execute_as(&mut *tx, &tag::sql(lock), &[], false).await?;
    run::exec::<D>(&mut *tx, Stmt::MigrationsTable, &[]).await?;
    tx.commit().await?;
    for m in D::MIGRATIONS {
        let mut tx = pool.begin_with(tag::sql(D::BEGIN_MIGRATION)).await?;
        D::Db::execute_as(&mut *tx, &tag::sql(lock), &[], false).await?;
        apply_one::<D>(&mut tx, m).await?;
        tx.commit().await?;
    }
    Ok(())
}

async fn apply<D: Dialect>(c: &mut <D::Db as sqlx::Database>::Connection) -> sqlx::Result<()> {
    run::exec::<D>(c, Stmt::MigrationsTable, &[]).await?;
    for m in D::MIGRATIONS {
        let mut tx = c.begin_with(tag::sql(D::BEGIN_MIGRATION)).await?;
        apply_one::<D>(&mut tx, m).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Applies `m` unless it is recorded, and records it, in the caller's
/// transaction.
async fn apply_one<D: Dialect>(c: &mut <D::Db as sqlx::Database>::Connection, m: &Migration) -> sqlx::Result<()> {
    if run::rows::<D>(c, Stmt::MigrationApplied, &[i64::from(m.version).into()]).await?.is_empty() {
        // Several statements in one text: sent as a script. DDL commits
        // implicitly on MySQL; its migrations are written to run again.
        D::Db::script(c, &tag::sql(m.sql)).await?;
        run::exec::<D>(c, Stmt::MigrationRecord, &[i64::from(m.version).into(), m.name.into()]).await?;
    }
    Ok(())
}
