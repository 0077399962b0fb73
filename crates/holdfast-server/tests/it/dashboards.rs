//! The dashboard and alerting rules in `deploy/`: the rules pass `promtool
//! check rules` and their unit tests (`promtool test rules`); the dashboard
//! is a Grafana dashboard over a `${datasource}` variable; and every metric
//! either names — in a panel, a variable, a rule, a rule test's series or
//! the text around them — is one a running holdfast exports, with the labels
//! it is selected by.
//!
//! The names are checked against a real scrape: `serve` in process on
//! SQLite with `--redis-url`, driven until each metric has appeared (holds,
//! a claim, a release, a sell-out, an expiry the sweeper releases, a webhook
//! subscription and its deliveries, a shop in shadow mode that disagrees
//! with SQL). The few metrics only a rare failure creates are listed in
//! [`RARE`], each checked against the source instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::receiver::{Receiver, ok};
use holdfast_core::Backend;
use holdfast_server::Settings;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::app::{TestApp, stock, with_app};

/// Metrics that appear only when something fails in a way this test does
/// not cause, with why. Each must be created by a `counter!`, `gauge!` or
/// `histogram!` call in `crates/*/src` under exactly this name (checked, with
/// the labels that call gives it), and must be named in `deploy/` (no stale
/// entries).
const RARE: &[(&str, &str)] = &[
    // Only when the database refuses a whole coalesced batch (its requests
    // then run one by one).
    ("holdfast_coalesce_batch_failures_total", "a coalesced batch the database refused"),
    // Only when the legacy Redis store's sweep fails under --redis-url.
    ("holdfast_redis_errors_total", "a failed Redis sweep"),
];

/// Metrics that carry a `pod` label when `serve` runs with `--pods` (which
/// SQLite cannot be): a panel may select these by pod, no other.
const POD_LABELLED: &[&str] = &[
    "holdfast_db_pool_connections",
    "holdfast_db_pool_max",
    "holdfast_db_connection_hold_seconds_bucket",
    "holdfast_db_connection_hold_seconds_sum",
    "holdfast_db_connection_hold_seconds_count",
    "holdfast_db_statements_total",
    "holdfast_db_transactions_total",
    "holdfast_expired_holds_unswept",
    "holdfast_oldest_unswept_hold_seconds",
    "holdfast_webhook_queue_depth",
    "holdfast_webhook_dead",
    "holdfast_webhook_oldest_pending_seconds",
];

/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: &[&str] = &["job", "instance"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace directory")
}

fn deploy(file: &str) -> PathBuf {
    workspace().join("deploy").join(file)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// `promtool check rules` and `promtool test rules` on deploy/prometheus.
/// promtool is required, as the database servers are: scripts/test installs
/// it (Debian's prometheus package) when run as root.
pub fn the_rules_pass_promtool() {
    let dir = deploy("prometheus");
    for args in [["check", "rules", "holdfast-rules.yml"], ["test", "rules", "holdfast-rules.test.yml"]] {
        let out = match Command::new("promtool").args(args).current_dir(&dir).output() {
            Ok(out) => out,
            Err(e) => panic!(
                "promtool {}: {e}. Install it (Debian: apt-get install prometheus; scripts/test does it as root)",
                args.join(" ")
            ),
        };
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "promtool {} failed:\n{text}", args.join(" "));
        assert!(text.contains("SUCCESS"), "promtool {}:\n{text}", args.join(" "));
    }
}

/// A metric name as the deploy files use it, and the label names its
/// selectors give.
#[derive(Debug, Default)]
struct Named {
    labels: BTreeSet<String>,
    /// Where it was seen, for the failure message.
    files: BTreeSet<String>,
}

