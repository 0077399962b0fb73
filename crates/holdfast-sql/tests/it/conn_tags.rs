//! Connection visibility, checked against the database's own view: the
//! statement log (PostgreSQL `log_statement = 'all'` on the test database,
//! MariaDB's general log) and `pg_stat_activity`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_core::{Backend, ConnTag, Error, StockChange, Store};
use holdfast_sql::{ConnectOptions, StoreConfig, connect, connection_report, with_conn_tag};
use sqlx::{Connection, Row};

use holdfast_testkit::*;

/// A tagged statement: `/* conn_tag:<tag> */ ` and, for a caller's tag,
/// `/* op:<operation> */ `. Transaction control the driver sends itself
/// (COMMIT, ROLLBACK) carries no text of holdfast's and is exempt.
fn check_statement(sql: &str, caller: &BTreeSet<&str>) -> Result<Option<String>, String> {
    let s = sql.trim();
    if matches!(s.to_ascii_uppercase().as_str(), "COMMIT" | "ROLLBACK") {
        return Ok(None);
    }
    let rest = s.strip_prefix("/* conn_tag:").ok_or_else(|| format!("untagged: {s:.120}"))?;
    let end = rest.find(" */").ok_or_else(|| format!("unclosed tag: {s:.120}"))?;
    let tag = &rest[..end];
    ConnTag::new(tag).map_err(|e| format!("invalid tag {tag:?}: {e}"))?;
    let after = &rest[end + 3..];
    if caller.contains(tag) && !after.trim_start().starts_with("/* op:") {
        return Err(format!("caller tag without operation: {s:.120}"));
    }
    Ok(Some(tag.to_string()))
}

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
    store.change_stock(&s, &item("a"), &loc("wh"), StockChange::Set(6)).await.unwrap();
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
    store.change_stock(&s, &item("a"), &loc("wh"), StockChange::Fulfil(1)).await.unwrap();
    store.levels(&s, &item("a")).await.unwrap();
    store.audit(Some(&s)).await.unwrap();
}

fn pg_log_path() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("HOLDFAST_TEST_POSTGRES_LOG") {
        return p.into();
    }
    let dir = std::fs::read_dir("/var/log/postgresql")
        .expect("cannot read /var/log/postgresql: set HOLDFAST_TEST_POSTGRES_LOG to the server's log file");
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("no PostgreSQL log file; set HOLDFAST_TEST_POSTGRES_LOG")
}

/// Statements the PostgreSQL log shows for database `db`, from byte `from`.
fn pg_logged_statements(path: &std::path::Path, from: u64, db: &str) -> Vec<String> {
    let text = std::fs::read(path).expect("read PostgreSQL log");
    let text = String::from_utf8_lossy(&text[from as usize..]).to_string();
    let marker = format!("@{db} LOG:  ");
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(i) = line.find(&marker) {
            if let Some(c) = current.take() {
                out.push(c);
            }
            let msg = &line[i + marker.len()..];
            // Simple protocol: "statement: …"; extended: "execute <name>: …".
            let stmt = msg
                .strip_prefix("statement: ")
                .or_else(|| msg.strip_prefix("execute ").and_then(|m| m.split_once(": ").map(|(_, s)| s)));
            current = stmt.map(str::to_string);
        } else if let Some(continued) = line.strip_prefix('\t') {
            if let Some(c) = current.as_mut() {
                c.push('\n');
                c.push_str(continued);
            }
        } else if let Some(c) = current.take() {
            out.push(c);
        }
    }
    out.extend(current);
    out
}

