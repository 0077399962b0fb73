//! The shared statements ([`Stmt`]) sent and their rows decoded, once for
//! every dialect. Every text goes through `tag::sql`, so it carries the
//! comment naming the business process that sent it.

use std::collections::HashMap;
use std::str::FromStr;

use holdfast_core::{
    Allocation, AuditRow, IdempotencyKey, Invalid, ItemId, LocationId, LocationLevel, Quantities, ReservationId,
    ReservationStatus, ShopId,
};
use sqlx::Database;

use crate::dialect::{Conn, Dialect, Head, Ledger, Stmt, Taken};
use crate::driver::{Arg, Driver};
use crate::tag;

pub(crate) type Row<D> = <<D as Dialect>::Db as Database>::Row;

/// A connection for statements sent outside any transaction of the engine's:
/// the pool's connection as it is, or, behind a pooler in transaction mode
/// (`!D::STATEMENT_CACHE`), inside a transaction of its own — a pooler
/// keeps a client on one server connection only within a transaction, and
/// an unnamed statement is parsed and executed in two steps. [`done`] commits
/// it; dropped before, it is rolled back.
///
/// [`done`]: Solo::done
pub(crate) enum Solo<D: Dialect> {
    Conn(sqlx::pool::PoolConnection<D::Db>),
    Tx(crate::dialect::Tx<D>),
}

impl<D: Dialect> Solo<D> {
    pub(crate) async fn acquire(pool: &sqlx::Pool<D::Db>) -> sqlx::Result<Self> {
        Ok(match D::STATEMENT_CACHE {
            true => Solo::Conn(pool.acquire().await?),
            false => Solo::Tx(D::begin(pool, crate::dialect::TxMode::Write).await?),
        })
    }

    pub(crate) async fn done(self) -> sqlx::Result<()> {
        match self {
            Solo::Conn(_) => Ok(()),
            Solo::Tx(tx) => tx.commit().await,
        }
    }
}

impl<D: Dialect> std::ops::Deref for Solo<D> {
    type Target = Conn<D>;
    fn deref(&self) -> &Conn<D> {
        match self {
            Solo::Conn(c) => c,
            Solo::Tx(t) => t,
        }
    }
}

impl<D: Dialect> std::ops::DerefMut for Solo<D> {
    fn deref_mut(&mut self) -> &mut Conn<D> {
        match self {
            Solo::Conn(c) => &mut *c,
            Solo::Tx(t) => &mut *t,
        }
    }
}

/// The arguments of `stmt` in its placeholders' order.
fn ordered<'a, D: Dialect>(stmt: Stmt, args: &[Arg<'a>]) -> Vec<Arg<'a>> {
    match D::placeholders(stmt) {
        Some(order) => order.iter().map(|&i| args[i]).collect(),
        None => args.to_vec(),
    }
}

