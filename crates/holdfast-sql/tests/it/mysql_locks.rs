//! What the MySQL/MariaDB store locks, read from the server itself. These
//! tests drive raw connections through the store's own statement files (the
//! same text, included from `src/mysql/queries/`) so they can hold a
//! transaction open and look at it, and they need a MySQL or MariaDB server
//! (`HOLDFAST_TEST_MYSQL_URL`); a missing server fails them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use holdfast_core::{Backend, Error};
use holdfast_sql::StoreConfig;
use sqlx::mysql::{MySqlConnection, MySqlDatabaseError};
use sqlx::{Connection, Executor, Row};

use holdfast_testkit::*;

/// One branch of the cart's take, as the store sends it (`src/mysql/mod.rs`).
const TAKE_BRANCH: &str =
    concat!("(", include_str!("../../src/mysql/queries/take_units_branch.sql"), "FOR UPDATE SKIP LOCKED)");
const DELETE_UNITS: &str = include_str!("../../src/mysql/queries/delete_units.sql");
const LOCK_LEDGERS: &str = include_str!("../../src/mysql/queries/lock_ledgers.sql");
const REFILL: &str = include_str!("../../src/mysql/queries/refill.sql");
const WRITE_LEDGER: &str = include_str!("../../src/mysql/queries/write_ledger.sql");

/// How the store begins a write transaction (`src/mysql/mod.rs`).
const BEGIN_READ_COMMITTED: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";
/// The server default the store avoids.
const BEGIN_REPEATABLE_READ: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION";

async fn conn(url: &str) -> MySqlConnection {
    MySqlConnection::connect(url).await.unwrap_or_else(|e| panic!("MySQL/MariaDB at {url} unreachable: {e}"))
}

/// Runs `sql` (several statements allowed) over the text protocol.
async fn exec(c: &mut MySqlConnection, sql: &str) {
    c.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The store's take for a cart of `(item, qty)` lines at location `wh`: the
/// UNION ALL of one locking branch per line, then the DELETE by key.
async fn take(c: &mut MySqlConnection, lines: &[(&'static str, i64)]) -> sqlx::Result<u64> {
    let sql = vec![TAKE_BRANCH; lines.len()].join("\nUNION ALL\n");
    let mut q = sqlx::query(&sql);
    for &(item, qty) in lines {
        q = q.bind("s1").bind(item).bind("wh").bind("s1").bind(item).bind(qty);
    }
    let rows = q.fetch_all(&mut *c).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let picked: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let item: Vec<u8> = r.get("item_id");
            let location: Vec<u8> = r.get("location_id");
            serde_json::json!({
                "item": String::from_utf8(item).unwrap(),
                "location": String::from_utf8(location).unwrap(),
                "id": r.get::<i32, _>("id"),
            })
        })
        .collect();
    sqlx::query(DELETE_UNITS).bind(serde_json::Value::Array(picked).to_string()).bind("s1").execute(&mut *c).await?;
    Ok(rows.len() as u64)
}

/// Record locks the transaction of connection `conn_id` holds on
/// `reservation_units`, and on anything else, as the server reports them.
async fn record_locks(url: &str, db: &str, conn_id: u64) -> (u64, u64) {
    let mut c = conn(url).await;
    let version: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&mut c).await.unwrap();
    if !version.contains("MariaDB") {
        // MySQL 8: every lock is a row of performance_schema.data_locks.
        let rows = sqlx::query(
            "SELECT OBJECT_NAME, COUNT(*) AS n FROM performance_schema.data_locks d
             JOIN performance_schema.threads t ON t.THREAD_ID = d.THREAD_ID
             WHERE t.PROCESSLIST_ID = ? AND d.LOCK_TYPE = 'RECORD' GROUP BY OBJECT_NAME",
        )
        .bind(conn_id)
        .fetch_all(&mut c)
        .await
        .unwrap();
        let mut units = 0;
        let mut other = 0;
        for r in rows {
            let table: String = r.get(0);
            let n: i64 = r.get(1);
            if table == "reservation_units" { units += n as u64 } else { other += n as u64 }
        }
        return (units, other);
    }
    // MariaDB has no data_locks, and information_schema.INNODB_LOCKS lists
    // only locks someone waits for. SHOW ENGINE INNODB STATUS lists every
    // record lock of every transaction once innodb_status_output_locks is ON
    // (a global switch; it is left on, as other tests may be reading too).
    exec(&mut c, "SET GLOBAL innodb_status_output_locks = ON").await;
    let row = sqlx::query("SHOW ENGINE INNODB STATUS").fetch_one(&mut c).await.unwrap();
    // Columns: Type, Name, Status.
    let status: String = row.try_get(2).unwrap_or_else(|_| String::from_utf8(row.get(2)).unwrap());
    let marker = format!(" thread id {conn_id},");
    let block = status
        .split("---TRANSACTION ")
        .find(|b| b.lines().any(|l| l.contains(&marker)))
        .unwrap_or_else(|| panic!("no transaction of connection {conn_id} in:\n{status}"));
    let units_index = format!("index PRIMARY of table `{db}`.`reservation_units`");
    let (mut units, mut other, mut on_units) = (0, 0, false);
    for line in block.lines() {
        if line.starts_with("RECORD LOCKS ") {
            on_units = line.contains(&units_index);
        } else if line.starts_with("Record lock, heap no") {
            if on_units { units += 1 } else { other += 1 }
        }
    }
    // The summary line agrees: "N lock struct(s), heap size …, M row lock(s)".
    let total: u64 = block
        .lines()
        .find_map(|l| l.split_once(" row lock(s)").and_then(|(l, _)| l.rsplit(' ').next()?.parse().ok()))
        .unwrap_or_else(|| panic!("no row lock count in:\n{block}"));
    assert_eq!(total, units + other, "lock lines disagree with the summary:\n{block}");
    (units, other)
}

