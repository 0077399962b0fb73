//! Fixtures: a fresh SQL database per test on a real server, a Redis key
//! prefix of its own on the shared Redis (or a redis-server of its own, for
//! tests that stop Redis). A server that cannot be reached fails the test
//! loudly; nothing is skipped.

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use holdfast_core::{
    Backend, IdempotencyKey, ItemId, Line, LocationId, Quantity, ReserveRequest, ShopId, StockChange, Store, Ttl,
};
use holdfast_redis::{ControlDb, ModeControl, ModeRouter, RedisOptions, RedisStore, ShadowConfig};
use holdfast_sql::{ConnectOptions, connect};
use rand::Rng;
use sqlx::Connection;

pub const SQL_BACKENDS: [Backend; 2] = [Backend::Postgres, Backend::MySql];

pub fn shared_redis_url() -> String {
    std::env::var("HOLDFAST_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn server_url(backend: Backend) -> String {
    match backend {
        Backend::Postgres => std::env::var("HOLDFAST_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        Backend::MySql => {
            std::env::var("HOLDFAST_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/mysql".into())
        }
        Backend::Sqlite => String::new(),
    }
}

fn with_database(url: &str, db: &str) -> String {
    let after_scheme = url.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = url[after_scheme..].find('/').map(|i| i + after_scheme).unwrap_or(url.len());
    format!("{}/{}", &url[..host_end], db)
}

/// One test's world: its own SQL database, its own Redis key prefix, and the
/// router over both.
pub struct World {
    pub backend: Backend,
    pub url: String,
    pub sql: Arc<dyn Store>,
    pub db: ControlDb,
    pub redis: Arc<RedisStore>,
    pub control: Arc<ModeControl>,
    pub router: Arc<ModeRouter>,
    name: String,
}

impl World {
    /// Another process on the same database and Redis: its own pools, its
    /// own poller, its own shadow mirror.
    pub async fn second_process(&self) -> (Arc<ModeControl>, Arc<ModeRouter>) {
        let db = ControlDb::connect(&self.url, 4).await.expect("control db");
        let control = ModeControl::load(db.clone()).await.expect("rules");
        control.spawn_poller();
        let redis = Arc::new(RedisStore::new(self.redis.options().clone(), db).expect("redis"));
        let router = Arc::new(ModeRouter::new(self.sql.clone(), redis, control.clone(), ShadowConfig::default()));
        (control, router)
    }
}

pub async fn world(backend: Backend, redis_url: &str) -> World {
    world_with(backend, redis_url, ShadowConfig::default()).await
}

pub async fn world_with(backend: Backend, redis_url: &str, shadow: ShadowConfig) -> World {
    let name = format!("hf_redis_{:016x}", rand::thread_rng().r#gen::<u64>());
    let url = match backend {
        Backend::Postgres | Backend::MySql => {
            let admin = server_url(backend);
            let create = format!("CREATE DATABASE {name}");
            match backend {
                Backend::Postgres => {
                    let mut c = sqlx::PgConnection::connect(&admin).await.expect("PostgreSQL must be running");
                    sqlx::query(&create).execute(&mut c).await.expect("create database");
                }
                _ => {
                    let mut c = sqlx::MySqlConnection::connect(&admin).await.expect("MariaDB must be running");
                    sqlx::query(&create).execute(&mut c).await.expect("create database");
                }
            }
            with_database(&admin, &name)
        }
        Backend::Sqlite => {
            let dir = std::env::temp_dir().join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            format!("sqlite://{}/db.sqlite", dir.display())
        }
    };
    let sql = connect(&ConnectOptions::new(&url)).await.expect("connect");
    sql.migrate().await.expect("migrate");
    let db = ControlDb::connect(&url, 4).await.expect("control db");
    let control = ModeControl::load(db.clone()).await.expect("rules");
    control.spawn_poller();
    let mut opts = RedisOptions::new(redis_url);
    opts.prefix = format!("{name}:");
    let redis = Arc::new(RedisStore::new(opts, db.clone()).expect("redis"));
    redis.ping().await.expect("Redis must be running");
    let router = Arc::new(ModeRouter::new(sql.clone(), redis.clone(), control.clone(), shadow));
    World { backend, url, sql, db, redis, control, router, name }
}

/// Drops the test database (best effort) and the test's Redis keys.
pub async fn finish(w: World) {
    if let Ok(client) = redis::Client::open(w.redis.options().url.as_str())
        && let Ok(mut c) = client.get_multiplexed_async_connection().await
    {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", w.redis.options().prefix))
            .query_async(&mut c)
            .await
            .unwrap_or_default();
        for chunk in keys.chunks(500) {
            let _: Result<i64, _> = redis::cmd("DEL").arg(chunk).query_async(&mut c).await;
        }
    }
    let drop = format!("DROP DATABASE IF EXISTS {}", w.name);
    match w.backend {
        Backend::Postgres => {
            if let Ok(mut c) = sqlx::PgConnection::connect(&server_url(w.backend)).await {
                let _ = sqlx::query(&format!("{drop} WITH (FORCE)")).execute(&mut c).await;
            }
        }
        Backend::MySql => {
            if let Ok(mut c) = sqlx::MySqlConnection::connect(&server_url(w.backend)).await {
                let _ = sqlx::query(&drop).execute(&mut c).await;
            }
        }
        Backend::Sqlite => {
            let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&w.name));
        }
    }
}

