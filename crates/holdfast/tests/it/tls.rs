//! Production connections, as an operator meets them: `serve` over HTTPS
//! with the certificate renewed by SIGHUP, databases and Redis over TLS
//! verified against the test CA, a certificate from another CA stopping
//! start-up with the reason, and passwords that never show.

use std::time::{Duration, Instant};

use holdfast_core::Backend;
use holdfast_testkit::{TestDb, per_backend, redis_tls_url, tls_dir, tls_file};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

use crate::serve::{Serve, Started, rand_u64};

fn der(pem_file: &str) -> Vec<u8> {
    CertificateDer::from_pem_file(tls_file(pem_file)).expect("a PEM certificate").to_vec()
}

/// A client that trusts the test CA only and opens a new connection for
/// every request (so each one sees the certificate served at that moment).
fn https_client() -> reqwest::Client {
    let ca = std::fs::read(tls_dir().join("ca.pem")).unwrap();
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The certificate the server presented for `res`.
fn presented(res: &reqwest::Response) -> Vec<u8> {
    let info = res.extensions().get::<reqwest::tls::TlsInfo>().expect("a TLS connection");
    info.peer_certificate().expect("a server certificate").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_serves_the_certificate_and_a_sighup_renews_it() {
    let db = TestDb::over_tls(Backend::Postgres, Default::default()).await;
    let dir = std::env::temp_dir().join(format!("holdfast-https-{:016x}", rand_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::copy(tls_file("server.pem"), &cert).unwrap();
    std::fs::copy(tls_file("server.key"), &key).unwrap();
    let args = ["--insecure-no-auth", "--database-url", &db.url, "--sweep-interval-ms", "0"];
    let env = [("HOLDFAST_TLS_CERT", cert.to_str().unwrap()), ("HOLDFAST_TLS_KEY", key.to_str().unwrap())];
    let serve = match Serve::launch(&args, &env) {
        Started::Serving(s) => s,
        Started::Exited(code, log) => panic!("serve exited ({code:?}): {log}"),
    };
    assert!(serve.base.starts_with("https://"), "{}", serve.base);
    let client = https_client();

    let res = client.get(format!("{}/readyz", serve.base)).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(presented(&res), der("server.pem"), "the configured certificate");
    serve.set_stock(&client, "a", 5).await;
    let body = json!({ "key": "k1", "lines": [{ "item": "a", "quantity": 2 }] });
    let res = client.post(format!("{}/v1/shops/s1/reservations", serve.base)).json(&body).send().await.unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());

    // Plain HTTP on the HTTPS port gets no answer.
    let plain = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let http = serve.base.replacen("https://", "http://", 1);
    assert!(plain.get(format!("{http}/healthz")).send().await.is_err(), "plain HTTP must not be served");

    // A renewal: new files, SIGHUP, and new connections get the new certificate.
    std::fs::copy(tls_file("server-renewed.pem"), &cert).unwrap();
    std::fs::copy(tls_file("server-renewed.key"), &key).unwrap();
    serve.signal("HUP");
    let renewed = der("server-renewed.pem");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let res = client.get(format!("{}/healthz", serve.base)).send().await.unwrap();
        if presented(&res) == renewed {
            break;
        }
        assert!(Instant::now() < deadline, "the renewed certificate was not served after SIGHUP");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A broken renewal (a half-written file) is refused; the last good
    // certificate stays in use.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    serve.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !serve.output().contains("TLS certificate not reloaded") {
        assert!(Instant::now() < deadline, "the failed reload was not logged: {}", serve.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let res = client.get(format!("{}/v1/shops/s1/items/a", serve.base)).send().await.unwrap();
    assert_eq!(presented(&res), renewed);
    let levels: Value = res.json().await.unwrap();
    assert_eq!(levels["locations"][0]["reserved"], 2, "{levels}");
    drop(serve);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve` on `backend` with the database's certificate checked against an
/// unrelated CA: it exits 5 at start-up, saying why, instead of serving 503s.
async fn a_database_certificate_from_another_ca_stops_start_up(backend: Backend) {
    let db = TestDb::new(backend).await;
    let url = holdfast_testkit::over_tls(backend, &db.url, "wrong-ca.pem");
    let started = Serve::launch(&["--insecure-no-auth", "--database-url", &url], &[]);
    let Started::Exited(code, log) = started else { panic!("serve started with a certificate it cannot verify") };
    assert_eq!(code, Some(5), "{log}");
    assert!(log.contains("UnknownIssuer") && log.contains("did not verify"), "{log}");
}

per_backend!(a_database_certificate_from_another_ca_stops_start_up: postgres => Postgres, mysql => MySql);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_certificate_from_another_ca_stops_start_up() {
    let db = TestDb::new(Backend::Postgres).await;
    let redis = redis_tls_url().replace("ca.pem", "wrong-ca.pem");
    let started = Serve::launch(&["--insecure-no-auth", "--database-url", &db.url, "--redis-url", &redis], &[]);
    let Started::Exited(code, log) = started else { panic!("serve started with a Redis certificate it cannot verify") };
    assert_eq!(code, Some(5), "{log}");
    assert!(log.contains("UnknownIssuer") && log.contains("did not verify"), "{log}");
}

/// Runs the `holdfast` binary; (exit code, stdout + stderr).
fn holdfast(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("holdfast runs");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Passwords of the database and of Redis, given in files, show up in none of
/// what a run prints or answers: serve's debug log, /readyz, /metrics, /admin
/// answers, the CLI's output and its errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn passwords_never_show() {
    let db = TestDb::new(Backend::Postgres).await;
    let (db_pw, redis_pw) = (format!("dbpw{:016x}", rand_u64()), format!("rpw{:016x}", rand_u64()));
    // PostgreSQL lets the tests in by trust, so any password works; Redis
    // gets a user of this test's own with this password.
    let url = db.url.replacen("postgres@", &format!("postgres:{db_pw}@"), 1);
    let redis_user = format!("hf_pw_{:08x}", rand_u64() as u32);
    let admin = redis::Client::open(holdfast_testkit::shared_redis_url()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", &redis_user, "on", &format!(">{redis_pw}"), "~*", "+@all"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let redis_url = holdfast_testkit::shared_redis_url().replacen("://", &format!("://{redis_user}:{redis_pw}@"), 1);

    let dir = std::env::temp_dir().join(format!("holdfast-secrets-{:016x}", rand_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let (db_file, redis_file) = (dir.join("database-url"), dir.join("redis-url"));
    std::fs::write(&db_file, format!("{url}\n")).unwrap();
    std::fs::write(&redis_file, format!("{redis_url}\n")).unwrap();
    let (db_file, redis_file) = (db_file.to_str().unwrap(), redis_file.to_str().unwrap());

    let mut seen = String::new();
    let (code, out) = holdfast(&["migrate", "--database-url-file", db_file], &[]);
    assert_eq!(code, Some(0), "{out}");
    seen += &out;
    let (code, out) =
        holdfast(&["token", "create", "--admin", "--shop", "s1", "--json"], &[("HOLDFAST_DATABASE_URL_FILE", db_file)]);
    assert_eq!(code, Some(0), "{out}");
    let token =
        serde_json::from_str::<Value>(out.lines().next().unwrap()).unwrap()["token"].as_str().unwrap().to_owned();
    for args in [
        &["stock", "set", "--shop", "s1", "--item", "a", "--location", "wh", "--on-hand", "7"][..],
        &["levels", "--shop", "s1", "--item", "a", "--json"],
        &["audit"],
        &["token", "list"],
        &["mode", "set", "--shop", "s1", "sql"],
        &["mode", "show", "--shop", "s1", "--redis-url-file", redis_file],
    ] {
        let mut args = args.to_vec();
        args.extend(["--database-url-file", db_file]);
        let (code, out) = holdfast(&args, &[]);
        assert_eq!(code, Some(0), "{args:?}: {out}");
        seen += &out;
    }

    let env = [("RUST_LOG", "debug"), ("HOLDFAST_REDIS_URL_FILE", redis_file)];
    let serve = match Serve::launch(&["--database-url-file", db_file, "--sweep-interval-ms", "100"], &env) {
        Started::Serving(s) => s,
        Started::Exited(code, log) => panic!("serve exited ({code:?}): {log}"),
    };
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let body = json!({ "key": "k1", "ttl_seconds": 1, "lines": [{ "item": "a", "quantity": 1 }] });
    let res = client
        .post(format!("{}/v1/shops/s1/reservations", serve.base))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for path in ["/readyz", "/metrics", "/admin/connections", "/admin/audit", "/admin/modes?shops=s1", "/openapi.json"]
    {
        let res = client.get(format!("{}{path}", serve.base)).bearer_auth(&token).send().await.unwrap();
        assert!(res.status().is_success(), "{path}: {}", res.status());
        seen += &res.text().await.unwrap();
    }
    let (code, out) = holdfast(&["conn-report", "--url", &serve.base, "--token", &token], &[]);
    assert_eq!(code, Some(0), "{out}");
    seen += &out;
    serve.signal("TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    seen += &serve.output();
    drop(serve);

    // Failures: a server that is not there, and a URL file that is.
    let down = url.replacen(":5432/", ":1/", 1);
    std::fs::write(dir.join("down-url"), &down).unwrap();
    let down_file = dir.join("down-url");
    let (code, out) =
        holdfast(&["levels", "--shop", "s1", "--item", "a", "--database-url-file", down_file.to_str().unwrap()], &[]);
    assert_eq!(code, Some(5), "{out}");
    seen += &out;
    match Serve::launch(&["--database-url-file", down_file.to_str().unwrap()], &[]) {
        Started::Exited(code, log) => {
            assert_eq!(code, Some(5), "{log}");
            seen += &log;
        }
        Started::Serving(_) => panic!("serve started on a database that is not there"),
    }
    let (code, out) = holdfast(
        &["levels", "--shop", "s1", "--item", "a", "--database-url", &url, "--database-url-file", db_file],
        &[],
    );
    assert_eq!(code, Some(2), "both a URL and a file: {out}");

    let _: () = redis::cmd("ACL").arg(&["DELUSER", &redis_user][..]).query_async(&mut admin).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(seen.len() > 5_000, "the run printed and answered too little to prove anything: {seen}");
    assert!(seen.contains("postgres:***@"), "serve's start-up error names the database, its password masked: {seen}");
    for pw in [&db_pw, &redis_pw] {
        assert!(!seen.contains(pw.as_str()), "a password showed up:\n{seen}");
    }
}

/// `token create --out FILE` writes the token to a new file only its owner
/// can read, prints no token, and refuses to overwrite a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_create_writes_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("holdfast-token-{:016x}", rand_u64()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("t.db").display());
    let file = dir.join("token");
    let out = |args: &[&str]| holdfast(args, &[("HOLDFAST_DATABASE_URL", url.as_str())]);
    let (code, printed) = out(&["token", "create", "--shop", "s1", "--out", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{printed}");
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.starts_with("hf_") && token.ends_with('\n'), "{token:?}");
    assert!(!printed.contains(token.trim()), "the token was printed: {printed}");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let (code, printed) = out(&["token", "create", "--shop", "s1", "--out", file.to_str().unwrap()]);
    assert_eq!(code, Some(5), "{printed}");
    assert!(printed.contains("must not exist"), "{printed}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token, "the existing file was left alone");
    let (_, list) = out(&["token", "list"]);
    assert_eq!(list.lines().count(), 2, "one token (the refused one was not stored): {list}");
    let _ = std::fs::remove_dir_all(&dir);
}
