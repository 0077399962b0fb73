//! The application as a value tests can start: [`Application::build`]
//! connects, migrates and binds (port 0 picks a free port);
//! [`Application::run_until`] serves until a shutdown future resolves, then
//! stops accepting, lets in-flight requests finish and stops the sweeper.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use holdfast_sql::redact;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};

use crate::auth::Authenticator;
use crate::console;
use crate::error::{ApiError, Enveloped};
use crate::routes::{admin, health, reservations, stock, webhooks};
use crate::settings::Settings;
use crate::state::AppState;
use holdfast_sql::Sweeper;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The routes of the HTTP API and the layers every request passes.
pub fn router(state: AppState) -> Router {
    let timeout = state.settings.request_timeout();
    let body_limit = state.settings.body_limit_bytes;
    let activity = state.activity.clone();
    let shop = "/v1/shops/{shop}";
    let v1 = Router::new()
        .route(&format!("{shop}/reservations"), post(reservations::create))
        .route(&format!("{shop}/reservations/{{id}}"), get(reservations::get))
        .route(&format!("{shop}/reservations/{{id}}/claim"), post(reservations::claim))
        .route(&format!("{shop}/reservations/{{id}}/release"), post(reservations::release))
        .route(&format!("{shop}/reservations/{{id}}/extend"), post(reservations::extend))
        .route(&format!("{shop}/items/{{item}}"), get(stock::levels))
        .route(&format!("{shop}/items/{{item}}/locations/{{location}}"), put(stock::set))
        .route(&format!("{shop}/items/{{item}}/locations/{{location}}/adjust"), post(stock::adjust))
        .route(&format!("{shop}/items/{{item}}/locations/{{location}}/fulfil"), post(stock::fulfil))
        .route(&format!("{shop}/webhooks"), post(webhooks::create).get(webhooks::list))
        .route(&format!("{shop}/webhooks/{{id}}"), delete(webhooks::remove))
        // Only matched /v1 routes: an unknown route stays a 404 whatever the header.
        .route_layer(middleware::from_fn(conn_tag));
    Router::new()
        .merge(v1)
        .route("/admin/audit", get(admin::audit))
        .route("/admin/connections", get(admin::connections))
        .route("/admin/modes", get(admin::modes).put(admin::set_mode))
        .route("/admin/kill-switch", get(admin::kill_switch).post(admin::set_kill_switch))
        .route("/admin/overview", get(console::overview))
        .route("/admin/ui", get(console::page))
        .route("/admin/ui/console.js", get(console::script))
        .route("/admin/ui/console.css", get(console::style))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(crate::metrics::render))
        .route("/openapi.json", get(crate::openapi::serve))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::for_status(StatusCode::METHOD_NOT_ALLOWED) })
        // Innermost first: these run after routing, so metrics see the route template.
        .layer(
            ServiceBuilder::new()
                .layer(middleware::from_fn_with_state(activity, crate::metrics::track))
                .layer(CatchPanicLayer::custom(|_| {
                    ApiError::for_status(StatusCode::INTERNAL_SERVER_ERROR).into_response()
                }))
                .layer(middleware::from_fn(envelope))
                .layer(middleware::from_fn_with_state(timeout, deadline))
                .layer(RequestBodyLimitLayer::new(body_limit)),
        )
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(REQUEST_ID.clone(), MakeId::default()))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(span)
                        .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
                )
                .layer(PropagateRequestIdLayer::new(REQUEST_ID.clone())),
        )
        .with_state(state)
}

fn span(req: &Request) -> tracing::Span {
    let id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
    tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path())
}

/// Request ids: a random per-process prefix and a counter; cheap, unique
/// across replicas in practice, and sortable within one process.
#[derive(Debug, Clone)]
struct MakeId {
    prefix: u32,
    next: Arc<AtomicU64>,
}

impl Default for MakeId {
    fn default() -> Self {
        Self { prefix: rand::random(), next: Arc::new(AtomicU64::new(1)) }
    }
}

