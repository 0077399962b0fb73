//! What the engine needs from a SQL dialect. Each backend module
//! (`postgres/`, `mysql/`, `sqlite/`) implements [`Dialect`] with its own
//! reviewed SQL text under its `queries/`; the algorithm that strings the
//! statements together, and the lock order it follows (docs/design.md), lives
//! once in `engine/`.
//!
//! Two kinds of statement:
//!
//! * **Shared shapes** ([`Stmt`]): the same parameters in, the same columns
//!   out, on every dialect — only the text differs. They are sent and decoded
//!   once, in `run.rs` and `decode.rs`; a dialect supplies the text (one file
//!   per statement, `queries/<name>.sql`) and, on MySQL, the placeholder
//!   order ([`Dialect::placeholders`]).
//! * **Dialect shapes**: steps that are one statement on one server and
//!   several on another (PostgreSQL's writable CTEs and arrays, MySQL's
//!   JSON_TABLE and missing RETURNING, SQLite's single writer). They are the
//!   trait's methods below.

use std::future::Future;

use chrono::{DateTime, Utc};
use holdfast_core::{
    Allocation, Backend, IdempotencyKey, ItemId, LocationId, ReservationId, ReservationStatus, ReserveRequest, ShopId,
};
use sqlx::{Database, Pool, Transaction};

use crate::driver::Driver;
use crate::migrate::Migration;

/// Units of an (item, location) that no live hold has.
pub(crate) type Unheld = (ItemId, LocationId, i64);
/// What `available.sql` read, and whether the read is unsettled.
pub(crate) type Available = (Vec<Unheld>, bool);

pub(crate) type Conn<D> = <<D as Dialect>::Db as Database>::Connection;
pub(crate) type Tx<D> = Transaction<'static, <D as Dialect>::Db>;