/// Statements the PostgreSQL log shows for database `db` (at `url`, which
/// logs every statement), from byte `from`, once the log has caught up: a
/// marker statement is sent on a new session after everything else and the
/// log is read until it shows the marker. Everything sent before it was
/// logged before it, whether each backend writes the log itself or the
/// logging collector writes it later; a fixed pause would be a guess.
async fn pg_logged_statements_through_marker(
    path: std::path::PathBuf,
    from: u64,
    url: String,
    db: String,
) -> Vec<String> {
    let marker = format!("hf_log_marker_{:016x}", rand::random::<u64>());
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("SELECT '{marker}'")).execute(&mut c).await.unwrap();
    c.close().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut statements = pg_logged_statements(&path, from, &db);
        if let Some(i) = statements.iter().position(|s| s.contains(&marker)) {
            statements.remove(i);
            return statements;
        }
        assert!(
            Instant::now() < deadline,
            "{path:?} never showed the marker statement {marker:?} of database {db} (30 s): is it the server's log?"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SPEC §8 on PostgreSQL: every statement holdfast sent, as the server
/// logged it, starts with a valid tag; caller tags appear where given.
async fn postgres_statement_log_shows_every_tag() {
    with_db(Backend::Postgres, StoreConfig::default(), |db| async move {
        let name = db.url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
        let mut admin = sqlx::PgConnection::connect(&server_url(Backend::Postgres)).await.unwrap();
        sqlx::query(&format!("ALTER DATABASE {name} SET log_statement = 'all'")).execute(&mut admin).await.unwrap();
        let log = pg_log_path();
        let from = std::fs::metadata(&log).unwrap().len();
        // New sessions pick the setting up.
        let mut opts = ConnectOptions::new(&db.url);
        opts.store = StoreConfig { pool_cap: 2, ..StoreConfig::default() };
        let store = connect(&opts).await.unwrap();
        workload(store).await;
        let statements = pg_logged_statements_through_marker(log, from, db.url.clone(), name.clone()).await;
        assert!(statements.len() > 20, "too few statements logged ({}): {statements:?}", statements.len());
        let callers: BTreeSet<&str> = ["checkout_completion", "cart_sweeper"].into();
        let mut tags = BTreeSet::new();
        for s in &statements {
            match check_statement(s, &callers) {
                Ok(Some(t)) => {
                    tags.insert(t);
                }
                Ok(None) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_tags_and_ops(&tags, &statements);
        let report = connection_report();
        for tag in ["reserve", "checkout_completion"] {
            let row = report.iter().find(|r| r.tag == tag).unwrap_or_else(|| panic!("no {tag} in {report:?}"));
            assert!(row.checkouts > 0 && row.statements > 0 && row.hold_seconds_total > 0.0, "{row:?}");
        }
    })
    .await;
}

/// SPEC §8 on MariaDB: the same, read from the general log (as a table).
async fn mysql_general_log_shows_every_tag() {
    with_db(Backend::MySql, StoreConfig::default(), |db| async move {
        let name = db.url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
        let mut admin = sqlx::MySqlConnection::connect(&server_url(Backend::MySql)).await.unwrap();
        // The general log is a switch of the whole server: a second run of
        // this test (another process on the same server) that turned it on
        // or off in the middle of this one would break both, and could leave
        // it on for good. A named lock makes the runs take turns; it goes
        // with this connection, so even a crashed run gives it back.
        let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('holdfast_test_general_log', 300)")
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert_eq!(locked, Some(1), "another run held the general log for 5 minutes");
        let was: (i64, String) =
            sqlx::query_as("SELECT @@global.general_log, @@global.log_output").fetch_one(&mut admin).await.unwrap();
        if !was.1.to_ascii_uppercase().contains("TABLE") {
            // Nobody logs to the table now: what it holds is left from
            // earlier runs. It is never trimmed otherwise (a CSV table,
            // scanned whole by the query below).
            sqlx::query("TRUNCATE TABLE mysql.general_log").execute(&mut admin).await.unwrap();
        }
        // mysql.general_log keeps rows across server restarts, and thread ids
        // start again from 1 after one: only rows from now on are this run's.
        let since: String = sqlx::query_scalar("SELECT CAST(NOW(6) AS CHAR)").fetch_one(&mut admin).await.unwrap();
        sqlx::query("SET GLOBAL log_output = 'TABLE,FILE'").execute(&mut admin).await.unwrap();
        sqlx::query("SET GLOBAL general_log = 1").execute(&mut admin).await.unwrap();
        // Whatever the workload does, the server's switches are put back.
        let url = db.url.clone();
        let done = tokio::spawn(async move {
            let mut opts = ConnectOptions::new(&url);
            opts.store = StoreConfig { pool_cap: 2, ..StoreConfig::default() };
            workload(connect(&opts).await.unwrap()).await
        })
        .await;
        if was.0 == 0 {
            sqlx::query("SET GLOBAL general_log = 0").execute(&mut admin).await.unwrap();
        }
        sqlx::query(&format!("SET GLOBAL log_output = '{}'", was.1)).execute(&mut admin).await.unwrap();
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
        let rows = sqlx::query(
            "SELECT CONVERT(argument USING utf8mb4) AS sql_text FROM mysql.general_log
             WHERE command_type IN ('Query', 'Execute') AND event_time >= ?
               AND thread_id IN (SELECT thread_id FROM mysql.general_log
                                 WHERE command_type = 'Connect' AND event_time >= ?
                                   AND CONVERT(argument USING utf8mb4) LIKE ?)",
        )
        .bind(&since)
        .bind(&since)
        .bind(format!("%{name}%"))
        .fetch_all(&mut admin)
        .await
        .unwrap();
        let _: Option<i64> =
            sqlx::query_scalar("SELECT RELEASE_LOCK('holdfast_test_general_log')").fetch_one(&mut admin).await.unwrap();
        let statements: Vec<String> = rows.iter().map(|r| r.get::<String, _>("sql_text")).collect();
        assert!(statements.len() > 20, "too few statements logged: {statements:?}");
        let callers: BTreeSet<&str> = ["checkout_completion", "cart_sweeper"].into();
        let mut tags = BTreeSet::new();
        for s in &statements {
            // The driver's own session setup when it connects.
            if s.starts_with("SET sql_mode") || s.starts_with("SET NAMES") || s.starts_with("SET time_zone") {
                continue;
            }
            match check_statement(s, &callers) {
                Ok(Some(t)) => {
                    tags.insert(t);
                }
                Ok(None) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_tags_and_ops(&tags, &statements);
    })
    .await;
}

/// During a long transaction, `pg_stat_activity.query` shows the caller's tag.
async fn pg_stat_activity_shows_the_callers_tag() {
    with_db(Backend::Postgres, StoreConfig { pool_cap: 1, ..StoreConfig::default() }, |db| async move {
        let name = db.url.rsplit('/').next().unwrap().split('?').next().unwrap().to_string();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_statement_log() {
    postgres_statement_log_shows_every_tag().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_general_log() {
    mysql_general_log_shows_every_tag().await
}

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
        check_statement("/* conn_tag:checkout */ /* op:reserve */ SELECT 1", &callers),
        Ok(Some("checkout".into()))
    );
    assert!(check_statement("SELECT 1", &callers).is_err());
    assert!(check_statement("/* conn_tag:Bad */ SELECT 1", &callers).is_err());
}
