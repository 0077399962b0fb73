//! The migration off a Redis counter model, as data: the four modes a shop
//! moves through, the rules that assign them (explicit shop lists,
//! percentages by a stable hash of shop_id, the kill switch), and the tables
//! behind them ([`ModeStore`], and [`LegacyLedger`] for the legacy store's
//! SQL side). Serving shops in their modes is `holdfast-redis`'s business.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Invalid, Result};
use crate::ids::{ItemId, LocationId, ShopId};
use crate::store::Backend;

/// A shop's mode, in the order a shop moves through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Legacy only: Redis decides, SQL is not involved beyond its ledger.
    Redis,
    /// Redis decides; every operation is mirrored to SQL off the critical
    /// path and the two answers are compared.
    Shadow,
    /// SQL decides; Redis is updated after each commit so it stays current.
    SqlPrimary,
    /// holdfast only.
    Sql,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Redis, Mode::Shadow, Mode::SqlPrimary, Mode::Sql];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Redis => "redis",
            Mode::Shadow => "shadow",
            Mode::SqlPrimary => "sql-primary",
            Mode::Sql => "sql",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| Invalid::new("mode", format!("must be redis, shadow, sql-primary or sql (got {s:?})")))
    }
}

/// A shop's place in the rollout, 0..10,000 (basis points): FNV-1a of the
/// shop id. Stable across processes, releases and platforms, so a shop that
/// is in at 5% stays in at 10%.
pub fn bucket(shop: &ShopId) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in shop.as_str().bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 10_000) as u32
}

/// The rules as stored in the database.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rules {
    /// Explicit assignments; they win over percentages.
    pub shops: BTreeMap<ShopId, Mode>,
    /// For shadow, sql-primary and sql: the percentage of shops at that mode
    /// *or a later one*. `shadow 100, sql-primary 10` puts 10% of shops on
    /// sql-primary and the other 90% in shadow. The lowest buckets advance
    /// first, so raising a percentage only ever moves shops forward.
    pub rollout: BTreeMap<Mode, u8>,
    /// Engaged: every shop that would be sql-primary is served as shadow
    /// (Redis decides again, SQL keeps being mirrored so the shop can go
    /// forward again without a reconcile).
    pub kill_switch: bool,
    /// With pods: each pod's own percentages, which take the place of
    /// `rollout` for that pod's shops (a rollout pod by pod).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pods: BTreeMap<String, BTreeMap<Mode, u8>>,
    /// With pods: the pod of each shop.
    #[serde(skip)]
    pub placement: Option<Arc<Placement>>,
}

/// Which pod each shop lives in: those listed, else the default pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub default: String,
    pub shops: HashMap<ShopId, String>,
}

impl Placement {
    pub fn pod_of(&self, shop: &ShopId) -> &str {
        self.shops.get(shop).unwrap_or(&self.default)
    }
}

impl Rules {
    /// The mode the rules give `shop`, before the kill switch.
    pub fn assigned(&self, shop: &ShopId) -> Mode {
        if let Some(m) = self.shops.get(shop) {
            return *m;
        }
        let b = bucket(shop);
        let rollout = self.placement.as_ref().and_then(|p| self.pods.get(p.pod_of(shop))).unwrap_or(&self.rollout);
        for m in [Mode::Sql, Mode::SqlPrimary, Mode::Shadow] {
            let pct = rollout.get(&m).copied().unwrap_or(0) as u32;
            if b < pct * 100 {
                return m;
            }
        }
        Mode::Redis
    }

    /// The mode `shop` is served in now.
    pub fn mode_of(&self, shop: &ShopId) -> Mode {
        match self.assigned(shop) {
            Mode::SqlPrimary if self.kill_switch => Mode::Shadow,
            m => m,
        }
    }
}

/// The mode tables (`shop_modes`, `mode_rollout`, `kill_switch`): read by
/// every serving process about twice a second, written by the admin API and
/// the CLI.
#[async_trait]
pub trait ModeStore: Send + Sync + fmt::Debug {
    /// Every rule, as stored.
    async fn load_rules(&self) -> Result<Rules>;

    /// Pins `shop` to `mode`, or (`None`) lets the rollout percentages decide.
    async fn set_shop_mode(&self, shop: &ShopId, mode: Option<Mode>) -> Result<()>;

    /// Sets the share of shops at `mode` or beyond (see [`Rules::assigned`]):
    /// of every shop, or with pods of the shops of pod `pod` only.
    async fn set_rollout(&self, pod: Option<&str>, mode: Mode, percent: u8) -> Result<()>;

