//! What a long run needs to know of the database besides the books: how
//! large holdfast's tables have grown, and whether the server cleans up
//! after them (PostgreSQL's autovacuum, InnoDB's purge backlog).

use std::time::Duration;

use async_trait::async_trait;
use holdfast_core::Error;
use serde::Serialize;

use crate::dialect::{Dialect, Stmt};
use crate::driver::Driver;
use crate::engine::SqlStore;
use crate::run::{self, plain};

/// One table with its indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableSize {
    pub table: String,
    pub bytes: u64,
}

/// The server's clean-up, where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ServerState {
    /// PostgreSQL: whether autovacuum is on.
    pub autovacuum: Option<bool>,
    /// MySQL/MariaDB: undo records of committed transactions not purged yet.
    pub history_list_length: Option<u64>,
}

/// One busy item, as the console shows it: its levels summed over its
/// locations, what sold in the window asked for, and its pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HotItem {
    pub shop: String,
    pub item: String,
    /// The pod the shop lives on, when serving pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    pub on_hand: i64,
    pub available: i64,
    /// Units in live holds.
    pub held: i64,
    pub committed: i64,
    /// Units claimed by reservations that finished within the window.
    pub sold_recently: i64,
    /// Unit rows in its pool now, over its locations.
    pub pool_rows: i64,
    /// How often its pool was refilled, since its ledger rows were made.
    pub refills: i64,
}

#[async_trait]
pub trait Housekeeping: Send + Sync + std::fmt::Debug {
    /// holdfast's tables, each with its indexes, in name order.
    async fn table_sizes(&self) -> Result<Vec<TableSize>, Error>;
    async fn server_state(&self) -> Result<ServerState, Error>;
    /// `(applied, latest)`: the schema version the database is at, and the
    /// one this build migrates to.
    async fn schema_version(&self) -> Result<(i64, i64), Error>;
    /// The busiest items: units claimed within `window` and units held now,
    /// busiest first, at most `limit`. Reads only recent reservations and
    /// live holds (two indexes), then each item's levels and pool, all in
    /// one snapshot on one connection (conn tag `console`).
    async fn hot_items(&self, window: Duration, limit: u32) -> Result<Vec<HotItem>, Error>;
}

#[async_trait]
impl<D: Dialect> Housekeeping for SqlStore<D> {
    async fn table_sizes(&self) -> Result<Vec<TableSize>, Error> {
        let rows = plain!(self, "housekeeping", |c| run::rows::<D>(c, Stmt::TableSizes, &[]))?;
        let mut sizes = rows
            .iter()
            .map(|r| Ok(TableSize { table: D::Db::text(r, "name")?, bytes: D::Db::int(r, "bytes")?.max(0) as u64 }))
            .collect::<sqlx::Result<Vec<_>>>()
            .map_err(run::plain_error::<D>)?;
        // Byte order, whatever the server's collation of its catalogue.
        sizes.sort_by(|a, b| a.table.cmp(&b.table));
        Ok(sizes)
    }

    async fn server_state(&self) -> Result<ServerState, Error> {
        let rows = plain!(self, "housekeeping", |c| run::rows::<D>(c, Stmt::ServerState, &[]))?;
        let Some(r) = rows.first() else {
            return Ok(ServerState { autovacuum: None, history_list_length: None });
        };
        let known = |v: i64| (v >= 0).then_some(v);
        let autovacuum = known(D::Db::int(r, "autovacuum").map_err(run::plain_error::<D>)?).map(|v| v == 1);
        let history = known(D::Db::int(r, "history_list_length").map_err(run::plain_error::<D>)?).map(|v| v as u64);
        Ok(ServerState { autovacuum, history_list_length: history })
    }

    async fn schema_version(&self) -> Result<(i64, i64), Error> {
        let rows = plain!(self, "housekeeping", |c| run::rows::<D>(c, Stmt::SchemaVersion, &[]))?;
        let applied = match rows.first() {
            Some(r) => D::Db::int(r, "version").map_err(run::plain_error::<D>)?,
            None => 0,
        };
        Ok((applied, D::MIGRATIONS.last().map_or(0, |m| i64::from(m.version))))
    }

    async fn hot_items(&self, window: Duration, limit: u32) -> Result<Vec<HotItem>, Error> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        self.op("console", true, || self.hot_items_once(window_ms, limit)).await
    }
}