/// The composite primary key `(shop_id, item_id, location_id, id)` is the
/// clustered index, so a reserve of n units holds n record locks. With an
/// AUTO_INCREMENT key and a secondary index on (shop, item, location) the
/// same take would lock 2n records (secondary entry + clustered row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_of_n_units_holds_n_row_locks_not_2n() {
    with_db(Backend::MySql, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "a", "wh", 50).await;
        stock(&*db.store, "s1", "b", "wh", 50).await;
        let db_name = db.name().to_string();
        let mut c = conn(&db.url).await;
        exec(&mut c, BEGIN_READ_COMMITTED).await;
        // A two-line cart: 4 of a and 3 of b, in one round trip.
        let taken = take(&mut c, &[("a", 4), ("b", 3)]).await.expect("take");
        assert_eq!(taken, 7);
        let conn_id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()").fetch_one(&mut c).await.unwrap();
        let (units, other) = record_locks(&db.url, &db_name, conn_id).await;
        eprintln!(
            "[mysql] a reserve of 7 units (2 lines) holds {units} record locks on reservation_units, {other} elsewhere"
        );
        assert_eq!(units, 7, "one record lock per unit taken");
        assert_eq!(other, 0, "the take locked rows outside the pool (the ledger?)");
        exec(&mut c, "ROLLBACK").await;
    })
    .await;
}

/// What a transaction of the interleaving below ended with.
#[derive(Debug, PartialEq)]
enum Outcome {
    Committed,
    Deadlock,
    LockWaitTimeout,
}