/// Sends a shared statement and returns its rows.
pub(crate) async fn rows<D: Dialect>(c: &mut Conn<D>, stmt: Stmt, args: &[Arg<'_>]) -> sqlx::Result<Vec<Row<D>>> {
    let sql = tag::sql(D::text(stmt));
    let args = ordered::<D>(stmt, args);
    D::Db::fetch_as(c, &sql, &args, D::cached(stmt)).await
}

/// Sends a shared statement and returns the rows it changed.
pub(crate) async fn exec<D: Dialect>(c: &mut Conn<D>, stmt: Stmt, args: &[Arg<'_>]) -> sqlx::Result<u64> {
    let sql = tag::sql(D::text(stmt));
    let args = ordered::<D>(stmt, args);
    D::Db::execute_as(c, &sql, &args, D::cached(stmt)).await
}

/// Every row, decoded.
pub(crate) async fn all<D: Dialect, T>(
    c: &mut Conn<D>,
    stmt: Stmt,
    args: &[Arg<'_>],
    decode: fn(&Row<D>) -> sqlx::Result<T>,
) -> sqlx::Result<Vec<T>> {
    rows::<D>(c, stmt, args).await?.iter().map(decode).collect()
}

fn bad<E: std::error::Error + Send + Sync + 'static>(e: E) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

/// A text column parsed into one of the domain's validated names.
pub(crate) fn name<D: Driver, T: FromStr<Err = Invalid>>(row: &D::Row, col: &str) -> sqlx::Result<T> {
    D::text(row, col)?.parse().map_err(bad)
}

/// A count or quantity that is never negative.
pub(crate) fn count<D: Driver>(row: &D::Row, col: &str) -> sqlx::Result<u32> {
    u32::try_from(D::int(row, col)?).map_err(bad)
}

pub(crate) fn reservation_id(id: i64) -> sqlx::Result<ReservationId> {
    ReservationId::new(id).map_err(bad)
}

/// `id, idempotency_key, fingerprint, status, expires_at, expired`.
pub(crate) fn head<D: Dialect>(row: &Row<D>) -> sqlx::Result<Head> {
    let status = D::Db::text(row, "status")?;
    Ok(Head {
        id: reservation_id(D::Db::int(row, "id")?)?,
        key: name::<D::Db, IdempotencyKey>(row, "idempotency_key")?,
        fingerprint: D::Db::text(row, "fingerprint")?,
        status: ReservationStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Decode(format!("unknown status {status:?}").into()))?,
        expires_at: D::Db::time(row, "expires_at")?,
        expired: D::Db::flag(row, "expired")?,
    })
}

/// `item_id, location_id`: the (item, location) a row is about.
fn item_at<D: Dialect>(row: &Row<D>) -> sqlx::Result<(ItemId, LocationId)> {
    Ok((name::<D::Db, _>(row, "item_id")?, name::<D::Db, _>(row, "location_id")?))
}

/// `item_id, location_id, on_hand, committed, unpooled`.
pub(crate) fn ledger<D: Dialect>(row: &Row<D>) -> sqlx::Result<Ledger> {
    let (item, location) = item_at::<D>(row)?;
    let int = |col| D::Db::int(row, col);
    Ok(Ledger { item, location, on_hand: int("on_hand")?, committed: int("committed")?, unpooled: int("unpooled")? })
}

/// `item_id, location_id, quantity`.
pub(crate) fn allocation<D: Dialect>(row: &Row<D>) -> sqlx::Result<Allocation> {
    let (item, location) = item_at::<D>(row)?;
    Ok(Allocation { item, location, quantity: count::<D::Db>(row, "quantity")? })
}

/// `item_id, location_id, n`.
pub(crate) fn taken<D: Dialect>(row: &Row<D>) -> sqlx::Result<Taken> {
    let (item, location) = item_at::<D>(row)?;
    Ok(Taken { item, location, count: count::<D::Db>(row, "n")? })
}

/// `item_id, location_id, available`.
pub(crate) fn available<D: Dialect>(rows: &[Row<D>]) -> sqlx::Result<crate::dialect::Available> {
    let mut unsettled = false;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        unsettled |= D::Db::flag(row, "unsettled")?;
        let (item, location) = item_at::<D>(row)?;
        out.push((item, location, D::Db::int(row, "available")?));
    }
    Ok((out, unsettled))
}

/// `location_id, on_hand, available, reserved, committed`.
pub(crate) fn level<D: Dialect>(row: &Row<D>) -> sqlx::Result<LocationLevel> {
    Ok(LocationLevel {
        location: name::<D::Db, _>(row, "location_id")?,
        quantities: Quantities {
            on_hand: D::Db::int(row, "on_hand")?,
            available: D::Db::int(row, "available")?,
            reserved: D::Db::int(row, "reserved")?,
            committed: D::Db::int(row, "committed")?,
        },
    })
}

/// An item's quantities per location (`levels.sql`), and whether the read
/// is unsettled: a hold of the item expired between a time before the
/// transaction's snapshot and one after it, so whether it had expired at the
/// snapshot's moment is unknown. Holds are judged expired by the database's
/// clock; on SQLite that is the process clock, and `before` is a time
/// before the snapshot (taken after a deferred `BEGIN`, which takes none).
pub(crate) async fn levels_of<D: Dialect>(
    c: &mut Conn<D>,
    shop: &str,
    item: &str,
    before: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<(Vec<LocationLevel>, bool)> {
    let args = [shop.into(), item.into(), Arg::Time(before)];
    let rows = rows::<D>(c, Stmt::Levels, &args).await?;
    let mut unsettled = false;
    let mut levels = Vec::with_capacity(rows.len());
    for row in &rows {
        unsettled |= D::Db::flag(row, "unsettled")?;
        levels.push(level::<D>(row)?);
    }
    Ok((levels, unsettled))
}

/// A row of `audit.sql`: whether no ledger row accounts for these units (an
/// orphan), and the invariant's terms. Of a ledger row: `on_hand`, and
/// `unpooled` and `committed` as the row keeps them (`booked`) plus the
/// released and claimed units not yet folded in; `reserved` the held ones.
/// Of an orphan: its pool rows, and every open unit as `reserved`.
pub(crate) fn audit_row<D: Dialect>(row: &Row<D>) -> sqlx::Result<(bool, AuditRow)> {
    let int = |col| D::Db::int(row, col);
    let (held, claimed, returned) = (int("held")?, int("claimed")?, int("returned")?);
    let orphan = D::Db::flag(row, "orphan")?;
    let (unpooled, reserved, committed) = match orphan {
        false => (int("unpooled")? + returned, held, int("booked")? + claimed),
        true => (0, held + claimed + returned, 0),
    };
    let (item, location) = item_at::<D>(row)?;
    let shop = name::<D::Db, _>(row, "shop_id")?;
    let terms = AuditRow {
        shop,
        item,
        location,
        on_hand: int("on_hand")?,
        unpooled,
        pooled: int("pooled")?,
        reserved,
        committed,
    };
    Ok((orphan, terms))
}

/// `item_id, location_id, id`: a unit row.
pub(crate) fn unit<D: Driver>(row: &D::Row) -> sqlx::Result<crate::dialect::Unit> {
    Ok(crate::dialect::Unit {
        item: name::<D, _>(row, "item_id")?,
        location: name::<D, _>(row, "location_id")?,
        id: D::int(row, "id")?,
    })
}

/// `shop_id, id`: holds an expiry statement expired.
pub(crate) fn gone<D: Driver>(rows: &[D::Row]) -> sqlx::Result<crate::dialect::Gone> {
    rows.iter().map(|r| Ok((name::<D, ShopId>(r, "shop_id")?, reservation_id(D::int(r, "id")?)?))).collect()
}

/// A list of reservation ids as the statements take it: a JSON array.
pub(crate) fn id_list(ids: &[ReservationId]) -> String {
    serde_json::to_string(&ids.iter().map(|id| id.get()).collect::<Vec<_>>()).expect("a list of integers")
}

/// The reservation row.
pub(crate) async fn head_of<D: Dialect>(
    c: &mut Conn<D>,
    shop: &ShopId,
    id: ReservationId,
) -> sqlx::Result<Option<Head>> {
    Ok(all::<D, _>(c, Stmt::Head, &[shop.as_str().into(), id.get().into()], head::<D>).await?.pop())
}

/// The reservation rows of `ids` (ascending), locked in id order: lock order
/// step 1. Ids with no row in the shop are missing from the answer.
pub(crate) async fn heads_for_update<D: Dialect>(
    c: &mut Conn<D>,
    shop: &ShopId,
    ids: &[ReservationId],
) -> sqlx::Result<Vec<Head>> {
    debug_assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids ascending, each once");
    let list = id_list(ids);
    all::<D, _>(c, Stmt::HeadForUpdate, &[shop.as_str().into(), Arg::Text(&list)], head::<D>).await
}

/// The quantities of each reservation of `ids`.
pub(crate) async fn lines_of_each<D: Dialect>(
    c: &mut Conn<D>,
    shop: &ShopId,
    ids: &[ReservationId],
) -> sqlx::Result<HashMap<ReservationId, Vec<Allocation>>> {
    // Each once: a statement that probes id by id would return a repeated
    // id's lines twice.
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let list = id_list(&ids);
    let rows = all::<D, _>(c, Stmt::Lines, &[shop.as_str().into(), Arg::Text(&list)], |row| {
        Ok((reservation_id(D::Db::int(row, "reservation_id")?)?, allocation::<D>(row)?))
    })
    .await?;
    let mut each: HashMap<ReservationId, Vec<Allocation>> = HashMap::new();
    for (id, line) in rows {
        each.entry(id).or_default().push(line);
    }
    Ok(each)
}

pub(crate) async fn lines_of<D: Dialect>(
    c: &mut Conn<D>,
    shop: &ShopId,
    id: ReservationId,
) -> sqlx::Result<Vec<Allocation>> {
    Ok(lines_of_each::<D>(c, shop, &[id]).await?.remove(&id).unwrap_or_default())
}

/// The three names of an (item, location) of a shop, as arguments.
pub(crate) fn place<'a>(shop: &'a ShopId, item: &'a ItemId, location: &'a LocationId) -> [Arg<'a>; 3] {
    [shop.as_str().into(), item.as_str().into(), location.as_str().into()]
}

/// A database error for a caller outside the reservation engine (tokens,
/// mode rules, the legacy ledger), which does not retry: a lost connection is
/// `unavailable`, anything else internal. Never carries SQL text.
pub(crate) fn plain_error<D: Dialect>(e: sqlx::Error) -> holdfast_core::Error {
    match D::fault(&e) {
        crate::dialect::Fault::Connection => holdfast_core::Error::Unavailable(e.to_string()),
        _ => holdfast_core::Error::Internal(e.to_string()),
    }
}

/// Runs `$body` (a future of `sqlx::Result`) on a connection `$c` of
/// `$store`'s pool as operation `$tag`, counted and tagged like the engine's
/// statements, with its error as [`plain_error`] says.
macro_rules! plain {
    ($store:expr, $tag:literal, |$c:ident| $body:expr) => {
        crate::tag::op($tag, async {
            let mut conn = crate::run::Solo::<D>::acquire(&$store.pool).await.map_err(crate::run::plain_error::<D>)?;
            let _lease = crate::tag::Lease::start();
            let out = {
                let $c = &mut *conn;
                $body.await.map_err(crate::run::plain_error::<D>)?
            };
            conn.done().await.map_err(crate::run::plain_error::<D>)?;
            Ok::<_, holdfast_core::Error>(out)
        })
        .await
    };
}
pub(crate) use plain;
