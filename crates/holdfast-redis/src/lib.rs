//! The path off a Redis counter model: the legacy store
//! itself ([`RedisStore`]), and the [`ModeRouter`] that serves each shop in
//! its mode — `redis`, `shadow`, `sql-primary` or `sql` — from rules in the
//! database ([`ModeControl`]: shop lists, percentages, the kill switch).
//!
//! Composition for a server: [`Migration::build`] gives an `Arc<dyn Store>`
//! to serve with and the admin handles for `/admin/modes` and
//! `/admin/kill-switch`.

pub mod cli;
pub mod modes;
pub mod reconcile;
pub mod router;
pub mod shadow;
pub mod store;

use std::sync::Arc;

use holdfast_core::{Error, Store};

pub use holdfast_core::{Mode, Rules};
pub use modes::{KillSwitch, ModeChange, ModeControl, ModesView};
pub use reconcile::{Direction, ReconcileReport};
pub use router::ModeRouter;
pub use shadow::{ShadowConfig, ShadowCounts};
#[cfg(feature = "fault-injection")]
pub use store::InjectedFault;
pub use store::{ClaimOrder, REDIS_ID_BASE, RedisOptions, RedisStore, client, is_redis_id};

/// Everything a serving process needs to run shops in their modes.
#[derive(Debug, Clone)]
pub struct Migration {
    pub router: Arc<ModeRouter>,
    pub control: Arc<ModeControl>,
    pub redis: Arc<RedisStore>,
}

impl Migration {
    /// Wraps the SQL store of `db` in a [`ModeRouter`]: reads the mode rules
    /// (failing if they cannot be read), starts the poller that follows them,
    /// and the shadow mirror. Redis is connected lazily, so a Redis outage at
    /// start does not stop `sql` shops; a Redis whose TLS certificate does
    /// not verify does (that is configuration, not an outage).
    pub async fn build(db: &holdfast_sql::Database, redis: RedisOptions, shadow: ShadowConfig) -> Result<Self, Error> {
        let redis = RedisStore::new(redis, db.legacy.clone())?;
        if let Err(Error::Unavailable(msg)) = redis.ping().await
            && (msg.contains("certificate") || msg.contains("UnknownIssuer") || msg.contains("NotValidForName"))
        {
            return Err(Error::Unavailable(format!(
                "{msg} (the Redis server's certificate did not verify: check the URL's sslrootcert)"
            )));
        }
        let control = ModeControl::load(db.modes.clone()).await?;
        control.spawn_poller();
        let router = Arc::new(ModeRouter::new(db.store.clone(), redis.clone(), control.clone(), shadow));
        Ok(Self { router, control, redis })
    }

    /// The store to serve with.
    pub fn store(&self) -> Arc<dyn Store> {
        self.router.clone()
    }

    /// `GET /admin/modes`: rules, the modes of `shops`, and the shadow counters.
    pub fn admin_view(&self, shops: &[holdfast_core::ShopId]) -> AdminModes {
        AdminModes { modes: self.control.view(shops), shadow: self.router.shadow_counts() }
    }
}

/// The body of `GET /admin/modes`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminModes {
    #[serde(flatten)]
    pub modes: ModesView,
    pub shadow: ShadowCounts,
}
