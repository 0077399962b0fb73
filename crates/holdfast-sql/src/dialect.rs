//! The steps the engine needs from a SQL dialect. Each backend module
//! (`postgres/`, `mysql/`, `sqlite/`) implements this trait with its own
//! reviewed SQL text; the algorithm that strings the steps together, and the
//! lock order it follows, lives once in `engine.rs`.

use std::future::Future;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, AuditRow, Backend, IdempotencyKey, ItemId, LocationId, LocationLevel, ReservationId, ReservationStatus,
    ShopId, Ttl,
};
use sqlx::{Database, Pool, Transaction};

pub(crate) type Conn<D> = <<D as Dialect>::Db as Database>::Connection;
pub(crate) type Tx<D> = Transaction<'static, <D as Dialect>::Db>;

/// What a transaction is for; a dialect may begin each kind differently
/// (isolation level, `BEGIN IMMEDIATE`, read only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxMode {
    /// Reserve, claim, release, extend, expire, stock changes.
    Write,
    /// Reports that must see one consistent snapshot (audit, get).
    Snapshot,
}

/// How the engine should react to a database error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Deadlock or serialization failure: the database rolled back; retry.
    Deadlock,
    /// Lock wait timeout or a busy single-writer database; retry.
    Busy,
    /// The connection broke or the pool could not hand one out.
    Connection,
    /// Anything else: a bug or a schema problem; do not retry.
    Other,
}

/// Units wanted of one item at one location (`None`: the first location, in
/// `location_id` order, that stocks the item).
#[derive(Debug, Clone)]
pub(crate) struct Want {
    pub item: ItemId,
    pub location: Option<LocationId>,
    pub qty: u32,
}

/// Unit rows taken (deleted from the pool) for one (item, location).
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub item: ItemId,
    pub location: LocationId,
    pub count: u32,
}

/// What the one-statement fast path did (see [`Dialect::reserve_fast`]).
#[derive(Debug, Clone)]
pub(crate) enum Fast {
    /// The hold is committed, with the units taken per (item, location).
    Held { id: ReservationId, expires_at: DateTime<Utc>, taken: Vec<Taken> },
    /// Some line could not be filled from the pool: nothing changed.
    Short,
    /// The idempotency key is already used in this shop: nothing changed.
    KeyTaken,
}

/// A ledger row (`inventory_levels`), as read under its row lock.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    pub item: ItemId,
    pub location: LocationId,
    pub on_hand: i64,
    pub committed: i64,
    pub unpooled: i64,
}

/// Units of claimed and released holds folded into the ledger row.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Folded {
    /// Released or expired units: back to `unpooled`.
    pub restocked: i64,
    /// Claimed units: into `committed`.
    pub settled: i64,
}

/// The reservation row.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub id: ReservationId,
    pub key: IdempotencyKey,
    pub fingerprint: String,
    pub status: ReservationStatus,
    pub expires_at: DateTime<Utc>,
    /// `expires_at` has passed, by the database's clock.
    pub expired: bool,
}

