//! What each command prints: a few readable lines, or one JSON object with
//! `--json`. Errors go to stderr as `error[code]: message`, or to stdout as
//! `{"error": code, "message": …}` with `--json`.

use holdfast_bench::flash_sale::FlashSaleReport;
use holdfast_core::{
    AuditReport, AuditRow, Delivery, Error, ItemId, ItemLevels, LocationLevel, Reservation, ShopId, Subscription,
};
use serde_json::json;

/// A pod and its schema version `(applied, latest)`, or why it did not answer.
pub type PodAnswer = (holdfast_sql::Pod, Result<(i64, i64), Error>);

#[derive(Debug, Clone, Copy)]
pub struct Printer {
    pub json: bool,
}

impl Printer {
    fn emit(&self, value: serde_json::Value) {
        println!("{}", serde_json::to_string_pretty(&value).expect("JSON values serialize"));
    }

    /// A list: in JSON `{key: [row, …]}`; as text `empty` when there is
    /// nothing in it. Whether the caller is to print the list's text rows.
    fn listing<T>(&self, key: &str, list: &[T], row: impl Fn(&T) -> serde_json::Value, empty: &str) -> bool {
        if self.json {
            self.emit(json!({ key: list.iter().map(row).collect::<Vec<_>>() }));
            return false;
        }
        if list.is_empty() {
            println!("{empty}");
            return false;
        }
        true
    }

    pub fn error(&self, e: &Error) {
        let lines = match e {
            Error::InsufficientStock(lines) => Some(lines),
            _ => None,
        };
        if self.json {
            let mut v = json!({ "error": e.code(), "message": e.to_string() });
            if let Some(lines) = lines {
                v["lines"] = json!(lines);
            }
            self.emit(v);
        } else {
            eprintln!("error[{}]: {e}", e.code());
            for l in lines.into_iter().flatten() {
                eprintln!("  {:<24} requested {:>6}  available {:>6}", l.item.as_str(), l.requested, l.available);
            }
        }
    }

    pub fn reservation(&self, r: &Reservation, what: &str) {
        if self.json {
            self.emit(json!({
                "id": r.id,
                "key": r.key,
                "status": r.status,
                "expires_at": r.expires_at,
                "lines": r.lines,
            }));
        } else {
            println!(
                "reservation {} {what} (key {}, status {}, expires {})",
                r.id,
                r.key,
                r.status,
                r.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            );
            for l in &r.lines {
                println!("  {:<24} {:<20} {:>6}", l.item.as_str(), l.location.as_str(), l.quantity);
            }
        }
    }

    pub fn level(&self, item: &ItemId, l: &LocationLevel) {
        self.levels(&ItemLevels { item: item.clone(), locations: vec![l.clone()] });
    }

    pub fn levels(&self, levels: &ItemLevels) {
        if self.json {
            self.emit(json!(levels));
            return;
        }
        println!("item {}", levels.item);
        if levels.locations.is_empty() {
            println!("  no stock recorded at any location");
            return;
        }
        println!("  {:<20} {:>10} {:>10} {:>10} {:>10}", "location", "on_hand", "available", "reserved", "committed");
        for l in &levels.locations {
            let q = l.quantities;
            println!(
                "  {:<20} {:>10} {:>10} {:>10} {:>10}",
                l.location.as_str(),
                q.on_hand,
                q.available,
                q.reserved,
                q.committed
            );
        }
    }

    /// A sweep's count, and with `--retention` how many finished
    /// reservations were removed.
    /// `not_found` with a message of its own; exit code 4, as for a
    /// reservation.
    pub fn not_found(&self, message: &str) -> std::process::ExitCode {
        if self.json {
            self.emit(json!({ "error": "not_found", "message": message }));
        } else {
            eprintln!("error[not_found]: {message}");
        }
        std::process::ExitCode::from(4)
    }