/// Every `holdfast_…` name in `text`, with the label names of the selector
/// (`{label="…", …}`) that follows it, if any.
fn names_in(text: &str, file: &str, into: &mut BTreeMap<String, Named>) {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while let Some(at) = text[i..].find("holdfast_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && ident(bytes[end]) {
            end += 1;
        }
        i = end;
        if start > 0 && ident(bytes[start - 1]) {
            continue;
        }
        let entry = into.entry(text[start..end].to_string()).or_default();
        entry.files.insert(file.to_string());
        let rest = text[end..].trim_start();
        if let Some(selector) = rest.strip_prefix('{') {
            let close = closing_brace(selector)
                .unwrap_or_else(|| panic!("{file}: unclosed selector after {}", &text[start..end]));
            for matcher in split_outside_quotes(&selector[..close]) {
                let name: String =
                    matcher.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    entry.labels.insert(name);
                }
            }
        }
    }
}

/// Where the selector that `s` is the inside of ends (quotes respected).
fn closing_brace(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn split_outside_quotes(s: &str) -> Vec<&str> {
    let (mut out, mut from, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// Every string in a JSON value, one per line.
fn strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The dashboard is one Grafana imports: panels with unique ids, each on
/// the `${datasource}` variable (a Prometheus data source), each query
/// with an expression. Returns its text for the name check.
fn checked_dashboard() -> String {
    let path = deploy("grafana/holdfast.json");
    let d: Value = serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    assert_eq!(d["uid"], "holdfast");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion");
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| vars.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no ${name} variable"));
    assert_eq!((&var("datasource")["type"], &var("datasource")["query"]), (&json!("datasource"), &json!("prometheus")));
    for name in ["job", "instance", "pod", "route", "tag"] {
        assert_eq!(var(name)["type"], "query", "${name}");
        assert_eq!(var(name)["datasource"]["uid"], "${datasource}", "${name}");
    }
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut queries = 0;
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title");
        assert!(ids.insert(p["id"].as_u64().expect("numeric panel id")), "panel id of {title} used twice");
        assert!(p["gridPos"]["w"].as_u64().is_some_and(|w| (1..=24).contains(&w)), "{title}: gridPos");
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"], json!({ "type": "prometheus", "uid": "${datasource}" }), "{title}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no query"));
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(expr.contains("holdfast_"), "{title}: query {expr:?} names no holdfast metric");
            queries += 1;
        }
    }
    assert!(queries >= 30, "{queries} queries");
    let mut text = String::new();
    strings(&d, &mut text);
    text
}

/// A scrape: series name → the label names seen on it; and the base names
/// of histograms and summaries (from `# TYPE`).
#[derive(Debug, Default)]
struct Scrape {
    series: BTreeMap<String, BTreeSet<String>>,
    typed: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Self {
        let mut s = Scrape::default();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let mut parts = t.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    s.typed.insert(name.to_string(), kind.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let labels = s.series.entry(line[..name_end].to_string()).or_default();
            if line[name_end..].starts_with('{') {
                let inside = &line[name_end + 1..];
                let close = closing_brace(inside).expect("a closed label set");
                for pair in split_outside_quotes(&inside[..close]) {
                    if let Some((k, _)) = pair.split_once('=') {
                        labels.insert(k.trim().to_string());
                    }
                }
            }
        }
        s
    }

    /// The label names of `name` as a query would select it: its own
    /// series, or a histogram's or summary's parts when `name` is the base.
    fn labels_of(&self, name: &str) -> Option<BTreeSet<String>> {
        if let Some(l) = self.series.get(name) {
            return Some(l.clone());
        }
        self.typed.contains_key(name).then(|| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| self.series.get(&format!("{name}{suffix}")))
                .flatten()
                .filter(|l| *l != "le")
                .cloned()
                .collect()
        })
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    }
}

