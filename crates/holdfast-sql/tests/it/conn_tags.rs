//! Connection visibility, checked against the database's own view: the
//! statement log (PostgreSQL `log_statement = 'all'` on the test database,
//! MariaDB's general log) and `pg_stat_activity`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_core::{Backend, ConnTag, Error, StockChange, Store};
use holdfast_sql::{ConnectOptions, StoreConfig, connect, connection_report, with_conn_tag};
use sqlx::Connection;

use holdfast_testkit::*;

/// Every operation of the workload shows up, under its own tag or, where the
/// caller named its process, as the operation after the caller's tag.
fn assert_tags_and_ops(tags: &BTreeSet<String>, statements: &[String]) {
    for expected in
        ["stock", "reserve", "replenish", "release", "levels", "audit", "checkout_completion", "cart_sweeper"]
    {
        assert!(tags.contains(expected), "no statement tagged {expected}: saw {tags:?}");
    }
    for (tag, op) in [("checkout_completion", "reserve"), ("checkout_completion", "claim"), ("cart_sweeper", "expire")]
    {
        let prefix = format!("/* conn_tag:{tag} */ /* op:{op} */ ");
        assert!(statements.iter().any(|s| s.starts_with(&prefix)), "no statement starts with {prefix:?}");
    }
}

/// A mixed workload through the library, with and without a caller's tag.
async fn workload(store: Arc<dyn Store>) {
    let s = shop("s1");
    change(&*store, "s1", "a", "wh", StockChange::Set(6)).await.unwrap();
    let r1 = store.reserve(&request("s1", "k1", vec![line("a", 2, None)])).await.unwrap().reservation;
    let tagged = ConnTag::new("checkout_completion").unwrap();
    let r2 = with_conn_tag(tagged.clone(), store.reserve(&request("s1", "k2", vec![line("a", 3, None)])))
        .await
        .unwrap()
        .reservation;
    with_conn_tag(tagged.clone(), store.claim(&s, r2.id)).await.unwrap();
    store.release(&s, r1.id).await.unwrap();
    // Short: goes through the slow path (ledger lock, refill).
    let e = store.reserve(&request("s1", "k3", vec![line("a", 9, None)])).await;
    assert!(matches!(e, Err(Error::InsufficientStock(_))));
    with_conn_tag(ConnTag::new("cart_sweeper").unwrap(), store.expire(10)).await.unwrap();
    change(&*store, "s1", "a", "wh", StockChange::Fulfil(1)).await.unwrap();
    store.levels(&s, &item("a")).await.unwrap();
    store.audit(Some(&s)).await.unwrap();
}

/// Every statement holdfast sent, as the server logged it (PostgreSQL's
/// statement log, MariaDB's general log), starts with a valid tag; caller
/// tags appear where given.
async fn server_log_shows_every_tag(backend: Backend) {
    with_db(backend, StoreConfig::default(), |db| async move {
        let log = StatementLog::start(&db).await;
        // New sessions, opened after the log was switched on.
        let url = db.url.clone();
        let done = tokio::spawn(async move {
            let mut opts = ConnectOptions::new(&url);
            opts.store = StoreConfig { pool_cap: 2, ..StoreConfig::default() };
            workload(connect(&opts).await.unwrap()).await
        })
        .await;
        let statements = log.statements().await;
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
        assert!(statements.len() > 20, "too few statements logged ({}): {statements:?}", statements.len());
        let tags = assert_all_tagged(&statements, &["checkout_completion", "cart_sweeper"].into());
        assert_tags_and_ops(&tags, &statements);
        let report = connection_report();
        for tag in ["reserve", "checkout_completion"] {
            let row = report.iter().find(|r| r.tag == tag).unwrap_or_else(|| panic!("no {tag} in {report:?}"));
            assert!(row.checkouts > 0 && row.statements > 0 && row.hold_seconds_total > 0.0, "{row:?}");
        }
    })
    .await;
}