fn outcome(r: sqlx::Result<()>) -> Outcome {
    match r {
        Ok(()) => Outcome::Committed,
        Err(sqlx::Error::Database(e)) => match e.downcast_ref::<MySqlDatabaseError>().number() {
            1213 => Outcome::Deadlock,
            1205 => Outcome::LockWaitTimeout,
            n => panic!("unexpected error {n}: {e}"),
        },
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// One short reserve of the store, statement by statement: the take finds the
/// pool empty, the ledger row is locked, the pool refilled, the row written.
/// `gate` is passed after the take, so the two reserves both read the empty
/// pool before either locks the ledger.
async fn short_reserve(
    mut c: MySqlConnection,
    begin: &'static str,
    gate: Arc<tokio::sync::Barrier>,
    first: bool,
) -> Outcome {
    // A fallback only: InnoDB reports the deadlock at once. At READ
    // COMMITTED the second reserve waits for the first one's ledger lock
    // until it commits, which on a loaded machine may take seconds.
    exec(&mut c, "SET SESSION innodb_lock_wait_timeout = 30").await;
    exec(&mut c, begin).await;
    let r: sqlx::Result<()> = async {
        assert_eq!(take(&mut c, &[("hot", 1)]).await?, 0, "the pool starts empty");
        gate.wait().await;
        if !first {
            // Let the other one take the ledger lock first.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // One candidate, as the store appends it (`src/mysql/mod.rs`).
        let lock = format!(
            "{LOCK_LEDGERS}  AND ((l.item_id = ? AND l.location_id = ?))\nORDER BY l.item_id, l.location_id\nFOR UPDATE"
        );
        let row = sqlx::query(&lock).bind("s1").bind("hot").bind("wh").fetch_one(&mut c).await?;
        let unpooled: i64 = row.get("unpooled");
        let refilled = if unpooled > 0 {
            sqlx::query(REFILL)
                .bind("s1")
                .bind("hot")
                .bind("wh")
                .bind(10i64)
                .bind(10i64)
                .bind("s1")
                .bind("hot")
                .bind("wh")
                .bind(unpooled.min(10))
                .execute(&mut c)
                .await?
                .rows_affected() as i64
        } else {
            0
        };
        sqlx::query(WRITE_LEDGER)
            .bind(row.get::<i64, _>("on_hand"))
            .bind(row.get::<i64, _>("committed"))
            .bind(unpooled - refilled)
            .bind(i64::from(refilled > 0))
            .bind("s1")
            .bind("hot")
            .bind("wh")
            .execute(&mut c)
            .await?;
        exec(&mut c, "COMMIT").await;
        Ok(())
    }
    .await;
    let _ = c.execute("ROLLBACK").await;
    outcome(r)
}

async fn two_short_reserves(db: &TestDb, begin: &'static str) -> Vec<Outcome> {
    let mut c = conn(&db.url).await;
    // A ledger row with stock and an empty pool, and a row after it in key
    // order, so the empty range has a next record to gap-lock up to.
    exec(
        &mut c,
        "INSERT INTO inventory_levels (shop_id, item_id, location_id, on_hand, unpooled)
         VALUES ('s1', 'hot', 'wh', 20, 20)",
    )
    .await;
    exec(&mut c, "INSERT INTO reservation_units (shop_id, item_id, location_id, id) VALUES ('s1', 'zzz', 'wh', 0)")
        .await;
    exec(&mut c, "DELETE FROM reservation_units WHERE item_id = 'hot'").await;
    let gate = Arc::new(tokio::sync::Barrier::new(2));
    let a = tokio::spawn(short_reserve(conn(&db.url).await, begin, gate.clone(), true));
    let b = tokio::spawn(short_reserve(conn(&db.url).await, begin, gate, false));
    let out = vec![a.await.unwrap(), b.await.unwrap()];
    exec(&mut c, "DELETE FROM reservation_units; DELETE FROM inventory_levels").await;
    out
}

/// Regression test of the READ COMMITTED cure. Under REPEATABLE READ two
/// reserves that both find the pool empty take gap locks on the empty range;
/// the first to lock the ledger then cannot insert the refill (its insert
/// intention waits for the other's gap lock) while the other waits for the
/// ledger lock: a deadlock. At READ COMMITTED the same two reserves commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_pool_refill_deadlocks_under_repeatable_read_not_read_committed() {
    with_db(Backend::MySql, StoreConfig::default(), |db| async move {
        let rr = two_short_reserves(&db, BEGIN_REPEATABLE_READ).await;
        eprintln!("[mysql] two short reserves under REPEATABLE READ: {rr:?}");
        assert!(
            rr.iter().any(|o| *o != Outcome::Committed),
            "REPEATABLE READ no longer shows the gap-lock deadlock; the test no longer tests the cure: {rr:?}"
        );
        let rc = two_short_reserves(&db, BEGIN_READ_COMMITTED).await;
        eprintln!("[mysql] two short reserves under READ COMMITTED: {rc:?}");
        assert_eq!(rc, vec![Outcome::Committed, Outcome::Committed]);
    })
    .await;
}

/// The store itself: 64 buyers drain a pool of 5 over and over, so almost
/// every reserve finds the pool empty and refills it. No deadlock, every
/// unit sold once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refills_of_an_empty_pool_do_not_deadlock() {
    with_db(Backend::MySql, StoreConfig { pool_cap: 5, ..StoreConfig::default() }, |db| async move {
        stock(&*db.store, "s1", "hot", "wh", 400).await;
        let sold = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for buyer in 0..64 {
            let (store, sold) = (db.store.clone(), sold.clone());
            tasks.push(tokio::spawn(async move {
                for n in 0.. {
                    let req = request("s1", &format!("b{buyer}-{n}"), vec![line("hot", 1, None)]);
                    match store.reserve(&req).await {
                        Ok(_) => sold.fetch_add(1, Ordering::Relaxed),
                        Err(Error::InsufficientStock(_)) => return,
                        Err(e) => panic!("unexpected error: {e}"),
                    };
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let stats = db.store.stats();
        eprintln!("[mysql] 64 buyers over a pool of 5: {stats:?}");
        assert_eq!(sold.load(Ordering::Relaxed), 400);
        assert_eq!(stats.deadlocks, 0, "deadlocks at READ COMMITTED: {stats:?}");
        assert!(stats.replenishments >= 50, "the pool was not drained and refilled: {stats:?}");
        db.assert_audit_clean().await;
    })
    .await;
}
