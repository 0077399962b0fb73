//! The legacy store: the counter model most teams run before holdfast
//! (docs/design.md, "Migration off Redis"), behind the same `Store` trait so that it can be compared,
//! shadowed and migrated from.
//!
//! # Where each quantity lives
//!
//! ```text
//! Redis  {p}avail/S/I/L   available units (the counter; guarded decrement)
//!        {p}held/S/I/L    units held by live reservations
//!        {p}locs/S/I      locations of an item (sorted set, byte order)
//!        {p}res/S/ID      a reservation (hash: key, fp, status, expires, lines)
//!        {p}key/S/KEY     idempotency key → id
//!        {p}holds         live holds by expiry (sorted set of "S/ID")
//!        {p}seq           reservation id sequence
//! SQL    legacy_ledger    on_hand and committed (sold) units
//! ```
//!
//! so the accounting is `on_hand (SQL) = avail + held (Redis) + committed
//! (SQL)`. `/` cannot occur in a shop, item or location id, so keys cannot
//! collide. A claim writes both systems with no transaction spanning them:
//! that is the legacy design and its flaw, shown by the `legacy_flaw` test.
//!
//! Reservation ids start at [`REDIS_ID_BASE`], far above any id a SQL
//! sequence will reach and below 2^53 (exact in JSON and in Lua's doubles).
//! The router uses that to send a claim to the store that made the hold,
//! whatever the shop's mode is now.

use std::sync::Arc;
#[cfg(feature = "fault-injection")]
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use holdfast_core::{
    Allocation, AuditReport, AuditRow, Backend, Error, ItemId, ItemLevels, LocationId, LocationLevel, Quantities,
    Reservation, ReservationId, ReservationStatus, ReserveRequest, Reserved, ShopId, Shortfall, StockChange,
    StockRequest, Store, StoreStats, Ttl,
};
use holdfast_core::{LedgerRow, LegacyLedger};
use holdfast_sql::Detached;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The first reservation id the Redis store hands out.
pub const REDIS_ID_BASE: i64 = 1_000_000_000_000_000;

/// Whether the Redis store made this reservation id.
pub fn is_redis_id(id: ReservationId) -> bool {
    id.get() > REDIS_ID_BASE
}

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://host:port/db`.
    pub url: String,
    /// Prepended to every key, so that tests (or tenants) share a server.
    pub prefix: String,
    /// Longest wait for a reply before the operation fails as unavailable.
    pub timeout: Duration,
}

impl RedisOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), prefix: "hf:".into(), timeout: Duration::from_millis(500) }
    }
}

/// A Redis client for `url`: `redis://[:password@]host:port[/db]`, or
/// `rediss://…` for TLS, verified against the system's roots or against
/// `?sslrootcert=FILE` (PEM); `&sslcert=FILE&sslkey=FILE` add a client
/// certificate. The same names as in a PostgreSQL URL; holdfast reads them
/// and passes the rest of the URL to the Redis client.
pub fn client(url: &str) -> Result<redis::Client, Error> {
    let invalid = |msg: String| Error::Invalid(holdfast_core::Invalid::new("redis_url", msg));
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut root, mut cert, mut key, mut rest) = (None, None, None, Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", v)) => root = Some(v),
            Some(("sslcert", v)) => cert = Some(v),
            Some(("sslkey", v)) => key = Some(v),
            _ => rest.push(pair),
        }
    }
    let base = if rest.is_empty() { base.to_string() } else { format!("{base}?{}", rest.join("&")) };
    // redis-rs names the URL in none of its parse errors; keep it that way (it may hold a password).
    let bad = |e: redis::RedisError| invalid(format!("not a Redis URL: {}", e.detail().unwrap_or("unparseable")));
    if root.is_none() && cert.is_none() && key.is_none() {
        return redis::Client::open(base.as_str()).map_err(bad);
    }
    if !base.starts_with("rediss://") {
        return Err(invalid("sslrootcert, sslcert and sslkey need a rediss:// URL".into()));
    }
    let read =
        |what: &str, path: &str| std::fs::read(path).map_err(|e| invalid(format!("cannot read {what} {path}: {e}")));
    let client_tls = match (cert, key) {
        (Some(c), Some(k)) => {
            Some(redis::ClientTlsConfig { client_cert: read("sslcert", c)?, client_key: read("sslkey", k)? })
        }
        (None, None) => None,
        _ => return Err(invalid("sslcert and sslkey go together".into())),
    };
    let root_cert = root.map(|r| read("sslrootcert", r)).transpose()?;
    redis::Client::build_with_tls(base.as_str(), redis::TlsCertificates { client_tls, root_cert }).map_err(bad)
}

