//! The application under test: built from `Settings` like `holdfast serve`
//! builds it, listening on a free port, with tokens for two shops and an
//! admin, and a reqwest client.

use std::future::Future;
use std::sync::Arc;

use holdfast_core::{Backend, ShopId, TokenStore};
use holdfast_server::{Application, Settings, Sweeper, auth};
use holdfast_sql::StoreConfig;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::support::{RedisPrefix, TestDb, with_db};

pub struct TestApp {
    pub db: Arc<TestDb>,
    pub base: String,
    pub client: reqwest::Client,
    /// Reaches shop `s1`.
    pub s1: String,
    /// Reaches shop `s2`.
    pub s2: String,
    pub admin: String,
    pub tokens: Arc<dyn TokenStore>,
    pub sweeper: Sweeper,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<anyhow::Result<()>>>,
    /// The keys of `--redis-url`, deleted with the app.
    _redis: Option<RedisPrefix>,
}

/// Settings for a test: a free port, the test's database, tokens read on
/// every request (so a revocation shows at once), no background sweeper
/// (tests drain it themselves).
pub fn test_settings(db: &TestDb) -> Settings {
    Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        database_url: Some(db.url.clone()),
        max_connections: 16,
        auth_cache_ms: 0,
        sweep_interval_ms: 0,
        ..Settings::default()
    }
}

impl TestApp {
    pub async fn start(db: Arc<TestDb>, settings: Settings) -> Self {
        if std::env::var_os("RUST_LOG").is_some() {
            holdfast_server::logging::init(holdfast_server::LogFormat::Text);
        }
        let redis = settings.redis_url.as_deref().map(|url| RedisPrefix::named(url, &settings.redis_prefix));
        let app = Application::build(settings).await.expect("application builds");
        let base = format!("http://{}", app.local_addr());
        let tokens = app.state().db.tokens.clone();
        let sweeper = app.sweeper();
        let (s1, s2, admin) = (
            mint(&*tokens, &["s1"], false).await,
            mint(&*tokens, &["s2"], false).await,
            mint(&*tokens, &[], true).await,
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(app.run_until(async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap();
        TestApp {
            db,
            base,
            client,
            s1,
            s2,
            admin,
            tokens,
            sweeper,
            stop: Some(stop),
            served: Some(served),
            _redis: redis,
        }
    }

    /// Sends `body` (JSON) with `token`; answers status and parsed body
    /// (`Value::Null` when the body is not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.expect("request sent");
        let status = res.status();
        let bytes = res.bytes().await.expect("body read");
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str, token: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    /// Stops the server (as SIGTERM would) and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.expect("server task").expect("server ran cleanly");
        }
    }

    /// Asks the server to stop, without waiting.
    pub fn begin_stop(&mut self) -> JoinHandle<anyhow::Result<()>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.served.take().expect("still serving")
    }
}

/// Stores a new token for `shops` and returns its text.
pub async fn mint(tokens: &dyn TokenStore, shops: &[&str], admin: bool) -> String {
    let t = auth::mint(shops.iter().map(|s| ShopId::new(*s).unwrap()).collect(), admin);
    tokens.insert_token(&t.record).await.expect("insert token");
    t.text
}

/// Runs `body` against a fresh database and an application on it.
pub async fn with_app<F, Fut>(backend: Backend, tweak: fn(&mut Settings), body: F)
where
    F: FnOnce(TestApp) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_db(backend, StoreConfig::default(), move |db| async move {
        let mut settings = test_settings(&db);
        tweak(&mut settings);
        let app = TestApp::start(db, settings).await;
        body(app).await;
    })
    .await;
}

/// Sets the stock of (item, location) in a shop over HTTP.
pub async fn stock(app: &TestApp, token: &str, shop: &str, item: &str, location: &str, on_hand: i64) {
    let (status, body) = app
        .put(
            &format!("/v1/shops/{shop}/items/{item}/locations/{location}"),
            token,
            serde_json::json!({ "on_hand": on_hand }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Holds `quantity` of `item` in a shop over HTTP (key `k`, any location)
/// and answers the new reservation.
pub async fn hold(app: &TestApp, token: &str, shop: &str, item: &str, quantity: u32) -> Value {
    let cart = serde_json::json!({ "key": "k", "lines": [{ "item": item, "quantity": quantity }] });
    let (status, r) = app.post(&format!("/v1/shops/{shop}/reservations"), token, cart).await;
    assert_eq!(status, StatusCode::CREATED, "{r}");
    r
}

pub fn no_tweak(_: &mut Settings) {}
