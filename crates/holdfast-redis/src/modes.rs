//! Which store decides for which shop: [`ModeControl`] keeps every serving
//! process within a poll interval (half a second) of the mode rules in the
//! database (the modes and rules themselves are `holdfast_core::modes`). The
//! admin API for `/admin/modes` and `/admin/kill-switch` is here too, as
//! plain async functions with serde types.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use holdfast_core::{Error, Invalid, Mode, ModeStore, Rules, ShopId};
use serde::{Deserialize, Serialize};

/// The rules of one database, kept fresh by a poller, and the admin API.
#[derive(Debug)]
pub struct ModeControl {
    db: Arc<dyn ModeStore>,
    /// The rules in force, and the ticket of the read they came from.
    rules: RwLock<(u64, Arc<Rules>)>,
    /// Tickets for reads: a read that started earlier never replaces the
    /// result of one that started later (a poll racing an admin write).
    tickets: AtomicU64,
    poll_errors: AtomicU64,
}

/// How often each process rereads the rules: a change reaches every process
/// within this (plus one query), well inside the promised second.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

impl ModeControl {
    /// Reads the rules once; fails if the database cannot be read (a process
    /// must not start serving on guessed modes).
    pub async fn load(db: Arc<dyn ModeStore>) -> Result<Arc<Self>, Error> {
        let rules = db.load_rules().await?;
        Ok(Arc::new(Self {
            db,
            rules: RwLock::new((0, Arc::new(rules))),
            tickets: AtomicU64::new(1),
            poll_errors: AtomicU64::new(0),
        }))
    }

    /// Starts the poller. It stops when the last other `Arc` is dropped.
    pub fn spawn_poller(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(me) = weak.upgrade() else { return };
                me.refresh().await;
            }
        })
    }

    /// Rereads the rules. On a failed read the last rules stay in force and
    /// the failure is counted: a database blip must not flip modes.
    pub async fn refresh(&self) {
        if let Err(e) = self.reload().await {
            self.poll_errors.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("holdfast_mode_poll_errors_total").increment(1);
            tracing::warn!(error = %e, "cannot reread the mode rules; keeping the last ones");
        }
    }

    async fn reload(&self) -> Result<(), Error> {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel);
        let rules = self.db.load_rules().await?;
        let mut cur = self.rules.write().expect("rules lock");
        if ticket > cur.0 {
            if cur.1.kill_switch != rules.kill_switch {
                tracing::warn!(engaged = rules.kill_switch, "kill switch changed");
            }
            *cur = (ticket, Arc::new(rules));
        }
        Ok(())
    }

    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().expect("rules lock").1.clone()
    }

    pub fn mode_of(&self, shop: &ShopId) -> Mode {
        self.rules.read().expect("rules lock").1.mode_of(shop)
    }

    pub fn poll_errors(&self) -> u64 {
        self.poll_errors.load(Ordering::Relaxed)
    }

    // ---- the admin API (`/admin/modes`, `/admin/kill-switch`, the CLI) ----

    /// `GET /admin/modes`: the stored rules, and the mode of each shop named
    /// in `shops` as it is served now.
    pub fn view(&self, shops: &[ShopId]) -> ModesView {
        let rules = self.rules();
        ModesView { resolved: shops.iter().map(|s| (s.clone(), rules.mode_of(s))).collect(), rules: (*rules).clone() }
    }

    /// `PUT /admin/modes`: applies one change and rereads the rules, so the
    /// answer shows the change in force in this process.
    pub async fn apply(&self, change: &ModeChange) -> Result<ModesView, Error> {
        match change {
            ModeChange::Shop { shop, mode } => self.db.set_shop_mode(shop, *mode).await?,
            ModeChange::Rollout { mode, percent, pod } => {
                if *mode == Mode::Redis {
                    return Err(Invalid::new(
                        "mode",
                        "redis is where shops start; roll out shadow, sql-primary or sql",
                    )
                    .into());
                }
                if *percent > 100 {
                    return Err(Invalid::new("percent", format!("must be 0 to 100 (got {percent})")).into());
                }
                self.db.set_rollout(pod.as_deref(), *mode, *percent).await?
            }
        }
        self.reload().await?;
        let shops = match change {
            ModeChange::Shop { shop, .. } => vec![shop.clone()],
            ModeChange::Rollout { .. } => Vec::new(),
        };
        Ok(self.view(&shops))
    }

    /// `POST /admin/kill-switch {"engaged": …}`: stored first, so that every
    /// other process follows within [`POLL_INTERVAL`] and a restart keeps it.
    pub async fn set_kill_switch(&self, engaged: bool) -> Result<KillSwitch, Error> {
        self.db.set_kill_switch(engaged).await?;
        self.reload().await?;
        Ok(self.kill_switch())
    }

    /// `GET /admin/kill-switch`.
    pub fn kill_switch(&self) -> KillSwitch {
        KillSwitch { engaged: self.rules().kill_switch }
    }
}