/// During a long transaction, `pg_stat_activity.query` shows the caller's tag.
async fn pg_stat_activity_shows_the_callers_tag() {
    with_db(Backend::Postgres, StoreConfig { pool_cap: 1, ..StoreConfig::default() }, |db| async move {
        let name = db.name().to_string();
        stock(&*db.store, "s1", "a", "wh", 5).await;
        // Hold the ledger row so the reserve's slow path waits on it.
        let mut blocker = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
        sqlx::query("SELECT 1 FROM inventory_levels WHERE shop_id = 's1' FOR UPDATE")
            .execute(&mut blocker)
            .await
            .unwrap();
        let store = db.store.clone();
        let waiting = tokio::spawn(async move {
            let tag = ConnTag::new("checkout_completion").unwrap();
            with_conn_tag(tag, store.reserve(&request("s1", "k", vec![line("a", 3, None)]))).await
        });
        let mut admin = sqlx::PgConnection::connect(&server_url(Backend::Postgres)).await.unwrap();
        // Polled until the reserve waits: on a loaded machine it may take a
        // while to get there, and the wait only ends when the blocker commits.
        let deadline = Instant::now() + Duration::from_secs(30);
        let query = loop {
            let seen = sqlx::query_scalar::<_, String>(
                "SELECT query FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
            )
            .bind(&name)
            .fetch_optional(&mut admin)
            .await
            .unwrap();
            if let Some(q) = seen {
                break q;
            }
            assert!(Instant::now() < deadline, "the reserve never waited on the ledger lock (30 s)");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(query.starts_with("/* conn_tag:checkout_completion */ /* op:reserve */"), "{query}");
        sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
        let r = waiting.await.unwrap().expect("reserve after the lock was released");
        assert_eq!(r.reservation.units(), 3);
        db.assert_audit_clean().await;
    })
    .await;
}

/// With no webhook subscription, reserves, claims and releases send no
/// extra statement: the outbox knows from its view of the subscriptions,
/// read once and then at most once a second (tagged `webhook`), never per
/// request, and nothing is written to the outbox or the inventory watch. A
/// subscription of another shop changes nothing for this one.
async fn no_subscription_no_webhook_statements(backend: Backend) {
    with_db(backend, StoreConfig::default(), |db| async move {
        let other = holdfast_core::Subscription {
            id: holdfast_sql::subscription_id(),
            shop: shop("other"),
            url: "http://127.0.0.1:9/hook".into(),
            topics: holdfast_core::Topics::all(),
            created_at: chrono::Utc::now(),
            disabled_at: None,
        };
        db.db.webhooks.add_subscription(&other, "whsec_AAAA").await.unwrap();
        let log = StatementLog::start(&db).await;
        let url = db.url.clone();
        let started = Instant::now();
        let done = tokio::spawn(async move {
            let store = connect(&ConnectOptions::new(&url)).await.unwrap();
            change(&*store, "s1", "a", "wh", StockChange::Set(400)).await.unwrap();
            let tasks: Vec<_> = (0..8)
                .map(|c| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        for i in 0..25 {
                            let k = format!("k{c}-{i}");
                            let r = store.reserve(&request("s1", &k, vec![line("a", 1, None)])).await.unwrap();
                            if i % 2 == 0 {
                                store.claim(&shop("s1"), r.reservation.id).await.unwrap();
                            } else {
                                store.release(&shop("s1"), r.reservation.id).await.unwrap();
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            store.expire(100).await.unwrap();
        })
        .await;
        let seconds = started.elapsed().as_secs();
        let statements = log.statements().await;
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
        assert_all_tagged(&statements, &BTreeSet::new());
        let webhook: Vec<&String> = statements.iter().filter(|s| s.contains("webhook_")).collect();
        assert!(webhook.iter().all(|s| !s.contains("webhook_deliveries")), "{webhook:?}");
        assert!(webhook.iter().all(|s| s.starts_with("/* conn_tag:webhook */")), "{webhook:?}");
        assert!(
            webhook.len() as u64 <= 2 + seconds,
            "{} reads of the subscriptions in {seconds} s for 400 requests",
            webhook.len()
        );
        // Inventory events: only the watch row the first stock change
        // creates with its ledger row; no request of this shop looks at it.
        let watch: Vec<&String> = statements.iter().filter(|s| s.contains("inventory_watch")).collect();
        assert!(watch.len() <= 1 && watch.iter().all(|s| s.contains("INSERT")), "{watch:?}");
        let reserves = statements.iter().filter(|s| s.starts_with("/* conn_tag:reserve */")).count();
        assert!(reserves >= 100, "{reserves} reserve statements: is the log complete?");
        assert!(db.db.webhooks.list_deliveries(&shop("s1"), None, 10).await.unwrap().is_empty());
    })
    .await;
}

holdfast_testkit::per_backend!(server_log_shows_every_tag: postgres => Postgres, mysql => MySql);
holdfast_testkit::per_backend!(no_subscription_no_webhook_statements: postgres => Postgres, mysql => MySql);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_activity() {
    pg_stat_activity_shows_the_callers_tag().await
}

#[test]
fn hostile_tags_never_reach_sql() {
    for bad in ["x */ DROP TABLE reservations; /*", "a'b", "a\"b", "a\nb", "ünï", "A", "", "a b", &"a".repeat(65)] {
        assert!(ConnTag::new(bad).is_err(), "{bad:?} accepted");
        assert!(bad.parse::<ConnTag>().is_err());
        assert!(serde_json::from_value::<ConnTag>(serde_json::json!(bad)).is_err());
    }
    let callers = BTreeSet::from(["checkout"]);
    assert_eq!(
        statement_tag("/* conn_tag:checkout */ /* op:reserve */ SELECT 1", &callers),
        Ok(Some("checkout".into()))
    );
    assert!(statement_tag("SELECT 1", &callers).is_err());
    assert!(statement_tag("/* conn_tag:Bad */ SELECT 1", &callers).is_err());
}