impl MakeRequestId for MakeId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}-{n:x}", self.prefix)).ok().map(RequestId::new)
    }
}

static CONN_TAG: HeaderName = HeaderName::from_static("x-conn-tag");

/// `X-Conn-Tag`: the caller names its business process and every
/// statement the request sends carries `/* conn_tag:<tag> */ /* op:<op> */`.
/// Checked before anything else runs (authentication included), so a bad tag
/// is `400 invalid_conn_tag` and sends nothing to the database.
async fn conn_tag(req: Request, next: Next) -> Response {
    let Some(raw) = req.headers().get(&CONN_TAG) else {
        return next.run(req).await;
    };
    let tag = raw.to_str().ok().and_then(|s| holdfast_core::ConnTag::new(s).ok());
    match tag {
        Some(tag) => holdfast_sql::with_conn_tag(tag, next.run(req)).await,
        None => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_conn_tag", "X-Conn-Tag must be 1 to 64 of a-z, 0-9 and _")
                .into_response()
        }
    }
}

/// Bounds a request's whole life (body read included). The request runs on
/// a task of its own ([`holdfast_sql::detach`]): a timeout or a client that
/// hangs up never cuts a database conversation short (which would leave the
/// connection unusable). A request past its time is answered `503 timeout`;
/// the attempt it had under way finishes, committing or rolling back, and no
/// further attempt starts. So the answer is truthful unless that commit
/// lands — which is what the idempotency key is for.
async fn deadline(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, holdfast_sql::detach(next.run(req))).await {
        Ok(res) => res,
        Err(_) => ApiError::timeout().into_response(),
    }
}

/// Gives every error answer the JSON envelope, also those made below the
/// handlers (body limit, panics) with a text or empty body of their own.
async fn envelope(req: Request, next: Next) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || res.extensions().get::<Enveloped>().is_some() {
        return res;
    }
    let allow = res.headers().get(header::ALLOW).cloned();
    let mut out = ApiError::for_status(status).into_response();
    if let Some(allow) = allow {
        out.headers_mut().insert(header::ALLOW, allow);
    }
    out
}

/// The service, built and bound, not yet serving.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    /// HTTPS, when `tls_cert` and `tls_key` are set.
    tls: Option<crate::tls::TlsFiles>,
    state: AppState,
}

