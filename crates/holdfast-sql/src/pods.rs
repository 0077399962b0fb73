//! Pods (docs/design.md, "Pods"): shops spread over several databases. A
//! pods file names each pod's database and which shops live where; every
//! operation of a shop runs on its pod only, with that pod's own connection
//! pool, so a pod that is down or slow takes only its own shops with it.
//!
//! [`open_pods`] gives a [`Database`] like [`crate::open`] does: its store,
//! tokens, webhooks and mode tables route each call by shop. What belongs to
//! no shop goes to every pod: migrations, the expiry sweep, audits of all
//! shops, API tokens (kept in every pod, so that a shop's requests are
//! authenticated by its own pod) and the mode rollout and kill switch.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use holdfast_core::{
    AuditReport, Backend, Delivery, DeliveryStatus, Error, Invalid, ItemId, ItemLevels, LedgerRow, LegacyLedger,
    LocationId, LocationLevel, Mode, ModeStore, Placement, QueueStats, Reservation, ReservationId, ReserveRequest,
    Reserved, Result, Rules, ShopId, StockRequest, Store, StoreStats, Subscription, TokenRecord, TokenStore, Ttl,
    Unswept, WebhookStore,
};
use serde::Deserialize;

use crate::housekeeping::{HotItem, Housekeeping, ServerState, TableSize};
use crate::{ConnectOptions, Database, PoolStatus};

/// The pods file (`--pods FILE.toml`) as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodsFile {
    /// The pod of every shop not listed under `[shops]`.
    pub default: String,
    pub pods: BTreeMap<String, PodConfig>,
    /// Shop id → pod name.
    #[serde(default)]
    pub shops: BTreeMap<String, String>,
}

/// One pod's database.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodConfig {
    /// `postgres://…` or `mysql://…` / `mariadb://…`.
    pub database_url: String,
    /// This pod's pool size [default: `--max-connections`].
    pub max_connections: Option<u32>,
}

impl PodsFile {
    /// Reads and checks a pods file.
    pub fn read(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Invalid::new("pods", format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| match e {
            Error::Invalid(i) => Invalid::new("pods", format!("{}: {}", path.display(), i.message)).into(),
            other => other,
        })
    }

    /// Parses and checks the text of a pods file.
    pub fn parse(text: &str) -> Result<Self> {
        let file: PodsFile = toml::from_str(text).map_err(|e| Invalid::new("pods", e.message().to_string()))?;
        file.check()?;
        Ok(file)
    }

    fn check(&self) -> Result<()> {
        let bad = |msg: String| -> Error { Invalid::new("pods", msg).into() };
        if self.pods.is_empty() {
            return Err(bad("no pods: add at least one [pods.NAME] with a database_url".into()));
        }
        for (name, pod) in &self.pods {
            let ok_name = !name.is_empty()
                && name.len() <= 32
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
            if !ok_name {
                return Err(bad(format!("pod name {name:?} must be 1-32 characters of [a-z0-9_-]")));
            }
            let scheme = pod.database_url.split(':').next().unwrap_or_default();
            if !matches!(scheme, "postgres" | "postgresql" | "mysql" | "mariadb") {
                return Err(bad(format!(
                    "pod {name}: database_url must be postgres://, mysql:// or mariadb:// \
                     (SQLite is one process's file and cannot be a pod)"
                )));
            }
            if pod.max_connections == Some(0) {
                return Err(bad(format!("pod {name}: max_connections must be at least 1")));
            }
        }
        if !self.pods.contains_key(&self.default) {
            return Err(bad(format!("default = {:?} names no pod", self.default)));
        }
        for (shop, pod) in &self.shops {
            ShopId::new(shop.clone()).map_err(|e| bad(format!("shop {shop:?}: {}", e.message)))?;
            if !self.pods.contains_key(pod) {
                return Err(bad(format!("shop {shop:?} is mapped to {pod:?}, which names no pod")));
            }
        }
        Ok(())
    }
}

/// One pod as a process sees it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    /// Its database URL without the password.
    pub url: String,
    pub db: Database,
    /// Shops the pods file maps here by name (the default pod also has every
    /// shop not listed).
    pub shops: Vec<ShopId>,
}