    /// A line of text, or the JSON value.
    pub fn done(&self, text: &str, value: serde_json::Value) {
        if self.json { self.emit(value) } else { println!("{text}") }
    }

    pub fn subscribed(&self, s: &Subscription, secret: &str) {
        let topics: Vec<&str> = s.topics.iter().map(|t| t.as_str()).collect();
        if self.json {
            self.emit(json!({ "id": s.id, "url": s.url, "topics": topics, "secret": secret }));
        } else {
            println!("webhook subscription {} for shop {}", s.id, s.shop);
            println!("  url     {}", s.url);
            println!("  topics  {}", topics.join(", "));
            println!("  secret  {secret}");
            println!("The secret is shown this once: keep it to verify the webhook-signature of each delivery.");
        }
    }

    pub fn subscriptions(&self, subs: &[Subscription]) {
        let row = |s: &Subscription| {
            json!({
                "id": s.id,
                "url": s.url,
                "topics": s.topics.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
                "created_at": s.created_at,
                "disabled_at": s.disabled_at,
            })
        };
        if !self.listing("webhooks", subs, row, "no webhook subscriptions") {
            return;
        }
        for s in subs {
            let state = match s.disabled_at {
                Some(at) => format!("disabled {} (410 Gone)", at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                None => "enabled".into(),
            };
            println!("{}  {}  {}  [{}]", s.id, state, s.url, s.topics.to_list());
        }
    }

    pub fn deliveries(&self, list: &[Delivery]) {
        let row = |d: &Delivery| {
            json!({
                "id": d.id,
                "event_id": d.event_id,
                "subscription": d.subscription,
                "type": d.topic.as_str(),
                "status": d.status.as_str(),
                "attempts": d.attempts,
                "created_at": d.created_at,
                "next_attempt_at": d.next_attempt_at,
                "last_status": d.last_status,
                "last_error": d.last_error,
                "delivered_at": d.delivered_at,
            })
        };
        if !self.listing("deliveries", list, row, "no deliveries") {
            return;
        }
        println!("{:>10}  {:<10} {:>8}  {:<22} {:<30} last answer", "id", "status", "attempts", "type", "event");
        for d in list {
            let last = match (d.last_status, &d.last_error) {
                (Some(s), _) => s.to_string(),
                (None, Some(e)) => e.clone(),
                (None, None) => "-".into(),
            };
            println!(
                "{:>10}  {:<10} {:>8}  {:<22} {:<30} {last}",
                d.id,
                d.status.as_str(),
                d.attempts,
                d.topic.as_str(),
                d.event_id
            );
        }
    }

    pub fn expired(&self, n: u64, purged: Option<u64>) {
        if self.json {
            match purged {
                None => self.emit(json!({ "released": n })),
                Some(p) => self.emit(json!({ "released": n, "purged": p })),
            }
        } else {
            println!("released {n} expired hold(s)");
            if let Some(p) = purged {
                println!("removed {p} finished reservation(s) past the retention period");
            }
        }
    }

    /// The audit; `pod_of` names the pod of a shop, with pods.
    pub fn audit(&self, report: &AuditReport, pod_of: impl Fn(&ShopId) -> Option<String>) {
        let with_pods = |rows: &[AuditRow]| -> Vec<serde_json::Value> {
            rows.iter()
                .map(|r| {
                    let mut v = json!(r);
                    if let Some(p) = pod_of(&r.shop) {
                        v["pod"] = json!(p);
                    }
                    v
                })
                .collect()
        };
        if self.json {
            self.emit(json!({
                "ok": report.ok(),
                "checked": report.checked,
                "breaches": with_pods(&report.breaches),
                "orphans": with_pods(&report.orphans),
            }));
            return;
        }
        if report.ok() {
            println!(
                "audit ok: on_hand = unpooled + pooled + reserved + committed for all {} (shop, item, location)",
                report.checked
            );
            return;
        }
        println!(
            "audit FAILED: {} breach(es), {} orphan(s) in {} checked",
            report.breaches.len(),
            report.orphans.len(),
            report.checked
        );
        let row = |kind: &str, r: &AuditRow| {
            let pod = pod_of(&r.shop).map(|p| format!(" (pod {p})")).unwrap_or_default();
            println!(
                "  {kind} shop {}{pod} item {} location {}: on_hand {} vs unpooled {} + pooled {} + reserved {} + committed {}",
                r.shop, r.item, r.location, r.on_hand, r.unpooled, r.pooled, r.reserved, r.committed
            )
        };
        report.breaches.iter().for_each(|r| row("breach", r));
        report.orphans.iter().for_each(|r| row("orphan (no ledger row)", r));
    }

    pub fn pod_of(&self, shop: &ShopId, pod: &holdfast_sql::Pod) {
        if self.json {
            self.emit(json!({ "shop": shop, "pod": pod.name, "database": pod.url }));
        } else {
            println!("shop {shop} lives in pod {} ({})", pod.name, pod.url);
        }
    }

    /// `pod list`: each pod with its schema version, or why it did not answer.
    pub fn pods(&self, rows: &[PodAnswer]) {
        if self.json {
            let pods: Vec<_> = rows
                .iter()
                .map(|(p, v)| {
                    json!({
                        "pod": p.name,
                        "backend": p.db.store.backend().name(),
                        "database": p.url,
                        "reachable": v.is_ok(),
                        "schema_version": v.as_ref().ok().map(|v| v.0),
                        "schema_latest": v.as_ref().ok().map(|v| v.1),
                        "error": v.as_ref().err().map(|e| e.to_string()),
                        "shops": p.shops,
                    })
                })
                .collect();
            self.emit(json!({ "pods": pods }));
            return;
        }
        println!("{:<16} {:<9} {:<10} {:<8} {:<40} SHOPS", "POD", "BACKEND", "REACHABLE", "SCHEMA", "DATABASE");
        for (p, v) in rows {
            let (reachable, schema) = match v {
                Ok((applied, latest)) => ("yes", format!("{applied}/{latest}")),
                Err(_) => ("NO", "-".to_string()),
            };
            let shops = p.shops.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",");
            println!(
                "{:<16} {:<9} {:<10} {:<8} {:<40} {}",
                p.name,
                p.db.store.backend().name(),
                reachable,
                schema,
                p.url,
                if shops.is_empty() { "-" } else { &shops }
            );
            if let Err(e) = v {
                println!("  {e}");
            }
        }
    }