/// Runs `f` on a fresh world for each SQL backend, on the shared Redis.
pub async fn each_backend<F, Fut>(f: F)
where
    F: Fn(World) -> Fut,
    Fut: Future<Output = World>,
{
    for b in SQL_BACKENDS {
        let w = world(b, &shared_redis_url()).await;
        let w = f(w).await;
        finish(w).await;
    }
}

/// A redis-server of the test's own on a free port, never the shared one:
/// tests that stop Redis stop only this.
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts on a port the OS had free a moment ago. Someone else may take
    /// it in between (the port is released before redis-server binds it):
    /// then our server exits and the port answers for another process, so
    /// [`OwnRedis::try_start`] checks the server's pid and another port is
    /// tried.
    pub fn start() -> Self {
        for _ in 0..20 {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
                l.local_addr().unwrap().port()
            };
            let mut r = Self { port, child: None };
            if r.try_start() {
                return r;
            }
        }
        panic!("redis-server did not start on any of 20 free ports");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts redis-server again on the same port (the clients keep the URL).
    pub fn restart(&mut self) {
        assert!(self.try_start(), "redis-server did not come back on port {}: the port was taken", self.port);
    }

    /// Spawns redis-server on `self.port`; true once it answers there with
    /// its own pid, false if it exited (port taken).
    fn try_start(&mut self) -> bool {
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if child.try_wait().expect("redis-server status").is_some() {
                return false;
            }
            if let Some(pid) = server_pid(self.port) {
                if pid == child.id() {
                    self.child = Some(child);
                    return true;
                }
                // Another process listens there; ours will fail to bind.
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-server on port {} did not start within 10 s", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The `process_id` a Redis server on `port` reports (`INFO server`), if
/// one answers there.
fn server_pid(port: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("process_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.parse().ok();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn shop(s: &str) -> ShopId {
    ShopId::new(s).unwrap()
}
pub fn item(s: &str) -> ItemId {
    ItemId::new(s).unwrap()
}
pub fn loc(s: &str) -> LocationId {
    LocationId::new(s).unwrap()
}

pub fn line(i: &str, q: i64, locs: Option<&[&str]>) -> Line {
    Line {
        item: item(i),
        quantity: Quantity::new(q).unwrap(),
        locations: locs.map(|v| v.iter().map(|l| loc(l)).collect()),
    }
}

pub fn request(s: &str, key: &str, lines: Vec<Line>) -> ReserveRequest {
    ReserveRequest::new(shop(s), IdempotencyKey::new(key).unwrap(), lines, Ttl::DEFAULT, false, false).unwrap()
}

pub async fn stock(store: &dyn Store, s: &str, i: &str, l: &str, n: i64) {
    store.change_stock(&shop(s), &item(i), &loc(l), StockChange::Set(n)).await.expect("set stock");
}

/// Quantities of (item, location) in one store.
pub async fn qty(store: &dyn Store, s: &str, i: &str, l: &str) -> holdfast_core::Quantities {
    let levels = store.levels(&shop(s), &item(i)).await.expect("levels");
    levels.locations.into_iter().find(|x| x.location == loc(l)).expect("location present").quantities
}
