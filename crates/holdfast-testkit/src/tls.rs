//! TLS for tests: the test CA and certificates `scripts/services.sh` makes
//! (`ensure_test_certs`), the servers serving them, and the user
//! `holdfast_tls` that PostgreSQL and MariaDB let in over TLS only — so a
//! store that connects as it has encrypted every connection of its pool.

use std::path::PathBuf;

use holdfast_core::Backend;

/// The user the test servers accept over TLS only.
pub const TLS_ONLY_USER: &str = "holdfast_tls";

/// `$HOLDFAST_TEST_TLS_DIR`, or where the scripts put the certificates.
pub fn tls_dir() -> PathBuf {
    let dir = std::env::var_os("HOLDFAST_TEST_TLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/holdfast-test-tls"));
    assert!(
        dir.join("ca.pem").exists(),
        "no test CA in {} (scripts/test makes it and configures the servers; set HOLDFAST_TEST_TLS_DIR for another)",
        dir.display()
    );
    dir
}

/// A file of [`tls_dir`]: `ca.pem`, `wrong-ca.pem`, `server.pem`,
/// `server.key`, `server-renewed.pem`, `server-renewed.key`.
pub fn tls_file(name: &str) -> String {
    tls_dir().join(name).display().to_string()
}

/// `url` (a database URL of the test server) as [`TLS_ONLY_USER`], verifying
/// the server's certificate and name against the CA in the file `ca` of
/// [`tls_dir`]: `sslmode=verify-full` on PostgreSQL, `ssl-mode=VERIFY_IDENTITY`
/// on MySQL/MariaDB.
pub fn over_tls(backend: Backend, url: &str, ca: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a server URL");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split_once('?').map_or(rest, |(base, _)| base);
    let ca = tls_file(ca);
    let query = match backend {
        Backend::Postgres => format!("sslmode=verify-full&sslrootcert={ca}"),
        Backend::MySql => format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"),
        Backend::Sqlite => panic!("SQLite has no network to encrypt"),
    };
    format!("{scheme}://{TLS_ONLY_USER}@{rest}?{query}")
}

/// The TLS Redis: `$HOLDFAST_TEST_REDIS_TLS_URL`, or the local one on 6380
/// verified against the test CA.
pub fn redis_tls_url() -> String {
    std::env::var("HOLDFAST_TEST_REDIS_TLS_URL")
        .unwrap_or_else(|_| format!("rediss://127.0.0.1:6380/?sslrootcert={}", tls_file("ca.pem")))
}
