//! `holdfast serve` as a child process: started with any flags, its log
//! (JSON lines) kept in a file, killed and reaped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `holdfast serve` and its address.
pub struct Serve {
    child: Child,
    /// `http://ADDR` or `https://ADDR`.
    pub base: String,
    pub log: PathBuf,
}

/// How a start went: serving, or the process ended first.
pub enum Started {
    Serving(Serve),
    /// It exited: its exit code and everything it printed.
    Exited(Option<i32>, String),
}

impl Serve {
    /// Serves the database at `url` with no auth and no sweeper; panics
    /// unless it comes up.
    pub fn start(url: &str) -> Self {
        match Self::launch(&["--insecure-no-auth", "--database-url", url, "--sweep-interval-ms", "0"], &[]) {
            Started::Serving(s) => s,
            Started::Exited(code, log) => panic!("holdfast serve exited ({code:?}): {log}"),
        }
    }

    /// `PUT`s `on_hand` of `item` at location `wh` of shop `s1` and asserts
    /// the server took it.
    pub async fn set_stock(&self, client: &reqwest::Client, item: &str, on_hand: i64) {
        let res = client
            .put(format!("{}/v1/shops/s1/items/{item}/locations/wh", self.base))
            .json(&serde_json::json!({ "on_hand": on_hand }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    }

    /// `holdfast serve --listen 127.0.0.1:0 --log-format json ARGS…` with
    /// the environment `env`; waits until it serves or exits (30 s at most).
    pub fn launch(args: &[&str], env: &[(&str, &str)]) -> Started {
        let log = std::env::temp_dir().join(format!("holdfast-serve-{:016x}.log", rand_u64()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("holdfast serve starts");
        // Killed and reaped on drop, also when it never comes up.
        let mut serve = Serve { child, base: String::new(), log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = serve.output();
            if let Some((scheme, addr)) = text.lines().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                let f = if v["fields"].is_object() { &v["fields"] } else { &v };
                (f["message"] == "holdfast serving").then(|| {
                    (f["scheme"].as_str().unwrap_or("http").to_string(), f["listen"].as_str().unwrap_or("").to_string())
                })
            }) {
                serve.base = format!("{scheme}://{addr}");
                return Started::Serving(serve);
            }
            if let Ok(Some(status)) = serve.child.try_wait() {
                return Started::Exited(status.code(), serve.output());
            }
            assert!(Instant::now() < deadline, "holdfast serve did not start: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Everything it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no shutdown, no flush, mid-request.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// Sends `signal` (`"HUP"`, `"TERM"`).
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill").args([&format!("-{signal}"), &self.child.id().to_string()]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -{signal}");
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    h.finish()
}