impl Application {
    /// Connects to the database (migrating it unless told not to) and binds
    /// the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        let opts = settings.connect_options()?;
        let db =
            holdfast_sql::open(&opts).await.with_context(|| format!("connecting to {}", settings.database_name()))?;
        if settings.migrate {
            migrate(&db).await?;
        }
        if settings.insecure_no_auth {
            tracing::warn!(
                "!!! --insecure-no-auth: EVERY REQUEST IS ALLOWED, AS ADMIN, FOR EVERY SHOP. \
                 For local trials only; never expose this server. !!!"
            );
            eprintln!("WARNING: holdfast serve --insecure-no-auth: authentication is OFF; every caller is admin.");
        }
        let tls = match (&settings.tls_cert, &settings.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::TlsFiles::load(cert, key)?),
            _ => None,
        };
        let listener =
            TcpListener::bind(settings.listen).await.with_context(|| format!("binding {}", settings.listen))?;
        let auth = Authenticator::new(
            db.tokens.clone(),
            settings.insecure_no_auth,
            Duration::from_millis(settings.auth_cache_ms),
        );
        let migration = match &settings.redis_url {
            Some(redis_url) => {
                let mut redis = holdfast_redis::RedisOptions::new(redis_url);
                redis.prefix = settings.redis_prefix.clone();
                let m = holdfast_redis::Migration::build(&db, redis, holdfast_redis::ShadowConfig::default())
                    .await
                    .with_context(|| format!("setting up the Redis migration modes ({})", redact(redis_url)))?;
                Some(m)
            }
            None => None,
        };
        let store = migration.as_ref().map(|m| m.store()).unwrap_or_else(|| db.store.clone());
        let state = AppState {
            store,
            migration,
            db,
            auth: Arc::new(auth),
            metrics: crate::metrics::handle(),
            settings: Arc::new(settings),
            activity: Arc::default(),
        };
        Ok(Self { listener, tls, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    pub fn sweeper(&self) -> Sweeper {
        Sweeper::new(self.state.store.clone(), self.state.settings.sweep_batch)
            .with_retention(self.state.settings.retention())
    }

    /// The sweepers to run: the served store's, or with pods one per pod
    /// (and one for the legacy Redis store), so that a pod that is down
    /// holds up no other pod's expiries.
    fn sweepers(&self) -> Vec<(Option<String>, Sweeper)> {
        let s = &self.state.settings;
        let sweeper = |store| Sweeper::new(store, s.sweep_batch).with_retention(s.retention());
        if !self.state.db.has_pods() {
            return vec![(None, self.sweeper())];
        }
        let mut all: Vec<_> =
            self.state.db.pods().into_iter().map(|p| (Some(p.name), sweeper(p.db.store.clone()))).collect();
        if let Some(m) = &self.state.migration {
            all.push((None, sweeper(m.redis.clone())));
        }
        all
    }

    /// Serves until `shutdown` resolves; then stops accepting, finishes the
    /// requests in flight, stops the sweeper and returns.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(every) = self.state.settings.sweep_interval() {
            for (pod, sweeper) in self.sweepers() {
                let run = sweeper.run(every, stopped.clone());
                tasks.push(match pod {
                    Some(pod) => tokio::spawn(holdfast_sql::in_pod(pod, run)),
                    None => tokio::spawn(run),
                });
            }
        }
        tasks.push(tokio::spawn(self.state.activity.clone().run(stopped.clone())));
        let workers = self.state.settings.webhook_workers();
        if workers.workers > 0 {
            tasks.extend(crate::webhooks::spawn_per_pod(&self.state.db, workers, &stopped)?);
        }
        let settings = self.state.settings.clone();
        tracing::info!(
            listen = %self.local_addr(),
            scheme = if self.tls.is_some() { "https" } else { "http" },
            backend = self.state.store.backend().name(),
            sweep_interval_ms = settings.sweep_interval_ms,
            webhook_workers = settings.webhook_workers,
            "holdfast serving"
        );
        let app = router(self.state);
        let shutdown = async move {
            shutdown.await;
            tracing::info!("shutting down: no new connections; finishing requests in flight");
        };
        let outcome = match self.tls {
            Some(files) => {
                files.reload_on_sighup();
                let listener = crate::tls::TlsListener::new(self.listener, files).context("serving HTTPS")?;
                axum::serve(listener, app).with_graceful_shutdown(shutdown).await
            }
            None => axum::serve(self.listener, app).with_graceful_shutdown(shutdown).await,
        }
        .context("serving");
        let _ = stop.send(true);
        for task in tasks {
            let _ = task.await;
        }
        tracing::info!("stopped");
        outcome
    }
}

/// Migrates the database, or each pod. A pod that cannot be reached is
/// left as it is, with a warning: its shops answer `503` until it is back
/// (and migrated, by `holdfast migrate` or the next start), while the other
/// pods serve.
async fn migrate(db: &holdfast_sql::Database) -> anyhow::Result<()> {
    if !db.has_pods() {
        return db.store.migrate().await.context("migrating the database");
    }
    for pod in db.pods() {
        match holdfast_sql::in_pod(pod.name.clone(), pod.db.store.migrate()).await {
            Ok(()) => {}
            Err(holdfast_core::Error::Unavailable(e)) => {
                tracing::warn!(pod = %pod.name, error = %e, "pod unreachable: not migrated; its shops answer 503 until it is back")
            }
            Err(e) => return Err(e).with_context(|| format!("migrating pod {} ({})", pod.name, pod.url)),
        }
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