/// The pods of a [`Database`] opened from a pods file.
#[derive(Debug)]
pub(crate) struct PodSet {
    pods: Vec<Pod>,
    default: usize,
    by_shop: HashMap<ShopId, usize>,
    /// The same map by name, for the mode rules.
    placement: Arc<Placement>,
    /// Each pod's mode rules as last read.
    last_rules: std::sync::Mutex<Vec<Option<Rules>>>,
}

impl PodSet {
    pub(crate) fn pods(&self) -> &[Pod] {
        &self.pods
    }

    pub(crate) fn of(&self, shop: &ShopId) -> &Pod {
        &self.pods[self.index_of(shop)]
    }

    fn index_of(&self, shop: &ShopId) -> usize {
        self.by_shop.get(shop).copied().unwrap_or(self.default)
    }

    fn db(&self, shop: &ShopId) -> &Database {
        &self.of(shop).db
    }

    fn default_db(&self) -> &Database {
        &self.pods[self.default].db
    }

    /// Runs `f` on every pod at once; the answers in pod order.
    async fn each<T, F, Fut>(&self, f: F) -> Vec<(String, Result<T>)>
    where
        T: Send + 'static,
        F: Fn(Database) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let handles: Vec<_> = self
            .pods
            .iter()
            .map(|p| {
                (p.name.clone(), tokio::spawn(crate::tag::carried(crate::tag::in_pod(p.name.clone(), f(p.db.clone())))))
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for (name, h) in handles {
            let r = h.await.unwrap_or_else(|e| Err(Error::Internal(format!("pod {name}: {e}"))));
            out.push((name, r));
        }
        out
    }

    /// Like [`each`](Self::each), for a change every pod must take: the
    /// answers when all succeeded, else one error naming each pod that
    /// failed (the others did take the change).
    async fn all<T, F, Fut>(&self, f: F) -> Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(Database) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        let mut worst = None;
        for (name, r) in self.each(f).await {
            match r {
                Ok(v) => ok.push(v),
                Err(e) => {
                    failed.push(format!("pod {name}: {e}"));
                    worst.get_or_insert(e);
                }
            }
        }
        match worst {
            None => Ok(ok),
            Some(e) => {
                let msg = failed.join("; ");
                Err(match e {
                    Error::Invalid(i) => Error::Invalid(Invalid::new(i.field, msg)),
                    Error::Unavailable(_) => Error::Unavailable(msg),
                    _ => Error::Internal(msg),
                })
            }
        }
    }

    /// Runs `fut`, a call of `shop`'s pod, with the pod named for the
    /// connection report.
    async fn on<T>(&self, shop: &ShopId, fut: impl Future<Output = T>) -> T {
        crate::tag::in_pod(self.of(shop).name.clone(), fut).await
    }
}

/// Opens every pod of `file`, each with `opts`' settings and its own pool.
/// Pools connect lazily: a pod that is down at start answers its shops
/// `unavailable` until it is back, and the other pods serve meanwhile.
pub async fn open_pods(file: &PodsFile, opts: &ConnectOptions) -> Result<Database> {
    file.check()?;
    let mut pods = Vec::with_capacity(file.pods.len());
    let mut index = HashMap::new();
    for (i, (name, cfg)) in file.pods.iter().enumerate() {
        let mut o = opts.clone();
        o.url = cfg.database_url.clone();
        o.max_connections = cfg.max_connections.unwrap_or(opts.max_connections);
        o.lazy = true;
        o.pods = None;
        let db = crate::open_one(&o).await.map_err(|e| match e {
            Error::Invalid(i) => Invalid::new("pods", format!("pod {name}: {}", i.message)).into(),
            other => other,
        })?;
        let shops = file.shops.iter().filter(|(_, p)| *p == name).filter_map(|(s, _)| ShopId::new(s.clone()).ok());
        pods.push(Pod { name: name.clone(), url: crate::redact(&cfg.database_url), db, shops: shops.collect() });
        index.insert(name.clone(), i);
    }
    let by_shop = file.shops.iter().filter_map(|(s, p)| Some((ShopId::new(s.clone()).ok()?, index[p]))).collect();
    let placement = Arc::new(Placement {
        default: file.default.clone(),
        shops: file.shops.iter().filter_map(|(s, p)| Some((ShopId::new(s.clone()).ok()?, p.clone()))).collect(),
    });
    let last_rules = std::sync::Mutex::new(vec![None; pods.len()]);
    let set = Arc::new(PodSet { pods, default: index[&file.default], by_shop, placement, last_rules });
    let routed = Arc::new(Routed(set.clone()));
    let status = {
        let set = set.clone();
        move || {
            set.pods.iter().map(|p| p.db.pool_status()).fold(PoolStatus { size: 0, idle: 0, max: 0 }, |a, b| {
                PoolStatus { size: a.size + b.size, idle: a.idle + b.idle, max: a.max + b.max }
            })
        }
    };
    Ok(Database {
        store: routed.clone(),
        tokens: routed.clone(),
        modes: routed.clone(),
        webhooks: routed.clone(),
        housekeeping: routed.clone(),
        #[cfg(feature = "testing")]
        batches: routed.clone(),
        legacy: routed,
        pool: Arc::new(status),
        pods: Some(set),
    })
}

