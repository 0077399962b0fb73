//! Redis for tests: a key prefix of its own on the shared server, its keys
//! deleted when the [`RedisPrefix`] is dropped (also when the test panics),
//! or a redis-server of its own ([`OwnRedis`]) for tests that stop Redis.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::unique_name;

/// The shared Redis: `HOLDFAST_TEST_REDIS_URL`, or the local server.
pub fn shared_redis_url() -> String {
    std::env::var("HOLDFAST_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A key prefix no other test uses, on the Redis at `url`.
#[derive(Debug)]
pub struct RedisPrefix {
    pub url: String,
    /// Ends with `:`.
    pub prefix: String,
}

impl RedisPrefix {
    pub fn new(url: &str) -> Self {
        Self::named(url, &format!("{}:", unique_name("hf_redis")))
    }

    /// The keys under `prefix`, which the test chose itself.
    pub fn named(url: &str, prefix: &str) -> Self {
        Self { url: url.to_string(), prefix: prefix.to_string() }
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let Ok(client) = holdfast_redis::client(&self.url) else { return };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(2)) else { return };
        let mut cursor: u64 = 0;
        loop {
            let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", self.prefix))
                .arg("COUNT")
                .arg(1000)
                .query(&mut c)
            else {
                return;
            };
            if !keys.is_empty() {
                let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut c);
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}

/// A redis-server of the test's own on a free port, never the shared one:
/// tests that stop Redis stop only this.
#[derive(Debug)]
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