/// Which write of a legacy claim goes first (the `fault-injection` feature;
/// without it, always the legacy design's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClaimOrder {
    /// The legacy design: add to the SQL ledger, then remove the hold from
    /// Redis. A crash between the two oversells (the hold later expires and
    /// its units go back on sale although they were sold).
    #[default]
    LedgerFirst,
    /// The other order: a crash between the two undersells (the units left
    /// Redis but were never counted as sold: they are lost to the shop).
    RedisFirst,
}

/// A failure injected between the two writes of a legacy claim, as a
/// process crash there would leave things. For tests and demonstrations:
/// only with the `fault-injection` feature.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedFault {
    /// The next claim stops after its first write.
    CrashBetweenClaimWrites,
}

struct Scripts {
    reserve: redis::Script,
    settle: redis::Script,
    sweep: redis::Script,
    stock: redis::Script,
    mirror_hold: redis::Script,
    set_counters: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            reserve: redis::Script::new(include_str!("scripts/reserve.lua")),
            settle: redis::Script::new(include_str!("scripts/settle.lua")),
            sweep: redis::Script::new(include_str!("scripts/sweep.lua")),
            stock: redis::Script::new(include_str!("scripts/stock.lua")),
            mirror_hold: redis::Script::new(include_str!("scripts/mirror_hold.lua")),
            set_counters: redis::Script::new(include_str!("scripts/set_counters.lua")),
        }
    }
}

/// The Redis counter store with its SQL ledger.
pub struct RedisStore {
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    opts: RedisOptions,
    db: Arc<dyn LegacyLedger>,
    scripts: Scripts,
    #[cfg(feature = "fault-injection")]
    order: Mutex<ClaimOrder>,
    #[cfg(feature = "fault-injection")]
    fault: Mutex<Option<InjectedFault>>,
    expired: AtomicU64,
    /// Until when (ms on `epoch`) Redis counts as down after a connection
    /// failure: calls fail at once instead of each waiting out a timeout,
    /// so sql-primary shops keep their latency while Redis is away.
    down_until_ms: AtomicU64,
    epoch: std::time::Instant,
    /// This store, for the work a caller's going away must not cut in half.
    me: std::sync::Weak<Self>,
}

/// Every operation that touches the SQL ledger runs [`Detached::detached`]:
///
/// * one that writes both Redis and the SQL ledger (claim, stock change,
///   the sql-primary claim mirror, reconcile) finishes both writes even when
///   its caller times out or hangs up between them. Only a crash of the
///   process splits them — the legacy design's flaw, which [`ClaimOrder`] is
///   about.
/// * one that only reads the ledger (levels, audit) too: a ledger future
///   dropped while it waits for a pooled connection, checks it or reads from
///   it costs the pool that connection (sqlx is not cancel-safe there). A
///   burst of callers that give up then keeps the pool reconnecting, and the
///   detached claims of those callers wait behind it for a connection,
///   between their Redis read and their two writes, long after their callers
///   left; a read of both books meanwhile finds a claim half-written.
///
/// Operations on Redis alone need none of this: a script is atomic, and a
/// command whose caller left is answered and discarded by the multiplexed
/// connection.
impl Detached for RedisStore {
    fn weak_self(&self) -> &std::sync::Weak<Self> {
        &self.me
    }
}

