//! A real browser for the console's tests: Debian's Chromium, headless,
//! driven over the W3C WebDriver protocol through Debian's `chromedriver`.
//!
//! The protocol is plain JSON over HTTP, so the few commands the tests use
//! (open a page, find, click, type, run a script, take a screenshot) are
//! a page of `reqwest` calls here rather than a WebDriver crate and its
//! dependencies. `scripts/services.sh` installs both packages; a missing
//! browser fails the test (never skips it).
//!
//! Pages re-render their tables every refresh, so reading goes through
//! [`Browser::eval`] (one script, one snapshot of the page) rather than
//! element handles that a refresh would make stale; handles are only taken
//! for what a test clicks or types into.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// W3C WebDriver's key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session; the browser and its driver end on drop.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

/// An element a test clicks or types into.
#[derive(Debug)]
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

fn program(env: &str, default: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| default.to_string())
}

impl Browser {
    /// Starts `chromedriver` on a free port and opens a headless Chromium
    /// window of `width`×`height` CSS pixels. `HOLDFAST_TEST_CHROMIUM` and
    /// `HOLDFAST_TEST_CHROMEDRIVER` name other binaries.
    pub async fn start(width: u32, height: u32) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let driver_bin = program("HOLDFAST_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{driver_bin} did not start ({e}): install chromium and chromium-driver (scripts/services.sh)")
            });
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client");
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Browser { driver, base, session: String::new(), http };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = browser.http.get(format!("{}/status", browser.base)).send().await;
            if let Ok(res) = ready {
                let status: Value = res.json().await.unwrap_or_default();
                if status["value"]["ready"] == json!(true) {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver did not get ready within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let chromium = program("HOLDFAST_TEST_CHROMIUM", "/usr/bin/chromium");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // --no-sandbox: the tests may run as root, which Chromium's
                // sandbox refuses; the page is the project's own.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--hide-scrollbars", "--force-device-scale-factor=1",
                         format!("--window-size={width},{height}")]
            }
        }}});
        let session = browser.command(reqwest::Method::POST, "/session", Some(caps)).await;
        browser.session = session["sessionId"].as_str().expect("a session id").to_string();
        browser.resize(width, height).await;
        browser
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{}", self.base, path);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            req = req.json(&body);
        } else if method == reqwest::Method::POST {
            req = req.json(&json!({}));
        }
        let res = req.send().await.unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"));
        let status = res.status();
        let answer: Value = res.json().await.unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"));
        assert!(status.is_success(), "webdriver {method} {path} answered {status}: {answer}");
        answer["value"].clone()
    }

    fn at(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Sets the window's size in CSS pixels (the viewport of a laptop or a
    /// phone).
    pub async fn resize(&self, width: u32, height: u32) {
        self.command(reqwest::Method::POST, &self.at("/window/rect"), Some(json!({"width": width, "height": height})))
            .await;
    }

    pub async fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, &self.at("/url"), Some(json!({ "url": url }))).await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the
    /// page and returns what it returns.
    pub async fn eval(&self, script: &str, args: Value) -> Value {
        self.command(reqwest::Method::POST, &self.at("/execute/sync"), Some(json!({"script": script, "args": args})))
            .await
    }

    /// The text of the first element matching `css`, or `None`.
    pub async fn text(&self, css: &str) -> Option<String> {
        let v = self
            .eval("const e = document.querySelector(arguments[0]); return e ? e.textContent : null;", json!([css]))
            .await;
        v.as_str().map(str::to_string)
    }

    /// Whether an element matching `css` exists and is displayed.
    pub async fn visible(&self, css: &str) -> bool {
        let v = self
            .eval(
                "const e = document.querySelector(arguments[0]); \
                 return !!e && !e.closest('[hidden]') && e.getClientRects().length > 0;",
                json!([css]),
            )
            .await;
        v == json!(true)
    }

    /// Polls `check` (a script returning a truthy value when done) until it
    /// holds or `within` passes; panics with `what` and the last value.
    pub async fn wait(&self, what: &str, within: Duration, check: &str, args: Value) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = self.eval(check, args.clone()).await;
            let done = !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0));
            if done {
                return v;
            }
            assert!(Instant::now() < deadline, "waited {within:?} for {what}; last seen: {v}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the text of `css` contains `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str, within: Duration) -> String {
        let check = "const e = document.querySelector(arguments[0]); \
                     return e && !e.closest('[hidden]') && e.textContent.includes(arguments[1]) ? e.textContent : null;";
        let what = format!("{css} to show {needle:?} (it shows {:?})", self.text(css).await);
        self.wait(&what, within, check, json!([css, needle])).await.as_str().unwrap_or_default().to_string()
    }

    pub async fn find(&self, css: &str) -> Element<'_> {
        let v = self
            .command(reqwest::Method::POST, &self.at("/element"), Some(json!({"using": "css selector", "value": css})))
            .await;
        Element { browser: self, id: v[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {v}")).into() }
    }

    /// Saves a PNG of the window.
    pub async fn screenshot(&self, path: &Path) {
        let v = self.command(reqwest::Method::GET, &self.at("/screenshot"), None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("a base64 screenshot"))
            .expect("a base64 screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot's directory");
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

impl Element<'_> {
    pub async fn click(&self) {
        let path = self.browser.at(&format!("/element/{}/click", self.id));
        self.browser.command(reqwest::Method::POST, &path, None).await;
    }

    /// Types `text` into the element.
    pub async fn type_text(&self, text: &str) {
        let path = self.browser.at(&format!("/element/{}/value", self.id));
        self.browser.command(reqwest::Method::POST, &path, Some(json!({ "text": text }))).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes Chromium; the driver is killed either way.
        if !self.session.is_empty() {
            let url = format!("{}/session/{}", self.base, self.session);
            let _ = std::thread::scope(|s| {
                s.spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                    rt.block_on(async { reqwest::Client::new().delete(&url).send().await.ok() })
                })
                .join()
            });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
