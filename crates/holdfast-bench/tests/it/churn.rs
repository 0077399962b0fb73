//! Two `holdfast serve` replicas on one database under the mixed checkout
//! load (`bench churn`), each sweeping every 200 ms: the units sold on the
//! ledger are what the clients were told, the audit is clean, and no request
//! was answered `503 timeout`.

use std::time::Duration;

use holdfast_bench::churn::{self, ChurnOptions};
use holdfast_core::Backend;
use holdfast_sql::{ConnectOptions, StoreConfig};

use crate::http::Server;
use crate::support::{seed, with_db};

async fn two_replicas_under_the_mixed_load(backend: Backend) {
    let seed = seed("two_replicas", backend.name());
    with_db(backend, StoreConfig::default(), move |db| async move {
        let (a, b) = (Server::start(&db, true).await, Server::start(&db, true).await);
        let opts = ChurnOptions {
            connect: ConnectOptions { max_connections: 16, ..ConnectOptions::new(db.url.clone()) },
            targets: vec![a.base.clone(), b.base.clone()],
            token: None,
            shop: None,
            clients: 32,
            duration: Duration::from_secs(8),
            items: 5,
            locations: 3,
            stock: (15, 60),
            seed,
            check: false,
        };
        let r = churn::run(&opts).await.expect("the load runs");
        a.stop().await;
        b.stop().await;
        assert!(r.requests > 500, "the load ran: {r:?}");
        assert!(r.books.is_empty(), "units sold are what the clients were told: {:?}", r.books);
        assert_eq!(r.audit_ok, Some(true), "the books balance");
        let timeouts: u64 = r.unknown.iter().filter(|(why, _)| why.contains("timeout")).map(|(_, n)| n).sum();
        assert_eq!(timeouts, 0, "no request reached a timeout: {:?}", r.unknown);
        for op in ["reserve", "claim", "release", "levels"] {
            assert!(r.ops.iter().any(|o| o.op == op && o.count > 0), "the mix had {op}: {:?}", r.ops);
        }
    })
    .await;
}

holdfast_testkit::per_backend!(two_replicas_under_the_mixed_load: postgres => Postgres, mysql => MySql);