/// The labels the source gives `name` where it creates it (`counter!("name",
/// "label" => …)`), or `None` when no such call exists in crates/*/src
/// (other than in `except`).
fn created_in_source(name: &str, except: Option<&Path>) -> Option<BTreeSet<String>> {
    let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
    let mut found: Option<BTreeSet<String>> = None;
    let mut stack = vec![workspace().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read crates/").flatten() {
            let path = entry.path();
            let in_src = path.components().any(|c| c.as_os_str() == "src");
            if path.is_dir() && !path.ends_with("target") {
                stack.push(path);
            } else if in_src && path.extension().is_some_and(|e| e == "rs") && except != Some(path.as_path()) {
                let text = read(&path);
                for mac in ["counter!(", "gauge!(", "histogram!("] {
                    let call = format!("{mac}\"{base}\"");
                    for (at, _) in text.match_indices(&call) {
                        let args = &text[at + call.len()..];
                        let args = &args[..args.find(')').unwrap_or(args.len())];
                        let labels = found.get_or_insert_with(BTreeSet::new);
                        for (k, _) in args.match_indices("\" =>") {
                            let before = &args[..k];
                            let open = before.rfind('"').expect("a quoted label name");
                            labels.insert(before[open + 1..].to_string());
                        }
                    }
                }
            }
        }
    }
    found.map(|mut l| {
        if name.ends_with("_bucket") {
            l.insert("le".into());
        }
        l
    })
}

fn tweak(s: &mut Settings) {
    crate::modes::with_redis(s);
    // The sweeper in the background, as in production, and fast retries.
    s.sweep_interval_ms = 100;
    s.webhook_retry_unit_ms = 10;
}

async fn scrape(app: &TestApp) -> String {
    let res = app.client.get(format!("{}/metrics", app.base)).send().await.expect("scrape");
    assert_eq!(res.status(), StatusCode::OK);
    res.text().await.expect("scrape body")
}