/// How long a pod's mode rules may take to read before the rules it had
/// last are used.
const RULES_WITHIN: Duration = Duration::from_secs(2);

/// How long an operator's read (the console's hot items) waits for one pod
/// before leaving it out.
const POD_READ_WITHIN: Duration = Duration::from_secs(2);

/// The traits of a [`Database`], each call sent to the pod of its shop.
#[derive(Debug)]
struct Routed(Arc<PodSet>);

#[async_trait]
impl Store for Routed {
    fn backend(&self) -> Backend {
        self.0.default_db().store.backend()
    }

    async fn migrate(&self) -> Result<()> {
        self.0.all(|db| async move { db.store.migrate().await }).await.map(drop)
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reserved> {
        self.0.on(req.shop(), self.0.db(req.shop()).store.reserve(req)).await
    }

    async fn claim(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation> {
        self.0.on(shop, self.0.db(shop).store.claim(shop, id)).await
    }

    async fn release(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation> {
        self.0.on(shop, self.0.db(shop).store.release(shop, id)).await
    }

    async fn extend(&self, shop: &ShopId, id: ReservationId, ttl: Ttl) -> Result<Reservation> {
        self.0.on(shop, self.0.db(shop).store.extend(shop, id, ttl)).await
    }

    async fn get(&self, shop: &ShopId, id: ReservationId) -> Result<Reservation> {
        self.0.on(shop, self.0.db(shop).store.get(shop, id)).await
    }

    async fn expire(&self, limit: u32) -> Result<u64> {
        Ok(self.0.all(move |db| async move { db.store.expire(limit).await }).await?.into_iter().sum())
    }

    async fn purge(&self, older_than: Duration, limit: u32) -> Result<u64> {
        Ok(self.0.all(move |db| async move { db.store.purge(older_than, limit).await }).await?.into_iter().sum())
    }

    /// Summed over the pods, with the oldest of any (`serve` runs a sweeper
    /// per pod, each measuring its own pod).
    async fn unswept(&self) -> Result<Option<Unswept>> {
        let all = self.0.all(|db| async move { db.store.unswept().await }).await?;
        Ok(all
            .into_iter()
            .flatten()
            .reduce(|a, b| Unswept { holds: a.holds + b.holds, oldest: a.oldest.max(b.oldest) }))
    }

    async fn change_stock(&self, req: &StockRequest) -> Result<LocationLevel> {
        self.0.on(req.shop(), self.0.db(req.shop()).store.change_stock(req)).await
    }

    async fn levels(&self, shop: &ShopId, item: &ItemId) -> Result<ItemLevels> {
        self.0.on(shop, self.0.db(shop).store.levels(shop, item)).await
    }

    async fn audit(&self, shop: Option<&ShopId>) -> Result<AuditReport> {
        if let Some(shop) = shop {
            return self.0.on(shop, self.0.db(shop).store.audit(Some(shop))).await;
        }
        let reports = self.0.all(|db| async move { db.store.audit(None).await }).await?;
        let none = AuditReport { checked: 0, breaches: Vec::new(), orphans: Vec::new() };
        Ok(reports.into_iter().fold(none, |mut all, r| {
            all.checked += r.checked;
            all.breaches.extend(r.breaches);
            all.orphans.extend(r.orphans);
            all
        }))
    }

    fn stats(&self) -> StoreStats {
        self.0.pods.iter().map(|p| p.db.store.stats()).fold(StoreStats::default(), |a, b| StoreStats {
            retries: a.retries + b.retries,
            deadlocks: a.deadlocks + b.deadlocks,
            replenishments: a.replenishments + b.replenishments,
            expired: a.expired + b.expired,
            reserves_batched: a.reserves_batched + b.reserves_batched,
            reserve_batches: a.reserve_batches + b.reserve_batches,
        })
    }
}

/// Tokens are kept in every pod: a shop's requests are then checked by its
/// own pod, which is up whenever the shop can be served at all.
#[async_trait]
impl TokenStore for Routed {
    async fn insert_token(&self, token: &TokenRecord) -> Result<()> {
        let token = Arc::new(token.clone());
        self.0
            .all(|db| {
                let token = token.clone();
                async move { db.tokens.insert_token(&token).await }
            })
            .await
            .map(drop)
    }

    /// Asks every pod at once and answers once the pods that matter have:
    /// those of the token's shops (and the default pod for an admin token),
    /// so that a pod of other shops that is down or slow delays nobody.
    /// Revoked in any pod that answered is revoked.
    async fn find_token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let mut asks = tokio::task::JoinSet::new();
        for (i, pod) in self.0.pods.iter().enumerate() {
            let (db, id, name) = (pod.db.clone(), id.to_string(), pod.name.clone());
            asks.spawn(crate::tag::carried(crate::tag::in_pod(
                name,
                async move { (i, db.tokens.find_token(&id).await) },
            )));
        }
        let mut answers: Vec<Option<Result<Option<TokenRecord>>>> = (0..self.0.pods.len()).map(|_| None).collect();
        while let Some(done) = asks.join_next().await {
            let (i, answer) = done.map_err(|e| Error::Internal(format!("token lookup: {e}")))?;
            answers[i] = Some(answer);
            let found = answers.iter().flatten().filter_map(|a| a.as_ref().ok().cloned().flatten());
            let Some(mut row) = found.clone().next() else { continue };
            let mut matter: Vec<usize> = row.shops.iter().map(|s| self.0.index_of(s)).collect();
            if row.admin {
                matter.push(self.0.default);
            }
            if matter.iter().all(|&i| answers[i].is_some()) {
                row.revoked_at = found.filter_map(|r| r.revoked_at).min();
                return Ok(Some(row));
            }
        }
        // Found nowhere: unknown, unless no pod could be asked at all.
        let mut errors = answers.into_iter().flatten().filter_map(|a| a.err());
        match self.0.pods.len() - errors.clone().count() {
            0 => Err(errors.next().unwrap_or_else(|| Error::Internal("no pods".into()))),
            _ => Ok(None),
        }
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let mut rows = merge_tokens(self.0.each(|db| async move { db.tokens.list_tokens().await }).await)?;
        rows.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(rows)
    }

    async fn revoke_token(&self, id: &str) -> Result<bool> {
        let id: Arc<str> = id.into();
        let revoked = self
            .0
            .all(|db| {
                let id = id.clone();
                async move { db.tokens.revoke_token(&id).await }
            })
            .await?;
        Ok(revoked.into_iter().any(|r| r))
    }
}

/// The rows of the pods that answered, one per token id, revoked if any pod
/// has it revoked; an error only when no pod answered.
fn merge_tokens<R: IntoIterator<Item = TokenRecord>>(answers: Vec<(String, Result<R>)>) -> Result<Vec<TokenRecord>> {
    let mut rows: BTreeMap<String, TokenRecord> = BTreeMap::new();
    let mut answered = false;
    let mut last_err = None;
    for (pod, answer) in answers {
        match answer {
            Ok(found) => {
                answered = true;
                for row in found {
                    match rows.get_mut(&row.id) {
                        Some(seen) => {
                            if seen.revoked_at.is_none() {
                                seen.revoked_at = row.revoked_at;
                            }
                        }
                        None => {
                            rows.insert(row.id.clone(), row);
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(pod, error = %e, "cannot read the tokens of a pod");
                last_err = Some(e);
            }
        }
    }
    match (answered, last_err) {
        (false, Some(e)) => Err(e),
        _ => Ok(rows.into_values().collect()),
    }
}

/// A shop's pin lives in its pod; the rollout and the kill switch are set in
/// every pod, and read from the default pod.
#[async_trait]
impl ModeStore for Routed {
    /// Pins from the pod of each pinned shop, each pod's percentages (the
    /// default pod's also as the common ones), the kill switch engaged if
    /// any pod has it engaged (an engage that missed a pod still holds). A
    /// pod that cannot be read counts with the rules it last had, so that a
    /// pod that is down holds no change of the others back.
    async fn load_rules(&self) -> Result<Rules> {
        let set = self.0.clone();
        // Bounded: a pod that hangs must not stop the poller from bringing
        // the other pods' changes (a kill switch) in.
        let answers = self
            .0
            .each(|db| async move {
                match tokio::time::timeout(RULES_WITHIN, db.modes.load_rules()).await {
                    Ok(r) => r,
                    Err(_) => Err(Error::Unavailable(format!("no answer in {} s", RULES_WITHIN.as_secs()))),
                }
            })
            .await;
        let mut rules = Rules { placement: Some(self.0.placement.clone()), ..Rules::default() };
        let mut last = self.0.last_rules.lock().expect("last rules");
        for (i, (pod, (_, answer))) in self.0.pods.iter().zip(answers).enumerate() {
            let theirs = match answer {
                Ok(r) => {
                    last[i] = Some(r.clone());
                    r
                }
                Err(e) => match &last[i] {
                    Some(r) => {
                        tracing::warn!(pod = %pod.name, error = %e, "cannot read a pod's mode rules; keeping its last ones");
                        r.clone()
                    }
                    None => return Err(e),
                },
            };
            rules.shops.extend(theirs.shops.into_iter().filter(|(s, _)| set.of(s).name == pod.name));
            rules.kill_switch |= theirs.kill_switch;
            if i == self.0.default {
                rules.rollout = theirs.rollout.clone();
            }
            if !theirs.rollout.is_empty() {
                rules.pods.insert(pod.name.clone(), theirs.rollout);
            }
        }
        Ok(rules)
    }

    async fn set_shop_mode(&self, shop: &ShopId, mode: Option<Mode>) -> Result<()> {
        self.0.on(shop, self.0.db(shop).modes.set_shop_mode(shop, mode)).await
    }

    async fn set_rollout(&self, pod: Option<&str>, mode: Mode, percent: u8) -> Result<()> {
        match pod {
            None => {
                self.0.all(move |db| async move { db.modes.set_rollout(None, mode, percent).await }).await.map(drop)
            }
            Some(name) => match self.0.pods.iter().find(|p| p.name == name) {
                Some(p) => crate::tag::in_pod(p.name.clone(), p.db.modes.set_rollout(None, mode, percent)).await,
                None => Err(Invalid::new("pod", format!("no pod {name:?} in the pods file")).into()),
            },
        }
    }

    async fn set_kill_switch(&self, engaged: bool) -> Result<()> {
        self.0.all(move |db| async move { db.modes.set_kill_switch(engaged).await }).await.map(drop)
    }
}

#[async_trait]
impl LegacyLedger for Routed {
    fn backend(&self) -> Backend {
        self.0.default_db().legacy.backend()
    }

    async fn ledger_ensure(&self, shop: &ShopId, item: &ItemId, location: &LocationId) -> Result<()> {
        self.0.on(shop, self.0.db(shop).legacy.ledger_ensure(shop, item, location)).await
    }

    async fn ledger_rows(&self, shop: Option<&ShopId>, item: Option<&ItemId>) -> Result<Vec<LedgerRow>> {
        if let Some(shop) = shop {
            return self.0.on(shop, self.0.db(shop).legacy.ledger_rows(Some(shop), item)).await;
        }
        let item = item.cloned();
        let rows = self
            .0
            .all(|db| {
                let item = item.clone();
                async move { db.legacy.ledger_rows(None, item.as_ref()).await }
            })
            .await?;
        Ok(rows.into_iter().flatten().collect())
    }

    async fn ledger_swap_on_hand(&self, row: &LedgerRow, new: i64) -> Result<bool> {
        self.0.on(&row.shop, self.0.db(&row.shop).legacy.ledger_swap_on_hand(row, new)).await
    }

    async fn ledger_fulfil(&self, shop: &ShopId, item: &ItemId, location: &LocationId, quantity: i64) -> Result<bool> {
        self.0.on(shop, self.0.db(shop).legacy.ledger_fulfil(shop, item, location, quantity)).await
    }

    async fn ledger_commit(&self, shop: &ShopId, lines: &[(ItemId, LocationId, u32)]) -> Result<()> {
        self.0.on(shop, self.0.db(shop).legacy.ledger_commit(shop, lines)).await
    }

    async fn ledger_put(&self, row: &LedgerRow) -> Result<()> {
        self.0.on(&row.shop, self.0.db(&row.shop).legacy.ledger_put(row)).await
    }

    async fn stocked_locations(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId)>> {
        self.0.on(shop, self.0.db(shop).legacy.stocked_locations(shop)).await
    }
}

/// Subscriptions and deliveries of a shop live in its pod. The delivery
/// queue is per pod: workers lease from one pod ([`Database::pods`]), so
/// the queue-wide calls here answer for every pod together.
#[async_trait]
impl WebhookStore for Routed {
    async fn add_subscription(&self, sub: &Subscription, secret: &str) -> Result<()> {
        self.0.on(&sub.shop, self.0.db(&sub.shop).webhooks.add_subscription(sub, secret)).await
    }

    async fn list_subscriptions(&self, shop: &ShopId) -> Result<Vec<Subscription>> {
        self.0.on(shop, self.0.db(shop).webhooks.list_subscriptions(shop)).await
    }

    async fn remove_subscription(&self, shop: &ShopId, id: &str) -> Result<bool> {
        self.0.on(shop, self.0.db(shop).webhooks.remove_subscription(shop, id)).await
    }

    async fn list_deliveries(
        &self,
        shop: &ShopId,
        status: Option<DeliveryStatus>,
        limit: u32,
    ) -> Result<Vec<Delivery>> {
        self.0.on(shop, self.0.db(shop).webhooks.list_deliveries(shop, status, limit)).await
    }

    async fn retry_delivery(&self, shop: &ShopId, id: i64) -> Result<bool> {
        self.0.on(shop, self.0.db(shop).webhooks.retry_delivery(shop, id)).await
    }

    async fn lease_deliveries(&self, _limit: u32, _lease: Duration) -> Result<Vec<holdfast_core::Leased>> {
        Err(Error::Internal("deliveries are leased per pod: run a worker on each of Database::pods".into()))
    }

    async fn record_attempts(&self, _outcomes: &[(i64, u32, holdfast_core::Attempt)]) -> Result<()> {
        Err(Error::Internal("delivery ids are per pod: record attempts on the pod that leased them".into()))
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        let stats = self.0.all(|db| async move { db.webhooks.queue_stats().await }).await?;
        Ok(stats.into_iter().fold(QueueStats::default(), |a, b| QueueStats {
            pending: a.pending + b.pending,
            dead: a.dead + b.dead,
            oldest_pending: a.oldest_pending.max(b.oldest_pending),
        }))
    }

    async fn purge_deliveries(&self, older_than: Duration, limit: u32) -> Result<u64> {
        let n = self.0.all(move |db| async move { db.webhooks.purge_deliveries(older_than, limit).await }).await?;
        Ok(n.into_iter().sum())
    }
}

#[async_trait]
impl Housekeeping for Routed {
    /// Each table's size summed over the pods.
    async fn table_sizes(&self) -> Result<Vec<TableSize>> {
        let mut sum: BTreeMap<String, u64> = BTreeMap::new();
        for sizes in self.0.all(|db| async move { db.housekeeping.table_sizes().await }).await? {
            for t in sizes {
                *sum.entry(t.table).or_default() += t.bytes;
            }
        }
        Ok(sum.into_iter().map(|(table, bytes)| TableSize { table, bytes }).collect())
    }

    /// The default pod's.
    async fn server_state(&self) -> Result<ServerState> {
        self.0.default_db().housekeeping.server_state().await
    }

    /// The lowest of the pods'.
    async fn schema_version(&self) -> Result<(i64, i64)> {
        let all = self.0.all(|db| async move { db.housekeeping.schema_version().await }).await?;
        Ok(all.into_iter().min().unwrap_or((0, 0)))
    }

    /// Every pod's busiest, each named by its pod, merged busiest first. A
    /// pod that does not answer (within [`POD_READ_WITHIN`]) is left out (its readiness says why), so
    /// one pod down does not blank the others' items; only when no pod
    /// answers is it an error.
    async fn hot_items(&self, window: Duration, limit: u32) -> Result<Vec<HotItem>> {
        let mut all: Vec<HotItem> = Vec::new();
        let mut failed = None;
        let mut answered = false;
        let read = move |db: Database| async move {
            match tokio::time::timeout(POD_READ_WITHIN, db.housekeeping.hot_items(window, limit)).await {
                Ok(r) => r,
                Err(_) => Err(Error::Unavailable(format!("no answer within {POD_READ_WITHIN:?}"))),
            }
        };
        for (pod, r) in self.0.each(read).await {
            match r {
                Ok(items) => {
                    answered = true;
                    all.extend(items.into_iter().map(|h| HotItem { pod: Some(pod.clone()), ..h }));
                }
                Err(e) => {
                    tracing::debug!(pod = %pod, error = %e, "hot items: pod did not answer");
                    failed.get_or_insert(e);
                }
            }
        }
        if let (false, Some(e)) = (answered, failed) {
            return Err(e);
        }
        all.sort_by_key(|h| std::cmp::Reverse((h.sold_recently, h.held)));
        all.truncate(limit as usize);
        Ok(all)
    }
}

#[cfg(feature = "testing")]
#[async_trait]
impl crate::BatchReserve for Routed {
    async fn reserve_batch(&self, reqs: Vec<ReserveRequest>) -> Vec<Result<Reserved>> {
        match reqs.first() {
            Some(first) => {
                let shop = first.shop().clone();
                self.0.on(&shop, self.0.db(&shop).batches.reserve_batch(reqs)).await
            }
            None => Vec::new(),
        }
    }

    async fn settle_batch(
        &self,
        shop: &ShopId,
        ops: Vec<(ReservationId, holdfast_core::Settle)>,
    ) -> Vec<Result<Reservation>> {
        self.0.on(shop, self.0.db(shop).batches.settle_batch(shop, ops)).await
    }

    async fn levels_twice(
        &self,
        shop: &ShopId,
        item: &ItemId,
        between: std::time::Duration,
    ) -> Result<[(Vec<holdfast_core::LocationLevel>, bool); 2]> {
        self.0.db(shop).batches.levels_twice(shop, item, between).await
    }

    async fn in_flight(
        &self,
        shop: &ShopId,
        place: (&ItemId, &holdfast_core::LocationId),
        lookahead: std::time::Duration,
        matters: u32,
    ) -> Result<(i64, Option<std::time::Duration>)> {
        self.0.db(shop).batches.in_flight(shop, place, lookahead, matters).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
default = "p1"
[pods.p1]
database_url = "postgres://app@db1/holdfast"
[pods.p2]
database_url = "mysql://app@db2/holdfast"
max_connections = 8
[shops]
"shop-7" = "p2"
"#;

    #[test]
    fn a_pods_file_reads_as_written() {
        let f = PodsFile::parse(FILE).unwrap();
        assert_eq!(f.default, "p1");
        assert_eq!(f.pods["p2"].max_connections, Some(8));
        assert_eq!(f.shops["shop-7"], "p2");
    }

    #[test]
    fn a_pods_file_that_does_not_add_up_is_refused() {
        for (text, says) in [
            ("default = \"p9\"\n[pods.p1]\ndatabase_url = \"postgres://h/d\"", "names no pod"),
            ("default = \"p1\"\n[pods.p1]\ndatabase_url = \"sqlite://x.db\"", "SQLite"),
            ("default = \"p1\"\n[pods.P1]\ndatabase_url = \"postgres://h/d\"", "[a-z0-9_-]"),
            ("default = \"p1\"\n[pods.p1]\ndatabase_url = \"postgres://h/d\"\n[shops]\n\"s\" = \"p2\"", "p2"),
            ("default = \"p1\"\n[pods.p1]\ndatabase_url = \"postgres://h/d\"\n[shops]\n\"a b\" = \"p1\"", "a b"),
            ("default = \"p1\"\n[pods.p1]\ndatabase_url = \"postgres://h/d\"\nextra = 1", "extra"),
            ("default = \"p1\"\n[pods]", "no pods"),
        ] {
            let e = PodsFile::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