/// Declares [`Stmt`] and, for the dialect modules, `queries!()`: the
/// function from each statement to its text in that module's `queries/`
/// directory (`include_str!` resolves next to the module that expands it),
/// or to the text given for it (`queries!(Levels => LEVELS)`).
macro_rules! statements {
    // `$d` is `$`, for the metavariables of the macro this one declares.
    ($d:tt; $($(#[$doc:meta])* $variant:ident => $file:literal,)*) => {
        /// A statement with the same shape on every dialect.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum Stmt {
            $($(#[$doc])* $variant,)*
        }

        macro_rules! queries {
            ($d($d stmt:ident => $d text:expr),* $d(,)?) => {
                // A statement composed of fragments is named before the
                // file of the same name, which then only serves as its part.
                #[allow(unreachable_patterns)]
                fn text(stmt: crate::dialect::Stmt) -> &'static str {
                    match stmt {
                        $d(crate::dialect::Stmt::$d stmt => $d text,)*
                        $(crate::dialect::Stmt::$variant => include_str!(concat!("queries/", $file, ".sql")),)*
                    }
                }
            };
        }
    };
}

statements! { $;
    /// (shop, id) → the reservation row.
    Head => "head",
    /// (shop, ids: a JSON array, ascending) → the reservation rows, locked
    /// in id order (lock order step 1).
    HeadForUpdate => "head_for_update",
    /// (shop, key) → the reservation row.
    FindByKey => "find_by_key",
    /// (shop, ids: a JSON array) → their quantities, with `reservation_id`.
    Lines => "lines",
    /// (shop, item, the caller's time) → quantities per location, and
    /// whether each is `unsettled` ([`crate::run::levels_of`]).
    Levels => "levels",
    /// (shop or NULL) → the invariant's terms per (shop, item, location),
    /// and units no ledger row accounts for (orphans).
    Audit => "audit",
    /// (shop, item, location): the ledger row, created if missing.
    EnsureLedger => "ensure_ledger",
    /// (shop, item, location, on_hand, committed, unpooled, refilled 0/1).
    WriteLedger => "write_ledger",
    /// (shop, item, location, cap, n): up to n unit rows into free slots.
    Refill => "refill",
    /// (shop, item, location, margin ms) → `n`, units other transactions
    /// have in flight; `soon`, how many of them are holds expiring within
    /// the margin; `wait_ms`, until the first of those expires.
    InFlight => "in_flight",
    /// (shop, id, ttl seconds): moves the expiry; the next head reads it.
    Extend => "extend",
    /// The mode rules: explicit shop modes.
    ShopModes => "shop_modes",
    /// The mode rules: rollout percentages.
    ModeRollout => "mode_rollout",
    /// The mode rules: the kill switch.
    KillSwitch => "kill_switch",
    /// (shop, mode).
    SetShopMode => "set_shop_mode",
    /// (shop).
    ClearShopMode => "clear_shop_mode",
    /// (mode, percent).
    SetRollout => "set_rollout",
    /// (engaged).
    SetKillSwitch => "set_kill_switch",
    /// (shop, item, location).
    LegacyEnsure => "legacy_ensure",
    /// (shop or NULL, item or NULL) → legacy ledger rows.
    LegacyRows => "legacy_rows",
    /// (shop, item, location, old on_hand, new on_hand).
    LegacySwapOnHand => "legacy_swap_on_hand",
    /// (shop, item, location, quantity).
    LegacyFulfil => "legacy_fulfil",
    /// (shop, item, location, quantity): a legacy claim's ledger write.
    LegacyCommit => "legacy_commit",
    /// (shop, item, location, on_hand, committed).
    LegacyPut => "legacy_put",
    /// (shop) → the (item, location) pairs of inventory_levels.
    StockedLocations => "stocked_locations",
    /// (id, hash, shops, admin, created_at).
    TokenInsert => "token_insert",
    /// (id) → the token row.
    TokenFind => "token_find",
    /// Every token row, oldest first.
    TokenList => "token_list",
    /// (revoked_at, id).
    TokenRevoke => "token_revoke",
    /// (older than ms, limit) → (shop_id, item_id, location_id) with units
    /// not folded yet among the oldest finished reservations.
    StaleFolds => "stale_folds",
    /// → (name, bytes) of holdfast's tables, indexes included.
    TableSizes => "table_sizes",
    /// → (autovacuum 1/0, history_list_length), -1 where the server has none.
    ServerState => "server_state",
    /// → (version): the latest migration applied.
    SchemaVersion => "schema_version",
    /// (window ms, limit) → (shop_id, item_id, sold, held): units claimed
    /// in the window and held now, per item, busiest first.
    HotItems => "hot_items",
    /// (shop, item) → (pooled, refills) over its locations.
    ItemPool => "item_pool",
    /// (id, shop, url, topics, secret, created_at).
    WebhookSubInsert => "webhook_sub_insert",
    /// (shop) → the shop's subscriptions, secrets left out.
    WebhookSubList => "webhook_sub_list",
    /// → (id, shop_id, topics) of every enabled subscription.
    WebhookSubsLive => "webhook_subs_live",
    /// (shop, id).
    WebhookSubDelete => "webhook_sub_delete",
    /// (shop, subscription id): its pending deliveries deleted.
    WebhookDropPending => "webhook_drop_pending",
    /// (deliveries: a JSON array, created_at).
    OutboxInsert => "outbox_insert",
    /// (now, limit) → (id, lease_until) of due deliveries, locked, skipping
    /// locked ones.
    WebhookDue => "webhook_due",
    /// (ids: a JSON array, lease until).
    WebhookLease => "webhook_lease",
    /// (ids: a JSON array) → the deliveries with their subscription's url
    /// and secret.
    WebhookLeased => "webhook_leased",
    /// (id, attempt, status, next attempt, HTTP status or -1, error).
    WebhookRecord => "webhook_record",
    /// (outcomes: a JSON array of {id, attempt, status, at_ms, http, error}).
    WebhookRecordMany => "webhook_record_many",
    /// (delivery id) → its subscription_id.
    WebhookSubOf => "webhook_sub_of",
    /// (subscription id, at).
    WebhookDisable => "webhook_disable",
    /// (subscription id).
    WebhookKillPending => "webhook_kill_pending",
    /// (shop, status or NULL, limit) → deliveries, newest first.
    WebhookList => "webhook_list",
    /// (shop, id, now).
    WebhookRetry => "webhook_retry",
    /// → (pending, dead, oldest_pending).
    WebhookStats => "webhook_stats",
    /// (delivered before, limit).
    WebhookPurge => "webhook_purge",
    /// (shop, keys: a JSON array of {item, location}, in byte order) →
    /// (item_id, location_id, sold_out 1/0/NULL) of the inventory watch
    /// rows that exist, locked (lock order step 5).
    WatchLock => "watch_lock",
    /// (shop, keys: a JSON array of {item, location}): the missing watch
    /// rows, with nothing said.
    WatchAdd => "watch_add",
    /// (shop, rows: a JSON array of {item, location, sold_out 1/0}).
    WatchSet => "watch_set",
    /// Serialises concurrent `migrate` runs on one database.
    MigrateLock => "migrate_lock",
    MigrateUnlock => "migrate_unlock",
    /// Creates `holdfast_migrations` if missing.
    MigrationsTable => "migrations_table",
    /// (version) → 1 when it is applied.
    MigrationApplied => "migration_applied",
    /// (version, name).
    MigrationRecord => "migration_record",
    /// → (holds, oldest): holds past their expiry not released yet (up to
    /// 10000) and the oldest one's expiry, for the sweeper's metrics.
    Unswept => "unswept",
}

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

/// The classification of every error that is not the server's own answer:
/// the connection, the pool, the driver. Shared by every dialect, whose
/// [`Dialect::fault`] classifies the server's error codes.
pub(crate) fn plumbing_fault(err: &sqlx::Error) -> Fault {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => Fault::Connection,
        _ => Fault::Other,
    }
}

/// How [`Dialect::lock_ledgers`] treats ledger rows other transactions hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LedgerLock {
    /// Lock them, waiting for their holders.
    Wait,
    /// Lock those free now, skip the others.
    Skip,
    /// Wait until nobody holds them, and hold nothing afterwards (the
    /// weakest shared lock, sent in autocommit so it ends with the statement).
    Await,
    /// The same shared lock inside a transaction, held to its end: a release
    /// keeps reserves and stock changes off the rows of the units it returns
    /// until it commits, and never waits for another release.
    Share,
}

