//! `--target http://…`: the flash sale over HTTP against a `holdfast serve`
//! built and started in this process (as holdfast-server's own tests start
//! it), each test on a database of its own.

use std::sync::Arc;

use holdfast_bench::bench::{self, BenchBackend, BenchOptions, BenchReport};
use holdfast_bench::http::HttpOptions;
use holdfast_core::{Backend, Error, ShopId, TokenStore};
use holdfast_server::{Application, Settings, auth};
use holdfast_sql::StoreConfig;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::common::{assert_clean, options, sale};
use crate::support::{TestDb, with_db};

/// A serving application on a free port, sweeping every 200 ms.
pub struct Server {
    pub base: String,
    tokens: Arc<dyn TokenStore>,
    stop: oneshot::Sender<()>,
    served: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    pub async fn start(db: &TestDb, insecure_no_auth: bool) -> Self {
        let settings = Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            database_url: Some(db.url.clone()),
            max_connections: 16,
            sweep_interval_ms: 200,
            insecure_no_auth,
            ..Settings::default()
        };
        let app = Application::build(settings).await.expect("the application builds");
        let base = format!("http://{}", app.local_addr());
        let tokens = app.state().db.tokens.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(app.run_until(async move {
            let _ = stopped.await;
        }));
        Server { base, tokens, stop, served }
    }

    /// A new token for `shops` (and `/admin` when `admin`).
    async fn token(&self, shops: &[&str], admin: bool) -> String {
        let t = auth::mint(shops.iter().map(|s| ShopId::new(*s).unwrap()).collect(), admin);
        self.tokens.insert_token(&t.record).await.expect("insert token");
        t.text
    }

    fn options(&self, token: Option<String>, shop: Option<&str>) -> BenchOptions {
        let mut o = options(BenchBackend::Postgres, sale(120, 400, 12));
        o.http = Some(HttpOptions { url: self.base.clone(), token, shop: shop.map(|s| ShopId::new(s).unwrap()) });
        o
    }

    /// A sale against this server, which must end clean.
    async fn clean_sale(&self, token: Option<String>, shop: Option<&str>) -> BenchReport {
        let r = bench::run(&self.options(token, shop)).await.expect("the sale runs");
        assert_clean(&r);
        assert_eq!((r.backend.as_str(), r.database.as_str()), ("http", self.base.as_str()));
        r
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.served.await.expect("server task").expect("served cleanly");
    }
}

/// Runs `body` against a server on a database of its own on `backend`, then
/// stops the server.
async fn with_server<F, Fut>(backend: Backend, insecure_no_auth: bool, body: F)
where
    F: FnOnce(Arc<Server>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_db(backend, StoreConfig::default(), move |db| async move {
        let server = Arc::new(Server::start(&db, insecure_no_auth).await);
        body(server.clone()).await;
        Arc::into_inner(server).expect("the test keeps no handle on the server").stop().await;
    })
    .await;
}

/// With an admin token that reaches the shop: levels, audit and the
/// server's connection report all come from the server.
async fn admin_token_sale_ends_clean(backend: Backend) {
    with_server(backend, false, |server| async move {
        let token = server.token(&["flash"], true).await;
        let r = server.clean_sale(Some(token), Some("flash")).await;
        assert_eq!(r.sale.audit_ok, Some(true), "{r:#?}");
        let conns = r.sale.connections.as_ref().expect("an admin token reads /admin/connections");
        let reserve = conns.iter().find(|c| c.tag == "reserve").unwrap_or_else(|| panic!("no reserve tag: {conns:?}"));
        assert!(reserve.checkouts > 0 && reserve.statements > 0 && reserve.hold_seconds_total > 0.0, "{reserve:?}");
        // A second run in the same shop sells its own item: both end clean.
        let token = server.token(&["flash"], true).await;
        let again = server.clean_sale(Some(token), Some("flash")).await;
        assert_ne!(again.run, r.run);
    })
    .await;
}

holdfast_testkit::per_backend!(admin_token_sale_ends_clean: sqlite => Sqlite, postgres => Postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shop_token_gets_levels_only_and_still_counts_exactly() {
    with_server(Backend::Sqlite, false, |server| async move {
        let token = server.token(&["s1"], false).await;
        let r = server.clean_sale(Some(token), Some("s1")).await;
        assert_eq!(r.sale.audit_ok, None, "no admin token: no audit");
        assert!(r.sale.connections.is_none());
        assert!(r.notes.iter().any(|n| n.contains("not an admin token")), "{:?}", r.notes);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_auth_each_run_sells_in_a_shop_of_its_own() {
    with_server(Backend::Sqlite, true, |server| async move {
        let r = server.clean_sale(None, None).await;
        assert_eq!(r.sale.audit_ok, Some(true), "--insecure-no-auth makes every caller an admin");
        let shop = format!("sold in shop bench-{}", r.run);
        assert!(r.notes.iter().any(|n| n.starts_with(&shop)), "{:?}", r.notes);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_that_does_not_reach_the_shop_is_told_what_to_pass() {
    with_server(Backend::Sqlite, false, |server| async move {
        let token = server.token(&["s1"], true).await;
        // No --shop: the run's own shop, which this token does not reach.
        match bench::run(&server.options(Some(token.clone()), None)).await {
            Err(Error::Invalid(i)) => {
                assert_eq!(i.field, "shop");
                assert!(i.message.contains("--shop SHOP") && i.message.contains("--insecure-no-auth"), "{i}");
            }
            other => panic!("expected invalid shop, got {other:?}"),
        }
        // A shop the token does not reach.
        match bench::run(&server.options(Some(token), Some("s2"))).await {
            Err(Error::Invalid(i)) => assert!(i.field == "shop" && i.message.contains("does not reach shop s2"), "{i}"),
            other => panic!("expected invalid shop, got {other:?}"),
        }
        // No token, and a token the server does not know.
        for token in [None, Some("hf_0123456789abcdef_00".to_string())] {
            match bench::run(&server.options(token.clone(), Some("s1"))).await {
                Err(Error::Invalid(i)) => assert_eq!(i.field, "token", "{token:?}: {i}"),
                other => panic!("{token:?}: expected invalid token, got {other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn a_target_nobody_listens_on_is_unavailable() {
    // Bind and drop: a port that was just free.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut o = options(BenchBackend::Postgres, sale(10, 10, 1));
    o.http = Some(HttpOptions { url: format!("http://127.0.0.1:{port}"), token: None, shop: None });
    match bench::run(&o).await {
        Err(Error::Unavailable(m)) => assert!(m.contains(&format!("127.0.0.1:{port}")), "{m}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
}
