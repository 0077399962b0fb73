//! holdfast's HTTP service (`holdfast serve`): the `/v1` API over
//! any [`holdfast_core::Store`], bearer tokens scoped to shops, Prometheus
//! metrics, health probes, an OpenAPI document generated from the handlers,
//! and the expiry sweeper. [`Application`] is what both the CLI and the tests
//! start; [`cli`] holds the bodies of `holdfast serve` and `holdfast token`.

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod console;
pub mod error;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod settings;
pub mod state;
pub mod tls;
pub mod webhooks;

pub use app::{Application, router, shutdown_signal};
pub use holdfast_sql::Sweeper;
pub use settings::{LogFormat, Settings};
pub use state::AppState;