/// What the held quantities (`reserved_quantities.state`) of a settled
/// reservation become. A hold's rows are inserted `held`; the folds turn
/// these two into `settled` and `restocked` under the ledger lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineState {
    /// Claimed; not yet folded into the ledger row.
    Committed,
    /// Released or expired; not yet folded into the ledger row.
    Returned,
}

impl LineState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LineState::Committed => "committed",
            LineState::Returned => "returned",
        }
    }
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

/// One free unit row, picked by [`Dialect::pick_units`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    pub item: ItemId,
    pub location: LocationId,
    pub id: i64,
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

/// What a batch's fast path did: each request's outcome, in order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub outcomes: Vec<Fast>,
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

/// A new hold's id and expiry; `None` when its idempotency key was taken.
pub(crate) type Inserted = Option<(ReservationId, DateTime<Utc>)>;

/// Holds a statement expired, by shop.
pub(crate) type Gone = Vec<(ShopId, ReservationId)>;

/// Candidate (item, location) pairs; `None` stands for every location of the item.
pub(crate) type Spec = [(ItemId, Option<LocationId>)];

pub(crate) trait Dialect: std::fmt::Debug + Send + Sync + Sized + 'static {
    type Db: Driver;
    const BACKEND: Backend;
    const MIGRATIONS: &'static [Migration];
    /// How a migration's transaction begins.
    const BEGIN_MIGRATION: &'static str;

    /// The text of a shared statement (expanded from `queries!()`).
    fn text(stmt: Stmt) -> &'static str;

    /// For a statement whose placeholders cannot name the parameters they
    /// take (MySQL's `?` is positional and used once), the parameters in
    /// placeholder order, as indexes into the [`Stmt`]'s documented list.
    fn placeholders(stmt: Stmt) -> Option<&'static [usize]> {
        let _ = stmt;
        None
    }

    /// How a write transaction begins: its isolation level, and on SQLite
    /// the database's write lock.
    const BEGIN_WRITE: &'static str;
    /// How a report's transaction begins: one snapshot for every statement.
    const BEGIN_SNAPSHOT: &'static str;

    fn begin(pool: &Pool<Self::Db>, mode: TxMode) -> impl Future<Output = sqlx::Result<Tx<Self>>> + Send {
        let sql = match mode {
            TxMode::Write => Self::BEGIN_WRITE,
            TxMode::Snapshot => Self::BEGIN_SNAPSHOT,
        };
        pool.begin_with(crate::tag::sql(sql))
    }
    fn fault(err: &sqlx::Error) -> Fault;

    /// Deletes up to `qty` free unit rows for each want, skipping rows other
    /// transactions hold (`waiting`: waiting for them instead): one round trip
    /// for the whole cart. Waiting is only asked under the ledger lock, and
    /// only the fast path holds pool rows without it, which never waits for a
    /// ledger lock while it does. A dialect without row locks (a single
    /// writer) has nothing to wait for.
    fn take_units(
        c: &mut Conn<Self>,
        shop: &ShopId,
        wants: &[Want],
        waiting: bool,
    ) -> impl Future<Output = sqlx::Result<Vec<Taken>>> + Send;

    /// Whether [`Dialect::reserve_fast`] exists for this dialect.
    const ONE_STATEMENT_FAST_PATH: bool = false;
    /// Statements are prepared once per connection and kept. Not behind a
    /// pooler in transaction mode (PgBouncer before 1.21), which hands each
    /// transaction to any server connection: there every statement is sent
    /// unnamed, and inside a transaction ([`Solo`](crate::engine::Solo)).
    const STATEMENT_CACHE: bool = true;
    /// Whether `stmt` is kept prepared ([`Dialect::STATEMENT_CACHE`]) or sent
    /// unnamed, and so planned on each run.
    fn cached(stmt: Stmt) -> bool {
        let _ = stmt;
        Self::STATEMENT_CACHE
    }
    /// Behind a pooler in transaction mode, where a session's lock would stay
    /// with whichever server connection took it: the migration lock taken
    /// inside each migration's transaction instead, and given back by its
    /// commit. `None`: the session lock of `migrate_lock.sql`.
    const MIGRATE_LOCK_IN_TX: Option<&'static str> = None;

    /// The whole fast path as one autocommit statement, where the dialect
    /// can express it (`ONE_STATEMENT_FAST_PATH`): take every want's units
    /// with SKIP LOCKED and, only when every want is filled and the key is
    /// new, delete them and insert the hold — one round trip and one commit
    /// instead of a transaction of four. Elsewhere the engine runs
    /// [`Dialect::take_units`] and [`Dialect::insert_hold`] in a
    /// transaction instead, and never calls this.
    fn reserve_fast(
        _c: &mut Conn<Self>,
        _req: &ReserveRequest,
        _wants: &[Want],
    ) -> impl Future<Output = sqlx::Result<Fast>> + Send {
        async { Err(sqlx::Error::Protocol("this dialect has no one-statement fast path".into())) }
    }

    /// A coalesced batch of reserves (engine/batch.rs) is one transaction of
    /// the four steps below, a fixed number of statements whatever its size.
    ///
    /// Up to `qty` free unit rows for each want, skipping rows other
    /// transactions hold, locked but not deleted. The batch deals them out in
    /// arrival order and deletes those it gives away
    /// ([`Dialect::delete_units`]); the rest stay in the pool.
    fn pick_units(
        c: &mut Conn<Self>,
        shop: &ShopId,
        wants: &[Want],
    ) -> impl Future<Output = sqlx::Result<Vec<Unit>>> + Send;

    /// Deletes unit rows this transaction picked.
    fn delete_units(c: &mut Conn<Self>, shop: &ShopId, units: &[Unit])
    -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Which of `keys` are used in `shop` already.
    fn keys_used(
        c: &mut Conn<Self>,
        shop: &ShopId,
        keys: &[&IdempotencyKey],
    ) -> impl Future<Output = sqlx::Result<Vec<IdempotencyKey>>> + Send;

    /// Inserts the holds of a batch (each request, of one shop, with its
    /// lines), whose keys [`Dialect::keys_used`] found free, in a fixed
    /// number of statements; answers each one's id and expiry, in order. A
    /// key another transaction inserted meanwhile fails the statement (a
    /// unique violation), and with it the batch.
    fn insert_holds(
        c: &mut Conn<Self>,
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> impl Future<Output = sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>>> + Send;

    /// A batch's first step: which of `keys` are used in `shop` already
    /// ([`Dialect::keys_used`]), then its pick ([`Dialect::pick_units`]).
    /// PostgreSQL answers both in one statement.
    fn pick_batch(
        c: &mut Conn<Self>,
        shop: &ShopId,
        wants: &[Want],
        keys: &[&IdempotencyKey],
    ) -> impl Future<Output = sqlx::Result<(Vec<Unit>, Vec<IdempotencyKey>)>> + Send {
        async move {
            let used = Self::keys_used(c, shop, keys).await?;
            let units = Self::pick_units(c, shop, wants).await?;
            Ok((units, used))
        }
    }

    /// A batch's last step: deletes the unit rows it gave away
    /// ([`Dialect::delete_units`]) and inserts the holds they went to
    /// ([`Dialect::insert_holds`]). PostgreSQL does both in one statement.
    fn hold_batch(
        c: &mut Conn<Self>,
        shop: &ShopId,
        given: &[Unit],
        holds: &[(&ReserveRequest, Vec<Allocation>)],
    ) -> impl Future<Output = sqlx::Result<Vec<(ReservationId, DateTime<Utc>)>>> + Send {
        async move {
            if !given.is_empty() {
                Self::delete_units(c, shop, given).await?;
            }
            if holds.is_empty() { Ok(Vec::new()) } else { Self::insert_holds(c, holds).await }
        }
    }

    /// Units of each matching (item, location) that no live hold has, read
    /// in one snapshot without locks (the existing ledger rows of `spec`, in
    /// (item, location) order).
    /// With them, whether the read is unsettled: a hold of one of them
    /// expired between a time before the snapshot and one after it
    /// ([`crate::run::levels_of`]).
    fn available(
        c: &mut Conn<Self>,
        shop: &ShopId,
        spec: &Spec,
    ) -> impl Future<Output = sqlx::Result<Available>> + Send;

    /// Ledger rows of `spec` in (item, location) order, in one statement,
    /// locked as `lock` says (lock order step 2).
    fn lock_ledgers(
        c: &mut Conn<Self>,
        shop: &ShopId,
        spec: &Spec,
        lock: LedgerLock,
    ) -> impl Future<Output = sqlx::Result<Vec<Ledger>>> + Send;

    /// Under the lock of ledger row `at`: expires the held reservations with
    /// units at its (item, location) whose time is up, skipping those another
    /// transaction holds. Returns them.
    fn expire_at(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> impl Future<Output = sqlx::Result<Gone>> + Send;

    /// The sweeper's unit of work: expires up to `limit` due holds of any
    /// shop, skipping those another sweeper holds. Returns them.
    fn sweep(c: &mut Conn<Self>, limit: u32) -> impl Future<Output = sqlx::Result<Gone>> + Send;

    /// Retention's unit of work: deletes up to `limit` finished reservations
    /// (claimed, released or expired, every line folded into the ledger)
    /// that last changed more than `older_than` ago, with their lines,
    /// skipping those another transaction holds; returns how many.
    fn purge(
        c: &mut Conn<Self>,
        older_than: std::time::Duration,
        limit: u32,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;

    /// Under the lock of ledger row `at`: marks the claimed and released
    /// units of its (item, location) as accounted on it and returns their sums.
    fn fold(c: &mut Conn<Self>, shop: &ShopId, at: &Ledger) -> impl Future<Output = sqlx::Result<Folded>> + Send;

    /// Inserts the hold of `req` (its shop, key, fingerprint and TTL) and the
    /// quantities it holds. `None` when the idempotency key is taken
    /// (nothing inserted).
    fn insert_hold(
        c: &mut Conn<Self>,
        req: &ReserveRequest,
        lines: &[Allocation],
    ) -> impl Future<Output = sqlx::Result<Inserted>> + Send;

    /// Moves a held reservation to `status` and its held units to `state`.
    fn transition(
        c: &mut Conn<Self>,
        shop: &ShopId,
        ids: &[ReservationId],
        status: ReservationStatus,
        state: LineState,
    ) -> impl Future<Output = sqlx::Result<()>> + Send;
}
