//! What every handler shares.

use std::sync::Arc;

use holdfast_core::Store;
use holdfast_sql::Database;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::auth::Authenticator;
use crate::settings::Settings;

#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub db: Database,
    pub auth: Arc<Authenticator>,
    pub metrics: PrometheusHandle,
    pub settings: Arc<Settings>,
    /// Present when serving with `--redis-url`: `store` is then its router.
    pub migration: Option<holdfast_redis::Migration>,
    /// The console's counts and samples of this process's answers.
    pub activity: Arc<crate::console::Activity>,
}
