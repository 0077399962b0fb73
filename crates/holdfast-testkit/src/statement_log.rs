//! What a server itself logged of a test database's statements, to check
//! connection tags against the database's own view: PostgreSQL's
//! `log_statement = 'all'` (set on the test database only) and MariaDB's
//! general log (a switch of the whole server: runs take turns on a named
//! lock, and the switches are put back even when the test panics).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use holdfast_core::{Backend, ConnTag};
use sqlx::{Connection, Row};

use crate::{TestDb, block_on_aside, server_url};

/// Logging of one test database's statements, from [`StatementLog::start`]
/// on. Connections opened before it may not be logged: open the pools under
/// test after it.
pub struct StatementLog {
    backend: Backend,
    url: String,
    db: String,
    from: Start,
    restore: Option<MySqlSwitches>,
}

impl std::fmt::Debug for StatementLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatementLog").field("backend", &self.backend).field("db", &self.db).finish()
    }
}

enum Start {
    PgLog { path: PathBuf, from: u64 },
    MySqlSince(String),
}

/// The MariaDB switches as they were, and the connection that holds the
/// named lock while the log is on.
struct MySqlSwitches {
    admin: Option<sqlx::MySqlConnection>,
    general_log: i64,
    log_output: String,
}

impl StatementLog {
    pub async fn start(db: &TestDb) -> Self {
        let name = db.name().to_string();
        match db.backend {
            Backend::Postgres => {
                let mut admin = sqlx::PgConnection::connect(&server_url(Backend::Postgres)).await.unwrap();
                sqlx::query(&format!("ALTER DATABASE {name} SET log_statement = 'all'"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let path = pg_log_path();
                let from = std::fs::metadata(&path).unwrap().len();
                StatementLog {
                    backend: db.backend,
                    url: db.url.clone(),
                    db: name,
                    from: Start::PgLog { path, from },
                    restore: None,
                }
            }
            Backend::MySql => {
                let mut admin = sqlx::MySqlConnection::connect(&server_url(Backend::MySql)).await.unwrap();
                // A second run turning the log on or off in the middle of
                // this one would break both: runs take turns. The lock goes
                // with this connection, so even a crashed run gives it back.
                let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('holdfast_test_general_log', 300)")
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
                assert_eq!(locked, Some(1), "another run held the general log for 5 minutes");
                let (general_log, log_output): (i64, String) =
                    sqlx::query_as("SELECT @@global.general_log, @@global.log_output")
                        .fetch_one(&mut admin)
                        .await
                        .unwrap();
                if !log_output.to_ascii_uppercase().contains("TABLE") {
                    // Nobody logs to the table now: what it holds is left
                    // from earlier runs, and it is never trimmed otherwise.
                    sqlx::query("TRUNCATE TABLE mysql.general_log").execute(&mut admin).await.unwrap();
                }
                // The table keeps rows across server restarts, and thread ids
                // start again from 1 after one: only rows from now on count.
                let since: String =
                    sqlx::query_scalar("SELECT CAST(NOW(6) AS CHAR)").fetch_one(&mut admin).await.unwrap();
                sqlx::query("SET GLOBAL log_output = 'TABLE,FILE'").execute(&mut admin).await.unwrap();
                sqlx::query("SET GLOBAL general_log = 1").execute(&mut admin).await.unwrap();
                StatementLog {
                    backend: db.backend,
                    url: db.url.clone(),
                    db: name,
                    from: Start::MySqlSince(since),
                    restore: Some(MySqlSwitches { admin: Some(admin), general_log, log_output }),
                }
            }
            Backend::Sqlite => panic!("SQLite keeps no statement log"),
        }
    }

    /// Every statement the server logged for the test database since
    /// [`StatementLog::start`], once the log has caught up with everything
    /// sent before this call. Ends the logging.
    pub async fn statements(mut self) -> Vec<String> {
        match &self.from {
            Start::PgLog { path, from } => pg_statements_through_marker(path, *from, &self.url, &self.db).await,
            Start::MySqlSince(since) => {
                let mut switches = self.restore.take().expect("logging still on");
                let mut admin = switches.admin.take().expect("admin connection");
                switches.put_back(&mut admin).await;
                let rows = sqlx::query(
                    "SELECT CONVERT(argument USING utf8mb4) AS sql_text FROM mysql.general_log
                     WHERE command_type IN ('Query', 'Execute') AND event_time >= ?
                       AND thread_id IN (SELECT thread_id FROM mysql.general_log
                                         WHERE command_type = 'Connect' AND event_time >= ?
                                           AND CONVERT(argument USING utf8mb4) LIKE ?)",
                )
                .bind(since)
                .bind(since)
                .bind(format!("%{}%", self.db))
                .fetch_all(&mut admin)
                .await
                .unwrap();
                let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK('holdfast_test_general_log')")
                    .fetch_one(&mut admin)
                    .await
                    .unwrap();
                rows.iter()
                    .map(|r| r.get::<String, _>("sql_text"))
                    // The driver's own session setup when it connects.
                    .filter(|s| !(s.starts_with("SET sql_mode") || s.starts_with("SET NAMES")))
                    .filter(|s| !s.starts_with("SET time_zone"))
                    .collect()
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }
}

impl MySqlSwitches {
    async fn put_back(&self, admin: &mut sqlx::MySqlConnection) {
        if self.general_log == 0 {
            let _ = sqlx::query("SET GLOBAL general_log = 0").execute(&mut *admin).await;
        }
        let _ = sqlx::query(&format!("SET GLOBAL log_output = '{}'", self.log_output)).execute(&mut *admin).await;
    }
}

impl Drop for StatementLog {
    /// A test that panicked before reading the log still puts the server's
    /// switches back (the named lock goes with the connection).
    fn drop(&mut self) {
        if let Some(mut switches) = self.restore.take()
            && let Some(mut admin) = switches.admin.take()
        {
            block_on_aside(async move {
                switches.put_back(&mut admin).await;
                let _ = admin.close().await;
            });
        }
    }
}

fn pg_log_path() -> PathBuf {
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
fn pg_logged_statements(path: &Path, from: u64, db: &str) -> Vec<String> {
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

/// The PostgreSQL log once it has caught up: a marker statement is sent on a
/// new session after everything else and the log is read until it shows the
/// marker. Everything sent before it was logged before it, whether each
/// backend writes the log itself or the logging collector writes it later; a
/// fixed pause would be a guess.
async fn pg_statements_through_marker(path: &Path, from: u64, url: &str, db: &str) -> Vec<String> {
    let marker = format!("hf_log_marker_{:016x}", rand::random::<u64>());
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(&format!("SELECT '{marker}'")).execute(&mut c).await.unwrap();
    c.close().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut statements = pg_logged_statements(path, from, db);
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

/// The tag of a statement: `/* conn_tag:<tag> */ ` and, for a caller's tag
/// (one of `callers`), `/* op:<operation> */ ` after it. Transaction control
/// the driver sends itself (COMMIT, ROLLBACK) carries no text of holdfast's
/// and is exempt (`Ok(None)`).
pub fn statement_tag(sql: &str, callers: &BTreeSet<&str>) -> Result<Option<String>, String> {
    let s = sql.trim();
    if matches!(s.to_ascii_uppercase().as_str(), "COMMIT" | "ROLLBACK") {
        return Ok(None);
    }
    let rest = s.strip_prefix("/* conn_tag:").ok_or_else(|| format!("untagged: {s:.120}"))?;
    let end = rest.find(" */").ok_or_else(|| format!("unclosed tag: {s:.120}"))?;
    let tag = &rest[..end];
    ConnTag::new(tag).map_err(|e| format!("invalid tag {tag:?}: {e}"))?;
    let after = &rest[end + 3..];
    if callers.contains(tag) && !after.trim_start().starts_with("/* op:") {
        return Err(format!("caller tag without operation: {s:.120}"));
    }
    Ok(Some(tag.to_string()))
}

/// Asserts that every statement is tagged ([`statement_tag`]) and returns
/// the tags seen.
pub fn assert_all_tagged(statements: &[String], callers: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut tags = BTreeSet::new();
    for s in statements {
        match statement_tag(s, callers) {
            Ok(Some(t)) => {
                tags.insert(t);
            }
            Ok(None) => {}
            Err(e) => panic!("{e}"),
        }
    }
    tags
}