pub(crate) trait Dialect: std::fmt::Debug + Send + Sync + Sized + 'static {
    type Db: Database;
    const BACKEND: Backend;

    fn begin(pool: &Pool<Self::Db>, mode: TxMode) -> impl Future<Output = sqlx::Result<Tx<Self>>> + Send;
    fn fault(err: &sqlx::Error) -> Fault;
    fn migrate(pool: &Pool<Self::Db>) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Deletes up to `qty` free unit rows for each want, skipping rows other
    /// transactions hold: one round trip for the whole cart.
    fn take_units(
        c: &mut Conn<Self>,
        shop: &ShopId,
        wants: &[Want],
    ) -> impl Future<Output = sqlx::Result<Vec<Taken>>> + Send;

    /// Whether [`Dialect::reserve_fast`] exists for this dialect.
    const ONE_STATEMENT_FAST_PATH: bool = false;

    /// The whole fast path as one autocommit statement, where the dialect
    /// can express it (`ONE_STATEMENT_FAST_PATH`): take every want's units
    /// with SKIP LOCKED and, only when every want is filled and the key is
    /// new, delete them and insert the hold — one round trip and one commit
    /// instead of a transaction of four. Elsewhere the engine runs
    /// [`Dialect::take_units`] and [`Dialect::insert_reservation`] in a
    /// transaction instead, and never calls this.
    fn reserve_fast(
        _pool: &Pool<Self::Db>,
        _shop: &ShopId,
        _key: &IdempotencyKey,
        _fingerprint: &str,
        _ttl: Ttl,
        _wants: &[Want],
    ) -> impl Future<Output = sqlx::Result<Fast>> + Send {
        async { Err(sqlx::Error::Protocol("this dialect has no one-statement fast path".into())) }
    }

    /// Like [`Dialect::take_units`], but waits for rows other transactions
    /// hold instead of skipping them. Only called under the ledger lock, and
    /// only the fast path holds pool rows without it, which never waits for
    /// a ledger lock while it does. A dialect without row locks (a single
    /// writer) has nothing to wait for and keeps this default.
    fn take_units_waiting(
        c: &mut Conn<Self>,
        shop: &ShopId,
        wants: &[Want],
    ) -> impl Future<Output = sqlx::Result<Vec<Taken>>> + Send {
        Self::take_units(c, shop, wants)
    }

    /// Units of each matching (item, location) that no live hold has, read
    /// in one snapshot without locks (`spec` as in [`Dialect::lock_ledgers`]).
    /// `None`: the dialect has no such cheap check, and a short reserve always
    /// takes the slow path to find out.
    fn available(
        c: &mut Conn<Self>,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> impl Future<Output = sqlx::Result<Option<Vec<(ItemId, LocationId, i64)>>>> + Send {
        let _ = (c, shop, spec);
        async { Ok(None) }
    }

    /// Locks ledger rows in (item, location) order: the given pairs, and every
    /// location of an item paired with `None`.
    fn lock_ledgers(
        c: &mut Conn<Self>,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> impl Future<Output = sqlx::Result<Vec<Ledger>>> + Send;

    /// Like [`Dialect::lock_ledgers`], but skips rows another transaction
    /// holds instead of waiting for them. A dialect without row locks keeps
    /// this default.
    fn lock_ledgers_skip(
        c: &mut Conn<Self>,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> impl Future<Output = sqlx::Result<Vec<Ledger>>> + Send {
        Self::lock_ledgers(c, shop, spec)
    }

    /// Waits until no transaction holds these ledger rows, and holds nothing
    /// afterwards (one autocommit statement with a shared lock). A dialect
    /// without row locks has nothing to wait for.
    fn await_ledgers(
        pool: &Pool<Self::Db>,
        shop: &ShopId,
        spec: &[(ItemId, Option<LocationId>)],
    ) -> impl Future<Output = sqlx::Result<()>> + Send {
        let _ = (pool, shop, spec);
        async { Ok(()) }
    }

    /// Creates an empty ledger row if there is none.
    fn ensure_ledger(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    fn write_ledger(c: &mut Conn<Self>, shop: &ShopId, row: &Ledger) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Expires the held reservations with units at (item, location) whose time
    /// is up, skipping those another transaction holds. Returns how many.
    fn expire_at(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;

    /// Marks claimed and released units of (item, location) as accounted on
    /// the ledger row and returns their sums. Caller holds the ledger lock.
    fn fold(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> impl Future<Output = sqlx::Result<Folded>> + Send;

    /// Inserts up to `n` unit rows into free slots `0..cap`. Returns how many.
    fn refill(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
        cap: u32,
        n: i64,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;

    /// Units of (item, location) that other transactions have in flight: pool
    /// rows this transaction could not take, and expired holds it could not
    /// lock. Non-zero means "wait and retry", never "sold out".
    fn in_flight(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
        location: &LocationId,
    ) -> impl Future<Output = sqlx::Result<i64>> + Send;

    /// Inserts the reservation and its held quantities. `None` when the
    /// idempotency key is taken (nothing inserted).
    fn insert_reservation(
        c: &mut Conn<Self>,
        shop: &ShopId,
        key: &IdempotencyKey,
        fingerprint: &str,
        ttl: Ttl,
        lines: &[Allocation],
    ) -> impl Future<Output = sqlx::Result<Option<(ReservationId, DateTime<Utc>)>>> + Send;

    fn find_by_key(
        c: &mut Conn<Self>,
        shop: &ShopId,
        key: &IdempotencyKey,
    ) -> impl Future<Output = sqlx::Result<Option<Head>>> + Send;

    /// Reads the reservation row, locking it when `lock` (FOR UPDATE).
    fn head(
        c: &mut Conn<Self>,
        shop: &ShopId,
        id: ReservationId,
        lock: bool,
    ) -> impl Future<Output = sqlx::Result<Option<Head>>> + Send;

    fn lines(
        c: &mut Conn<Self>,
        shop: &ShopId,
        id: ReservationId,
    ) -> impl Future<Output = sqlx::Result<Vec<Allocation>>> + Send;

    /// Moves a held reservation to `status` and its held units to `state`
    /// (`committed` or `returned`).
    fn transition(
        c: &mut Conn<Self>,
        shop: &ShopId,
        id: ReservationId,
        status: ReservationStatus,
        state: &'static str,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;

    fn extend(
        c: &mut Conn<Self>,
        shop: &ShopId,
        id: ReservationId,
        ttl: Ttl,
    ) -> impl Future<Output = sqlx::Result<DateTime<Utc>>> + Send;

    /// The sweeper's unit of work: expires up to `limit` due holds of any
    /// shop, skipping those another sweeper holds.
    fn sweep(c: &mut Conn<Self>, limit: u32) -> impl Future<Output = sqlx::Result<u64>> + Send;

    fn levels(
        c: &mut Conn<Self>,
        shop: &ShopId,
        item: &ItemId,
    ) -> impl Future<Output = sqlx::Result<Vec<LocationLevel>>> + Send;

    /// Every ledger row's invariant terms, and units that have no ledger row.
    fn audit(
        c: &mut Conn<Self>,
        shop: Option<&ShopId>,
    ) -> impl Future<Output = sqlx::Result<(Vec<AuditRow>, Vec<AuditRow>)>> + Send;
}