/// Every metric the dashboard and the rules name is exported by a running
/// holdfast (or is a [`RARE`] one its source creates), and every label they
/// select it by is one it carries.
pub async fn every_metric_the_dashboard_and_rules_name_is_exported() {
    let mut named: BTreeMap<String, Named> = BTreeMap::new();
    names_in(&checked_dashboard(), "grafana/holdfast.json", &mut named);
    for file in ["prometheus/holdfast-rules.yml", "prometheus/holdfast-rules.test.yml"] {
        // The rule tests' expected annotations are YAML strings in double
        // quotes, with their quotes escaped.
        names_in(&read(&deploy(file)).replace("\\\"", "\""), file, &mut named);
    }
    assert!(named.len() >= 30, "only {} metric names found in deploy/", named.len());
    for (name, why) in RARE {
        assert!(named.contains_key(*name), "RARE lists {name} ({why}), which deploy/ does not name: remove it");
    }

    with_app(Backend::Sqlite, tweak, move |app| async move {
        let (s1, admin) = (app.s1.clone(), app.admin.clone());
        // s1 is served by SQL: a webhook subscription, then holds, a claim,
        // a release, a replay, a sell-out and an expiry.
        let (status, v) = app.put("/admin/modes", &admin, json!({ "shop": "s1", "mode": "sql" })).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let rx = Receiver::start(ok, 0).await;
        let (status, v) = app.post("/v1/shops/s1/webhooks", &s1, json!({ "url": rx.url("/hooks") })).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        stock(&app, &s1, "s1", "sku", "wh", 3).await;
        let cart = |key: &str, quantity: i64, ttl: i64| {
            json!({ "key": key, "lines": [{ "item": "sku", "quantity": quantity }], "ttl_seconds": ttl })
        };
        let reservations = "/v1/shops/s1/reservations";
        let (status, a) = app.post(reservations, &s1, cart("a", 1, 600)).await;
        assert_eq!(status, StatusCode::CREATED, "{a}");
        let settle = |id: &Value, verb: &str| format!("{reservations}/{id}/{verb}");
        let (status, v) = app.call(reqwest::Method::POST, &settle(&a["id"], "claim"), Some(&s1), None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let (status, b) = app.post(reservations, &s1, cart("b", 1, 600)).await;
        assert_eq!(status, StatusCode::CREATED, "{b}");
        let (status, v) = app.call(reqwest::Method::POST, &settle(&b["id"], "release"), Some(&s1), None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(app.post(reservations, &s1, cart("a", 1, 600)).await.0, StatusCode::OK, "a replay");
        // c expires in 3 s (the sweeper releases it later): long enough to
        // still hold when d is turned away, on a slow machine too.
        let (status, c) = app.post(reservations, &s1, cart("c", 2, 3)).await;
        assert_eq!(status, StatusCode::CREATED, "{c}");
        let (status, v) = app.post(reservations, &s1, cart("d", 1, 600)).await;
        assert_eq!((status, &v["error"]), (StatusCode::CONFLICT, &json!("insufficient_stock")), "sold out: {v}");
        assert_eq!(app.call(reqwest::Method::GET, "/readyz", None, None).await.0, StatusCode::OK);

        // s2 in shadow mode, its SQL stock changed behind holdfast's back:
        // Redis holds, SQL refuses — a mismatch.
        let (status, v) = app.put("/admin/modes", &admin, json!({ "shop": "s2", "mode": "shadow" })).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        stock(&app, &app.s2, "s2", "sku", "wh", 5).await;
        holdfast_testkit::stock(&*app.db.store, "s2", "sku", "wh", 0).await;
        let (status, v) = app.post("/v1/shops/s2/reservations", &app.s2, cart("e", 1, 600)).await;
        assert_eq!(status, StatusCode::CREATED, "Redis decides in shadow mode: {v}");

        // Until every name has appeared: the sweeper releases c, the
        // webhook workers deliver and read their queue (every 5 s when idle).
        let deadline = Instant::now() + Duration::from_secs(40);
        let (text, scraped) = loop {
            let text = scrape(&app).await;
            let scraped = Scrape::parse(&text);
            let missing: Vec<&String> = named
                .keys()
                .filter(|n| scraped.labels_of(n).is_none() && !RARE.iter().any(|(r, _)| r == n))
                .collect();
            let mismatched = Scrape::value(&text, "holdfast_shadow_mismatches_total{op=\"reserve\"}").unwrap_or(0.0);
            let delivered = rx.got().len();
            if missing.is_empty() && mismatched >= 1.0 && delivered >= 4 {
                break (text, scraped);
            }
            assert!(
                Instant::now() < deadline,
                "named in deploy/ but not exported: {missing:?} (reserve mismatches {mismatched}, \
                 deliveries {delivered}); the scrape:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };

        let mut wrong = Vec::new();
        for (name, use_) in &named {
            let carried = if RARE.iter().any(|(r, _)| r == name) {
                created_in_source(name, None)
                    .unwrap_or_else(|| panic!("{name} is in RARE but no counter!/gauge!/histogram! in crates/ creates it"))
            } else {
                scraped.labels_of(name).expect("checked above")
            };
            for label in &use_.labels {
                let ok = carried.contains(label)
                    || TARGET_LABELS.contains(&label.as_str())
                    || (label == "pod" && POD_LABELLED.contains(&name.as_str()));
                if !ok {
                    wrong.push(format!("{name}{{{label}}} in {:?}: it carries {carried:?}", use_.files));
                }
            }
        }
        assert!(wrong.is_empty(), "selected by labels holdfast does not give them:\n{}\n{text}", wrong.join("\n"));
        for name in POD_LABELLED {
            assert!(created_in_source(name, None).is_some(), "POD_LABELLED lists {name}, which nothing creates");
        }
        // The failure counters /metrics shows at zero before the first
        // failure are each really counted somewhere else.
        let metrics_rs = workspace().join("crates/holdfast-server/src/metrics.rs");
        let source = read(&metrics_rs);
        let body = source.split("fn failures_at_zero").nth(1).expect("metrics.rs has failures_at_zero");
        let body = &body[..body.find("\n}\n").expect("its end")];
        let mut at_zero = BTreeMap::new();
        names_in(body, "metrics.rs", &mut at_zero);
        assert!(at_zero.len() >= 8, "{at_zero:?}");
        for name in at_zero.keys() {
            assert!(
                created_in_source(name, Some(&metrics_rs)).is_some(),
                "metrics.rs registers {name} at zero, but nothing else counts it"
            );
        }
        app.stop().await;
    })
    .await;
}