/// How long Redis counts as down after a connection failure.
const BREAKER: Duration = Duration::from_millis(500);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("url", &self.opts.url).field("prefix", &self.opts.prefix).finish()
    }
}

fn redis_error(e: redis::RedisError) -> Error {
    if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() {
        Error::Unavailable(format!("redis: {e}"))
    } else {
        Error::Internal(format!("redis: {e}"))
    }
}

fn bad_reply(what: &str) -> Error {
    Error::Internal(format!("unexpected reply from a Redis script: {what}"))
}

fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// A reservation's lines as the scripts store them: `[[item, loc, n], …]`.
pub(crate) fn lines_json(lines: &[Allocation]) -> String {
    let v: Vec<(&str, &str, u32)> = lines.iter().map(|a| (a.item.as_str(), a.location.as_str(), a.quantity)).collect();
    serde_json::to_string(&v).expect("lines serialise")
}

fn parse_lines(text: &str) -> Result<Vec<Allocation>, Error> {
    // cjson encodes an empty table as `{}`.
    if text == "{}" {
        return Ok(Vec::new());
    }
    let raw: Vec<(String, String, f64)> = serde_json::from_str(text).map_err(|_| bad_reply("lines"))?;
    let mut lines = raw
        .into_iter()
        .map(|(i, l, n)| {
            Ok(Allocation {
                item: ItemId::new(i).map_err(|_| bad_reply("item"))?,
                location: LocationId::new(l).map_err(|_| bad_reply("location"))?,
                quantity: n as u32,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    lines.sort();
    Ok(lines)
}

/// Parses `{'res', id, key, status, expires, lines, extra}`.
fn parse_record(reply: &[String]) -> Result<(Reservation, String), Error> {
    let [tag, id, key, status, expires, lines, extra] = reply else {
        return Err(bad_reply("record length"));
    };
    if tag != "res" {
        return Err(bad_reply(tag));
    }
    let id: i64 = id.parse().map_err(|_| bad_reply("id"))?;
    let expires: i64 = expires.parse().map_err(|_| bad_reply("expires"))?;
    let reservation = Reservation {
        id: ReservationId::new(id).map_err(|_| bad_reply("id"))?,
        key: key.parse().map_err(|_| bad_reply("key"))?,
        status: ReservationStatus::parse(status).ok_or_else(|| bad_reply("status"))?,
        expires_at: from_millis(expires),
        lines: parse_lines(lines)?,
    };
    Ok((reservation, extra.clone()))
}

impl RedisStore {
    /// A store on Redis at `opts.url` with its ledger in `db`. Connects
    /// lazily: a Redis that is down does not stop the process from starting;
    /// each operation then fails as `unavailable` until Redis is back.
    pub fn new(opts: RedisOptions, db: Arc<dyn LegacyLedger>) -> Result<Arc<Self>, Error> {
        let client = client(&opts.url)?;
        Ok(Arc::new_cyclic(|me| Self {
            client,
            conn: tokio::sync::Mutex::new(None),
            opts,
            db,
            scripts: Scripts::new(),
            #[cfg(feature = "fault-injection")]
            order: Mutex::new(ClaimOrder::default()),
            #[cfg(feature = "fault-injection")]
            fault: Mutex::new(None),
            expired: AtomicU64::new(0),
            down_until_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            me: me.clone(),
        }))
    }

    pub fn options(&self) -> &RedisOptions {
        &self.opts
    }

    #[cfg(feature = "fault-injection")]
    pub fn set_claim_order(&self, order: ClaimOrder) {
        *self.order.lock().expect("order lock") = order;
    }

    /// Arms a fault for the next claim (tests; see [`InjectedFault`]).
    #[cfg(feature = "fault-injection")]
    pub fn inject(&self, fault: InjectedFault) {
        *self.fault.lock().expect("fault lock") = Some(fault);
    }

    #[cfg(feature = "fault-injection")]
    fn claim_order(&self) -> ClaimOrder {
        *self.order.lock().expect("order lock")
    }

    #[cfg(not(feature = "fault-injection"))]
    fn claim_order(&self) -> ClaimOrder {
        ClaimOrder::LedgerFirst
    }

    /// Whether an injected crash falls here (never without the feature).
    #[cfg(feature = "fault-injection")]
    fn crash_here(&self) -> bool {
        self.fault.lock().expect("fault lock").take().is_some()
    }

    #[cfg(not(feature = "fault-injection"))]
    fn crash_here(&self) -> bool {
        false
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Maps a Redis error; a connection failure opens the breaker.
    fn failed(&self, e: redis::RedisError) -> Error {
        let e = redis_error(e);
        if matches!(e, Error::Unavailable(_)) {
            self.down_until_ms.store(self.now_ms() + BREAKER.as_millis() as u64, Ordering::Relaxed);
        }
        e
    }

    async fn conn(&self) -> Result<ConnectionManager, Error> {
        if self.now_ms() < self.down_until_ms.load(Ordering::Relaxed) {
            return Err(Error::Unavailable("redis: down (a connection failed less than 500 ms ago)".into()));
        }
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        // Once made, the manager reconnects by itself after Redis restarts.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.opts.timeout)
            .set_response_timeout(self.opts.timeout)
            .set_number_of_retries(1)
            .set_max_delay(200);
        let c = ConnectionManager::new_with_config(self.client.clone(), config).await.map_err(|e| self.failed(e))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Fails fast with `unavailable` when Redis does not answer a PING.
    pub async fn ping(&self) -> Result<(), Error> {
        let mut c = self.conn().await?;
        redis::cmd("PING").query_async::<String>(&mut c).await.map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// An invocation of `script` with the arguments every per-shop script
    /// starts with: the key prefix and the shop.
    fn shop_script<'a>(&self, script: &'a redis::Script, shop: &ShopId) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.arg(self.prefix()).arg(shop.as_str());
        inv
    }

    /// Runs a script on the shared connection.
    async fn invoke<T: redis::FromRedisValue>(&self, inv: &redis::ScriptInvocation<'_>) -> Result<T, Error> {
        let mut c = self.conn().await?;
        inv.invoke_async(&mut c).await.map_err(|e| self.failed(e))
    }

    fn prefix(&self) -> &str {
        &self.opts.prefix
    }

    fn key(&self, kind: &str, shop: &ShopId, item: &ItemId, loc: &LocationId) -> String {
        format!("{}{kind}/{shop}/{item}/{loc}", self.prefix())
    }

    async fn settle(&self, shop: &ShopId, id: ReservationId, op: &str, ttl: Option<Ttl>) -> Result<Reservation, Error> {
        self.settle_once(shop, id, op, ttl).await.map(|(r, _)| r)
    }

    /// Runs settle.lua; `true` with the reservation when this call changed
    /// it (`false` for an idempotent repeat).
    async fn settle_once(
        &self,
        shop: &ShopId,
        id: ReservationId,
        op: &str,
        ttl: Option<Ttl>,
    ) -> Result<(Reservation, bool), Error> {
        let mut inv = self.shop_script(&self.scripts.settle, shop);
        inv.arg(id.get()).arg(op).arg(ttl.map(|t| t.as_secs() * 1000).unwrap_or(0));
        let reply: Vec<String> = self.invoke(&inv).await?;
        if reply.first().map(String::as_str) == Some("notfound") {
            return Err(Error::NotFound);
        }
        let (r, outcome) = parse_record(&reply)?;
        match outcome.as_str() {
            "ok" => Ok((r, true)),
            "same" => Ok((r, false)),
            "expired" => {
                if op != "expire" {
                    self.expired.fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::Expired)
            }
            _ => Err(Error::WrongStatus(
                r.status,
                match op {
                    "claim" => "claimed",
                    "release" => "released",
                    _ => "extended",
                },
            )),
        }
    }

    /// sql-primary: records a hold SQL decided and committed, so that Redis
    /// counts it too. Returns how many counters went below zero (Redis had
    /// drifted from SQL), or `None` if Redis already knew this id.
    pub async fn mirror_hold(&self, shop: &ShopId, r: &Reservation, fingerprint: &str) -> Result<Option<u32>, Error> {
        let mut inv = self.shop_script(&self.scripts.mirror_hold, shop);
        inv.arg(r.id.get()).arg(r.key.as_str()).arg(fingerprint).arg(millis(r.expires_at)).arg(lines_json(&r.lines));
        let n: i64 = self.invoke(&inv).await?;
        Ok((n >= 0).then_some(n as u32))
    }

    /// sql-primary: applies a claim, release or extend SQL committed to the
    /// Redis copy of the hold. A first claim also adds the units to the
    /// legacy ledger's `committed`, so the legacy books stay whole for the
    /// moment the kill switch hands the shop back (Redis first here: SQL
    /// has already decided, and the legacy ledger is not the truth any more).
    pub async fn mirror_settle(
        &self,
        shop: &ShopId,
        id: ReservationId,
        op: &'static str,
        ttl: Option<Ttl>,
    ) -> Result<Reservation, Error> {
        // Two writes: a caller leaving after the Redis one must not leave the
        // units out of both `held` and `committed`.
        let shop = shop.clone();
        self.detached(move |me| async move { me.mirror_settle_both(&shop, id, op, ttl).await }).await
    }

    async fn mirror_settle_both(
        &self,
        shop: &ShopId,
        id: ReservationId,
        op: &str,
        ttl: Option<Ttl>,
    ) -> Result<Reservation, Error> {
        let (r, changed) = self.settle_once(shop, id, op, ttl).await?;
        if changed && op == "claim" {
            let lines: Vec<_> = r.lines.iter().map(|a| (a.item.clone(), a.location.clone(), a.quantity)).collect();
            self.db.ledger_commit(shop, &lines).await?;
        }
        Ok(r)
    }

    /// The shadow mirror's note of which SQL reservation mirrors a Redis one.
    pub async fn set_mirror_id(
        &self,
        shop: &ShopId,
        id: ReservationId,
        sql_id: Option<ReservationId>,
    ) -> Result<(), Error> {
        let mut c = self.conn().await?;
        let key = format!("{}res/{shop}/{id}", self.prefix());
        let v = sql_id.map(|s| s.get()).unwrap_or(0);
        redis::cmd("HSET")
            .arg(&key)
            .arg("sql_id")
            .arg(v)
            .query_async::<i64>(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(())
    }

    /// See [`set_mirror_id`](Self::set_mirror_id): `None` when the mirror
    /// holds nothing for this reservation (SQL refused it, or it was never
    /// mirrored).
    pub async fn mirror_id(&self, shop: &ShopId, id: ReservationId) -> Result<Option<ReservationId>, Error> {
        let mut c = self.conn().await?;
        let key = format!("{}res/{shop}/{id}", self.prefix());
        let v: Option<i64> =
            redis::cmd("HGET").arg(&key).arg("sql_id").query_async(&mut c).await.map_err(|e| self.failed(e))?;
        Ok(v.and_then(|v| ReservationId::new(v).ok()))
    }

    /// Reads (available, held) of each (item, location), in one round trip.
    async fn counters(&self, keys: &[(ShopId, ItemId, LocationId)]) -> Result<Vec<(i64, i64)>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let mut cmd = redis::cmd("MGET");
        for (s, i, l) in keys {
            cmd.arg(self.key("avail", s, i, l)).arg(self.key("held", s, i, l));
        }
        let v: Vec<Option<i64>> = cmd.query_async(&mut c).await.map_err(|e| self.failed(e))?;
        Ok(v.chunks(2).map(|p| (p[0].unwrap_or(0), p[1].unwrap_or(0))).collect())
    }

    /// The legacy ledger rows (of a shop, of an item), each with its Redis
    /// counters (available, held): the ledger first, then one round trip to
    /// Redis. Not one snapshot of both books: a claim or stock change whose
    /// second write is still under way reads as split.
    async fn books(&self, shop: Option<&ShopId>, item: Option<&ItemId>) -> Result<Vec<(LedgerRow, (i64, i64))>, Error> {
        let rows = self.db.ledger_rows(shop, item).await?;
        let keys: Vec<_> = rows.iter().map(|r| (r.shop.clone(), r.item.clone(), r.location.clone())).collect();
        let counters = self.counters(&keys).await?;
        Ok(rows.into_iter().zip(counters).collect())
    }

    /// Reconcile: overwrites the Redis counters and the legacy ledger row of
    /// one (item, location) from quantities computed in holdfast's SQL.
    pub async fn put_counters(
        &self,
        shop: &ShopId,
        item: &ItemId,
        loc: &LocationId,
        q: Quantities,
    ) -> Result<(), Error> {
        let row = LedgerRow {
            shop: shop.clone(),
            item: item.clone(),
            location: loc.clone(),
            on_hand: q.on_hand,
            committed: q.committed,
        };
        self.detached(move |me| async move {
            let mut inv = me.shop_script(&me.scripts.set_counters, &row.shop);
            inv.arg(row.item.as_str()).arg(row.location.as_str()).arg(q.available).arg(q.reserved);
            let _: i64 = me.invoke(&inv).await?;
            me.db.ledger_put(&row).await
        })
        .await
    }

    /// Every (item, location) of a shop with its Redis-side quantities.
    pub async fn shop_quantities(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId, Quantities)>, Error> {
        let shop = shop.clone();
        self.detached(move |me| async move { me.shop_quantities_now(&shop).await }).await
    }

    async fn shop_quantities_now(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId, Quantities)>, Error> {
        Ok(self
            .books(Some(shop), None)
            .await?
            .into_iter()
            .map(|(r, (avail, held))| {
                (
                    r.item,
                    r.location,
                    Quantities { on_hand: r.on_hand, available: avail, reserved: held, committed: r.committed },
                )
            })
            .collect())
    }

    async fn stock_delta(&self, shop: &ShopId, item: &ItemId, loc: &LocationId, delta: i64) -> Result<bool, Error> {
        let mut inv = self.shop_script(&self.scripts.stock, shop);
        inv.arg(item.as_str()).arg(loc.as_str()).arg(delta);
        let (ok, _): (i64, i64) = self.invoke(&inv).await?;
        Ok(ok == 1)
    }

    async fn claim_both(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let current = self.get(shop, id).await?;
        match current.status {
            ReservationStatus::Claimed => return Ok(current),
            ReservationStatus::Expired => return Err(Error::Expired),
            ReservationStatus::Released => return Err(Error::WrongStatus(ReservationStatus::Released, "claimed")),
            ReservationStatus::Held if current.expires_at <= Utc::now() => {
                // Expire it now (the script re-checks with Redis's clock).
                return self.settle(shop, id, "claim", None).await;
            }
            ReservationStatus::Held => {}
        }
        let lines: Vec<_> = current.lines.iter().map(|a| (a.item.clone(), a.location.clone(), a.quantity)).collect();
        let crash = || Error::Unavailable("injected fault: the process died between the two writes of a claim".into());
        match self.claim_order() {
            ClaimOrder::LedgerFirst => {
                self.db.ledger_commit(shop, &lines).await?;
                if self.crash_here() {
                    return Err(crash());
                }
                self.settle(shop, id, "claim", None).await
            }
            ClaimOrder::RedisFirst => {
                let r = self.settle(shop, id, "claim", None).await?;
                if self.crash_here() {
                    return Err(crash());
                }
                self.db.ledger_commit(shop, &lines).await?;
                Ok(r)
            }
        }
    }

    async fn change_both(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        let (shop, item, location, change) = (req.shop(), req.item(), req.location(), req.change());
        self.db.ledger_ensure(shop, item, location).await?;
        if let StockChange::Fulfil(q) = change {
            if !self.db.ledger_fulfil(shop, item, location, q).await? {
                return Err(Error::StockConflict(format!("fewer than {q} committed units to fulfil")));
            }
            return self.level(shop, item, location).await;
        }
        for _ in 0..50 {
            let row = self.db.ledger_rows(Some(shop), Some(item)).await?;
            let row = row.into_iter().find(|r| &r.location == location).ok_or_else(|| bad_reply("ledger row"))?;
            let new = match change {
                StockChange::Set(n) => n,
                StockChange::Adjust(d) => row.on_hand + d,
                StockChange::Fulfil(_) => unreachable!("handled above"),
            };
            if new < 0 {
                return Err(Error::StockConflict(format!("on_hand would fall below zero ({new})")));
            }
            let delta = new - row.on_hand;
            if delta < 0 && !self.stock_delta(shop, item, location, delta).await? {
                return Err(Error::StockConflict("the decrease would take units that are held or sold".into()));
            }
            if self.db.ledger_swap_on_hand(&row, new).await? {
                if delta >= 0 {
                    self.stock_delta(shop, item, location, delta).await?;
                }
                return self.level(shop, item, location).await;
            }
            if delta < 0 {
                self.stock_delta(shop, item, location, -delta).await?;
            }
        }
        Err(Error::RetriesExhausted(50))
    }

    /// Runs within the detached stock change: reads on without a task of its own.
    async fn level(&self, shop: &ShopId, item: &ItemId, loc: &LocationId) -> Result<LocationLevel, Error> {
        let levels = self.levels_now(shop, item).await?;
        levels
            .locations
            .into_iter()
            .find(|l| &l.location == loc)
            .ok_or_else(|| Error::Internal("the ledger row vanished".into()))
    }

    /// The ledger rows, then the Redis counters of an item.
    async fn levels_now(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        Ok(ItemLevels {
            item: item.clone(),
            locations: self
                .books(Some(shop), Some(item))
                .await?
                .into_iter()
                .map(|(r, (avail, held))| LocationLevel {
                    location: r.location,
                    quantities: Quantities {
                        on_hand: r.on_hand,
                        available: avail,
                        reserved: held,
                        committed: r.committed,
                    },
                })
                .collect(),
        })
    }

    /// The audit rows: the ledger, then the Redis counters.
    async fn audit_now(&self, shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        let rows = self.books(shop, None).await?.into_iter().map(|(r, (avail, held))| AuditRow {
            shop: r.shop,
            item: r.item,
            location: r.location,
            on_hand: r.on_hand,
            unpooled: avail,
            pooled: 0,
            reserved: held,
            committed: r.committed,
        });
        Ok(AuditReport::from_rows(rows, Vec::new()))
    }
}

#[async_trait]
impl Store for RedisStore {
    /// The backend of the SQL ledger this store keeps beside Redis.
    fn backend(&self) -> Backend {
        self.db.backend()
    }

    /// The SQL tables come with holdfast's migrations (0003); Redis needs none.
    async fn migrate(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved, Error> {
        let mut inv = self.shop_script(&self.scripts.reserve, req.shop());
        inv.arg(req.key().as_str())
            .arg(req.fingerprint())
            .arg(req.ttl().as_secs() * 1000)
            .arg(req.allow_partial() as i32)
            .arg(req.allow_split() as i32)
            .arg(REDIS_ID_BASE)
            .arg(req.lines().len());
        for line in req.lines() {
            inv.arg(line.item.as_str()).arg(line.quantity.get());
            match &line.locations {
                None => {
                    inv.arg(0);
                }
                Some(locs) => {
                    inv.arg(locs.len());
                    for l in locs {
                        inv.arg(l.as_str());
                    }
                }
            }
        }
        let reply: Vec<String> = self.invoke(&inv).await?;
        match reply.first().map(String::as_str) {
            Some("conflict") => Err(Error::IdempotencyConflict(req.key().as_str().to_owned())),
            Some("short") => Err(Error::InsufficientStock(
                req.lines()
                    .iter()
                    .zip(&reply[1..])
                    .map(|(l, a)| Shortfall {
                        item: l.item.clone(),
                        requested: l.quantity.get(),
                        available: a.parse().unwrap_or(0),
                    })
                    .collect(),
            )),
            _ => {
                let (reservation, created) = parse_record(&reply)?;
                Ok(Reserved { reservation, created: created == "1" })
            }
        }
    }

    /// The legacy claim: checks the hold in Redis, adds its units to the SQL
    /// ledger's `committed`, then removes the hold from Redis. Two systems,
    /// no transaction over both: see [`ClaimOrder`].
    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let shop = shop.clone();
        self.detached(move |me| async move { me.claim_both(&shop, id).await }).await
    }

    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        self.settle(shop, id, "release", None).await
    }

    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation, Error> {
        self.settle(shop, id, "extend", Some(ttl)).await
    }

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation, Error> {
        let mut c = self.conn().await?;
        let key = format!("{}res/{shop}/{id}", self.prefix());
        let h: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&key)
            .arg("key")
            .arg("status")
            .arg("expires")
            .arg("lines")
            .query_async(&mut c)
            .await
            .map_err(|e| self.failed(e))?;
        let [Some(k), Some(status), Some(expires), Some(lines)] =
            <[Option<String>; 4]>::try_from(h).map_err(|_| bad_reply("get"))?
        else {
            return Err(Error::NotFound);
        };
        let reply = ["res".to_owned(), id.get().to_string(), k, status, expires, lines, String::new()];
        Ok(parse_record(&reply)?.0)
    }

    /// One sweep: takes holds past their expiry from the holds set and
    /// expires each with the settle script, which re-checks the status, so
    /// any number of sweepers may run at once.
    async fn expire(&self, limit: u32) -> Result<u64, Error> {
        let due: Vec<String> = self.invoke(self.scripts.sweep.arg(self.prefix()).arg(limit)).await?;
        let mut n = 0;
        for member in due {
            let Some((shop, id)) = member.split_once('/') else { continue };
            let (Ok(shop), Ok(id)) = (ShopId::new(shop), id.parse::<ReservationId>()) else { continue };
            if self.settle(&shop, id, "expire", None).await.is_ok() {
                n += 1;
            }
        }
        self.expired.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }

    /// The legacy store's holds live in Redis, outside the reservations
    /// table the sweeper's metrics read.
    async fn unswept(&self) -> Result<Option<holdfast_core::Unswept>, Error> {
        Ok(None)
    }

    /// The legacy counter model removes nothing: its reservation records and
    /// idempotency keys stay in Redis until the migration retires it (Redis
    /// memory, not SQL tables, is what they cost). Nothing is deleted here.
    async fn purge(&self, _older_than: Duration, _limit: u32) -> Result<u64, Error> {
        Ok(0)
    }

    /// Stock changes write both systems too: a decrease is taken from the
    /// Redis counter first (guarded: it never takes held or sold units), then
    /// `on_hand` is swapped in SQL; an increase goes the other way round. A
    /// lost race on the SQL swap is undone in Redis and retried.
    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel, Error> {
        let req = req.clone();
        self.detached(move |me| async move { me.change_both(&req).await }).await
    }

    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels, Error> {
        let (shop, item) = (shop.clone(), item.clone());
        self.detached(move |me| async move { me.levels_now(&shop, &item).await }).await
    }

    /// `on_hand (SQL) = avail + held (Redis) + committed (SQL)`, reported as
    /// audit rows with `unpooled` = the Redis counter and `pooled` = 0.
    async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport, Error> {
        let shop = shop.cloned();
        self.detached(move |me| async move { me.audit_now(shop.as_ref()).await }).await
    }

    fn stats(&self) -> StoreStats {
        StoreStats { expired: self.expired.load(Ordering::Relaxed), ..StoreStats::default() }
    }
}