    async fn set_kill_switch(&self, engaged: bool) -> Result<()>;
}

/// One row of the legacy store's SQL ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub shop: ShopId,
    pub item: ItemId,
    pub location: LocationId,
    pub on_hand: i64,
    pub committed: i64,
}

/// The legacy design's SQL side (`legacy_ledger`): `on_hand` and the
/// committed (sold) units per (shop, item, location), while available units
/// and live holds live in Redis. Plain single-row reads and writes.
#[async_trait]
pub trait LegacyLedger: Send + Sync + fmt::Debug {
    /// The database the ledger lives in.
    fn backend(&self) -> Backend;

    /// Creates the ledger row of an (item, location) if missing.
    async fn ledger_ensure(&self, shop: &ShopId, item: &ItemId, location: &LocationId) -> Result<()>;

    /// Ledger rows of one shop (and item), or of every shop.
    async fn ledger_rows(&self, shop: Option<&ShopId>, item: Option<&ItemId>) -> Result<Vec<LedgerRow>>;

    /// Moves `on_hand` from `old` to `new` if nobody changed it meanwhile.
    async fn ledger_swap_on_hand(&self, row: &LedgerRow, new: i64) -> Result<bool>;

    /// Ships `quantity` committed units: `on_hand` and `committed` both fall.
    /// `false` when fewer than `quantity` are committed.
    async fn ledger_fulfil(&self, shop: &ShopId, item: &ItemId, location: &LocationId, quantity: i64) -> Result<bool>;

    /// The SQL half of a legacy claim: adds each line to `committed`, in one
    /// transaction.
    async fn ledger_commit(&self, shop: &ShopId, lines: &[(ItemId, LocationId, u32)]) -> Result<()>;

    /// Overwrites one ledger row (reconcile).
    async fn ledger_put(&self, row: &LedgerRow) -> Result<()>;

    /// The (item, location) pairs holdfast's own ledger (`inventory_levels`)
    /// knows for a shop, for reconciling Redis from SQL.
    async fn stocked_locations(&self, shop: &ShopId) -> Result<Vec<(ItemId, LocationId)>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop(s: &str) -> ShopId {
        ShopId::new(s).unwrap()
    }

    #[test]
    fn the_same_shops_stay_in_as_the_percentage_grows() {
        let shops: Vec<ShopId> = (0..2000).map(|n| shop(&format!("shop-{n}"))).collect();
        let mut before: Vec<&ShopId> = Vec::new();
        for pct in [0u8, 1, 5, 10, 25, 50, 100] {
            let rules = Rules { rollout: [(Mode::Sql, pct)].into(), ..Rules::default() };
            let now: Vec<&ShopId> = shops.iter().filter(|s| rules.mode_of(s) == Mode::Sql).collect();
            assert!(before.iter().all(|s| now.contains(s)), "a shop left at {pct}%");
            let share = now.len() as f64 / shops.len() as f64 * 100.0;
            assert!((share - pct as f64).abs() < 3.5, "{pct}% gave {share:.1}%");
            before = now;
        }
    }

    #[test]
    fn a_pods_rollout_moves_only_its_own_shops() {
        let placement = Placement { default: "p1".into(), shops: [(shop("moved"), "p2".to_string())].into() };
        let rules = Rules {
            rollout: [(Mode::Shadow, 100)].into(),
            pods: [("p2".to_string(), [(Mode::Sql, 100)].into())].into(),
            placement: Some(Arc::new(placement)),
            ..Rules::default()
        };
        assert_eq!(rules.mode_of(&shop("moved")), Mode::Sql, "p2's own rollout");
        assert_eq!(rules.mode_of(&shop("stays")), Mode::Shadow, "p1 has no rollout of its own: the common one");
    }

    #[test]
    fn pins_win_and_the_kill_switch_only_moves_sql_primary() {
        let mut rules = Rules {
            rollout: [(Mode::Shadow, 100), (Mode::SqlPrimary, 100)].into(),
            shops: [(shop("pinned"), Mode::Sql), (shop("legacy"), Mode::Redis)].into(),
            ..Rules::default()
        };
        assert_eq!(rules.mode_of(&shop("any")), Mode::SqlPrimary);
        assert_eq!(rules.mode_of(&shop("legacy")), Mode::Redis);
        rules.kill_switch = true;
        assert_eq!(rules.mode_of(&shop("any")), Mode::Shadow);
        assert_eq!(rules.mode_of(&shop("pinned")), Mode::Sql);
        assert_eq!(bucket(&shop("s1")), bucket(&shop("s1")));
    }
}