    pub fn flash_sale(&self, r: &FlashSaleReport) {
        if self.json {
            self.emit(json!(r));
            return;
        }
        println!(
            "sold {} of {} units to {} buyers; {} turned away, {} released their hold, {} units held open",
            r.sold, r.stock, r.held, r.turned_away, r.released, r.open
        );
        println!("oversold {}  undersold {}  errors {}  ({} left in stock)", r.oversold, r.undersold, r.errors, r.left);
        println!(
            "{:.0} reserves/s, {:.0} holds/s in {:.2} s; reserve latency p50 {:.1} ms  p95 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
            r.throughput,
            r.holds_per_second,
            r.seconds,
            r.latency.p50_ms,
            r.latency.p95_ms,
            r.latency.p99_ms,
            r.latency.max_ms
        );
        match r.mean_batch {
            Some(m) => {
                println!("{} retries, {} deadlocks; {m:.1} reserves per coalesced batch", r.retries, r.deadlocks)
            }
            None => println!("{} retries, {} deadlocks", r.retries, r.deadlocks),
        }
        println!(
            "audit {}",
            match r.audit_ok {
                Some(true) => "ok: every unit is on the ledger, in the pool, held or sold",
                Some(false) => "FAILED",
                None => "not run (the target cannot audit; see the notes)",
            }
        );
        println!("{}", if r.ok() { "PASS: every unit sold exactly once" } else { "FAIL" });
    }
}
