//! What holdfast's integration tests share, so that no crate copies another's
//! fixtures:
//!
//! * [`TestDb`]: a database of its own per test on a real server (PostgreSQL,
//!   MySQL/MariaDB) or a SQLite file of its own, dropped when the test ends —
//!   also when it panics;
//! * [`RedisPrefix`] and [`OwnRedis`]: a key prefix of its own on the shared
//!   Redis (its keys deleted at the end), or a redis-server of its own for
//!   tests that stop Redis;
//! * [`Subject`] and [`TestStore`]: the store under test — a SQL dialect, the
//!   legacy Redis store, or the mode router in one mode;
//! * [`conformance`]: the suite every store runs, unchanged;
//! * [`StatementLog`]: what the server itself logged of a test's statements;
//! * [`browser::Browser`]: headless Chromium over WebDriver, for the console;
//! * short constructors for the domain's names and requests.
//!
//! A server that cannot be reached fails the test loudly; nothing is ever
//! skipped. Server URLs come from `HOLDFAST_TEST_POSTGRES_URL`,
//! `HOLDFAST_TEST_MYSQL_URL` and `HOLDFAST_TEST_REDIS_URL`, defaulting to the
//! local servers.

pub mod browser;
pub mod conformance;
mod db;
mod names;
pub mod receiver;
mod redis;
mod statement_log;
mod subject;
mod tls;

pub use db::{TestDb, pgbouncer_url, server_url, with_database, with_db};
pub use names::*;
pub use redis::{OwnRedis, RedisPrefix, shared_redis_url};
pub use statement_log::{StatementLog, assert_all_tagged, statement_tag};
pub use subject::{Decider, Subject, TestStore, with_subject};
pub use tls::{TLS_ONLY_USER, over_tls, redis_tls_url, tls_dir, tls_file};

use rand::SeedableRng;
use rand::rngs::StdRng;

/// The seed of a test's random choices: `HOLDFAST_TEST_SEED`, or a fresh
/// one. Printed first, so a failure can be run again with the same choices
/// (each task draws from its own generator, seeded from this one; the
/// interleaving of the tasks is the machine's).
pub fn seed(test: &str, on: &str) -> u64 {
    let seed = std::env::var("HOLDFAST_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("[{on}] {test}: HOLDFAST_TEST_SEED={seed}");
    seed
}

/// Declares a module `$test` of one `#[tokio::test]` per backend, each
/// running `$test(Backend::…)`:
/// `per_backend!(books_balance: postgres => Postgres, sqlite => Sqlite);`
#[macro_export]
macro_rules! per_backend {
    ($test:ident: $($name:ident => $backend:ident),+ $(,)?) => {
        mod $test {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$test(holdfast_core::Backend::$backend).await
                }
            )+
        }
    };
}

/// Task `n`'s generator for `seed`.
pub fn task_rng(seed: u64, n: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A name no other test run uses: `<prefix>_<16 hex digits>`.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{:016x}", rand::random::<u64>())
}

/// Runs `cleanup` to completion on a runtime of its own, on a thread of its
/// own: callable from `Drop`, inside or outside a tokio runtime, also while
/// the test is panicking.
pub(crate) fn block_on_aside<F: std::future::Future<Output = ()> + Send + 'static>(cleanup: F) {
    let done = std::thread::spawn(move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(cleanup),
        Err(e) => eprintln!("cleanup: no runtime: {e}"),
    })
    .join();
    if done.is_err() {
        eprintln!("cleanup panicked");
    }
}