/// The body of `POST /admin/kill-switch` and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillSwitch {
    pub engaged: bool,
}

/// The body of `PUT /admin/modes`: `{"shop": "s1", "mode": "shadow"}` (mode
/// `null` removes the pin) or `{"rollout": "sql-primary", "percent": 10}`
/// (with pods, `"pod": "p2"` rolls out that pod's shops only). Unknown
/// fields are refused, so a body with both `shop` and `rollout` is neither.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged, deny_unknown_fields)]
pub enum ModeChange {
    /// Pin a shop to a mode; `null` or no `mode` removes the pin.
    Shop { shop: ShopId, mode: Option<Mode> },
    /// The percentage of shops at this mode or a later one: `shadow`,
    /// `sql-primary` or `sql` (shops start in `redis`).
    Rollout {
        #[serde(rename = "rollout")]
        #[cfg_attr(feature = "openapi", schema(schema_with = rollout_modes))]
        mode: Mode,
        #[cfg_attr(feature = "openapi", schema(maximum = 100))]
        #[serde(deserialize_with = "percent")]
        percent: u8,
        /// With pods: this pod's shops only (default: every pod).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<String>,
    },
}

/// A percentage as JSON counts integers (`10` or `10.0`); 0 to 255 here,
/// over 100 refused by [`ModeControl::apply`].
fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let n = holdfast_core::ids::integer(d)?;
    u8::try_from(n).map_err(|_| serde::de::Error::custom(format!("percent must be 0 to 100 (got {n})")))
}

/// The modes a rollout can name.
#[cfg(feature = "openapi")]
fn rollout_modes() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(Mode::ALL.into_iter().filter(|m| *m != Mode::Redis).map(Mode::as_str)))
        .build()
}

/// The answer of `GET /admin/modes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModesView {
    pub rules: Rules,
    /// Shop → the mode it is served in now (kill switch applied).
    pub resolved: BTreeMap<ShopId, Mode>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_bodies_parse() {
        let c: ModeChange = serde_json::from_str(r#"{"shop":"s1","mode":"sql-primary"}"#).unwrap();
        assert_eq!(c, ModeChange::Shop { shop: "s1".parse().unwrap(), mode: Some(Mode::SqlPrimary) });
        let c: ModeChange = serde_json::from_str(r#"{"rollout":"shadow","percent":25}"#).unwrap();
        assert_eq!(c, ModeChange::Rollout { mode: Mode::Shadow, percent: 25, pod: None });
        let c: ModeChange = serde_json::from_str(r#"{"rollout":"sql","percent":100,"pod":"p2"}"#).unwrap();
        assert_eq!(c, ModeChange::Rollout { mode: Mode::Sql, percent: 100, pod: Some("p2".into()) });
        assert!(serde_json::from_str::<ModeChange>(r#"{"shop":"s 1","mode":"sql"}"#).is_err());
        let c: ModeChange = serde_json::from_str(r#"{"shop":"s1"}"#).unwrap();
        assert_eq!(c, ModeChange::Shop { shop: "s1".parse().unwrap(), mode: None });
        // Neither a pin nor a rollout: refused, not read as an unpin of s1.
        assert!(serde_json::from_str::<ModeChange>(r#"{"rollout":"sql","percent":10,"shop":"s1"}"#).is_err());
        assert!(serde_json::from_str::<ModeChange>(r#"{"shop":"s1","mode":"sql","pct":1}"#).is_err());
    }
}
