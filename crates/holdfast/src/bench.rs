//! `holdfast bench …`: argument plumbing; the work is in holdfast-bench.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use holdfast_bench::bench::{self, BenchBackend, BenchOptions};
use holdfast_bench::flash_sale::FlashSale;
use holdfast_bench::http::HttpOptions;
use holdfast_bench::matrix::{self, MatrixOptions};
use holdfast_core::ConnHold;
use holdfast_core::{Error, Invalid};
use holdfast_sql::ConnectOptions;

use crate::cli::{ChurnArgs, DbArgs, FlashSaleArgs, MatrixArgs, VerifyArgs, VerifyMode};
use crate::output::Printer;
use crate::{Failure, OrFail};

pub async fn flash_sale(db: &DbArgs, a: FlashSaleArgs) -> Result<ExitCode, Failure> {
    let json_out = a.json.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let invalid = |field: &str, msg: &str| Failure { error: Invalid::new(field, msg).into(), json: json_out };
    let duration = match (a.duration, a.buyers) {
        (Some(d), _) if !(d > 0.0 && d <= 86_400.0) => return Err(invalid("duration", "must be 0 to 86400 seconds")),
        (Some(d), _) => Some(Duration::from_secs_f64(d)),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let interval = match a.interval {
        Some(i) if !(i.is_finite() && (0.1..=3600.0).contains(&i)) => {
            return Err(invalid("interval", "must be 0.1 to 3600 seconds"));
        }
        i => i.map(Duration::from_secs_f64),
    };
    let opts = BenchOptions {
        backend: a.backend.unwrap_or(BenchBackend::Postgres),
        database_url: db.database_url.clone(),
        sale: FlashSale {
            stock: a.stock,
            buyers: a.buyers.unwrap_or(u64::MAX),
            duration,
            concurrency: a.concurrency,
            cart_size: a.cart_size,
            claim_ratio: a.claim_ratio,
            settle: !a.hold_only,
            rate: a.rate,
            key_prefix: String::new(),
            progress: !json_out && std::io::stderr().is_terminal(),
            interval,
        },
        db_latency_ms: a.db_latency,
        store: db.store_config(),
        max_connections: db.max_connections.max(a.concurrency.min(90)),
        redis_url: a.redis_url.clone(),
        http: a.target.clone().map(|url| HttpOptions { url, token: a.token.clone(), shop: a.shop.clone() }),
        retention: a.retention,
        webhooks: a.webhooks,
        webhook_topics: (!a.webhook_topics.is_empty()).then(|| a.webhook_topics.iter().copied().collect()),
    };
    let report = bench::run(&opts).await.or_fail(json_out)?;
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text)
            .map_err(|e| Error::Internal(format!("cannot write {}: {e}", path.display())))
            .or_fail(json_out)
    };
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        if json_out {
            println!("{text}");
        } else {
            write(path, text + "\n")?;
        }
    }
    let mut plots = Vec::new();
    if let Some(path) = &a.plot {
        write(path, bench::plot(&report))?;
        plots.push(path.clone());
        for (suffix, svg) in bench::plot_intervals(&report) {
            let stem = path.to_string_lossy();
            let more = std::path::PathBuf::from(format!("{}{suffix}", stem.strip_suffix(".svg").unwrap_or(&stem)));
            write(&more, svg)?;
            plots.push(more);
        }
    }
    if !json_out {
        let mut head =
            format!("bench flash-sale: {}, {} buyers at a time", bench::describe(&report), report.sale.concurrency);
        if report.db_latency_ms > 0.0 {
            head.push_str(&format!(", {} ms added latency", report.db_latency_ms));
        }
        println!("{head} (run {})", report.run);
        Printer { json: false }.flash_sale(&report.sale);
        if let Some(rows) = &report.sale.connections {
            print!("{}", connection_table(rows));
        }
        print!("{}", tables_text(&report.sale));
        if let Some(w) = &report.webhooks {
            println!(
                "webhooks: {} delivered by {} worker(s), {:.0} deliveries/s; {} pending {:.2} s after the sale",
                w.delivered, w.workers, w.deliveries_per_second, w.pending, w.drain_seconds
            );
        }
        for note in &report.notes {
            println!("note: {note}");
        }
        for path in &plots {
            println!("plot: {}", path.display());
        }
    }
    Ok(if report.sale.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The intervals of `--interval` and holdfast's tables before and after.
fn tables_text(sale: &holdfast_bench::flash_sale::FlashSaleReport) -> String {
    let mb = |b: u64| format!("{:.1}", b as f64 / 1e6);
    let mut out = String::new();
    if let Some(intervals) = &sale.intervals {
        out.push_str("per interval:\n       T S   RESERVES/S     P99 MS   TABLES MB   HISTORY\n");
        for i in intervals {
            let tables = i.tables_bytes.map(mb).unwrap_or_else(|| "-".into());
            let history = i.history_list_length.map(|h| h.to_string()).unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "  {:>8.1} {:>12.0} {:>10.2} {:>11} {:>9}\n",
                i.t, i.throughput, i.p99_ms, tables, history
            ));
        }
    }
    if let (Some(start), Some(end)) = (&sale.tables_start, &sale.tables_end) {
        out.push_str(&format!(
            "holdfast's tables with indexes: {} MB -> {} MB (",
            mb(start.total_bytes),
            mb(end.total_bytes)
        ));
        let parts: Vec<String> = end
            .tables
            .iter()
            .map(|t| {
                let before = start.tables.iter().find(|s| s.table == t.table).map_or(0, |s| s.bytes);
                format!("{} {} -> {}", t.table, mb(before), mb(t.bytes))
            })
            .collect();
        out.push_str(&parts.join(", "));
        out.push_str(")\n");
        if let Some(on) = end.server.autovacuum {
            out.push_str(&format!("autovacuum: {}\n", if on { "on" } else { "OFF" }));
        }
        if let Some(h) = end.server.history_list_length {
            out.push_str(&format!("InnoDB history list length at the end: {h}\n"));
        }
    }
    out
}

/// Connection hold per conn tag during the sale, laid out by the table of
/// `holdfast conn-report`.
fn connection_table(rows: &[ConnHold]) -> String {
    let mut out = String::from("connection hold per tag during the sale (longest total first):\n");
    if rows.is_empty() {
        out.push_str("  none recorded\n");
        return out;
    }
    let table = holdfast_server::cli::conn_table(&serde_json::json!({ "tags": rows }));
    for line in table.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

pub async fn matrix(db: &DbArgs, a: MatrixArgs) -> Result<ExitCode, Failure> {
    let fail = |e: Error| Failure { error: e, json: false };
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        return Err(fail(Invalid::new("duration", "must be 0 to 3600 seconds").into()));
    }
    if !(a.churn_duration > 0.0 && a.churn_duration <= 3600.0) {
        return Err(fail(Invalid::new("churn_duration", "must be 0 to 3600 seconds").into()));
    }
    if a.churn_connections.iter().any(|&c| !(1..=1000).contains(&c)) {
        return Err(fail(Invalid::new("churn_connections", "give pool sizes of 1 to 1000").into()));
    }
    let mut targets = Vec::new();
    for b in &a.backends {
        match b {
            BenchBackend::Sqlite => targets.push((BenchBackend::Sqlite, None)),
            BenchBackend::Postgres => targets.push((BenchBackend::Postgres, Some(a.postgres_url.clone()))),
            BenchBackend::Mysql => targets.push((BenchBackend::Mysql, Some(a.mysql_url.clone()))),
            // The legacy store's ledger: a throw-away SQLite file per run.
            BenchBackend::Redis => targets.push((BenchBackend::Redis, None)),
            BenchBackend::Counter | BenchBackend::Ceiling => {
                targets.push((*b, Some(a.postgres_url.clone())));
                targets.push((*b, Some(a.mysql_url.clone())));
            }
        }
    }
    let command = std::iter::once("holdfast".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let opts = MatrixOptions {
        targets,
        concurrency: a.concurrency.clone(),
        latencies_ms: a.db_latency.clone(),
        runs: a.runs as usize,
        template: BenchOptions {
            backend: BenchBackend::Postgres,
            database_url: None,
            sale: FlashSale {
                stock: 100_000_000,
                buyers: u64::MAX,
                duration: Some(Duration::from_secs_f64(a.duration)),
                concurrency: 1,
                cart_size: 1,
                claim_ratio: 1.0,
                settle: false,
                rate: None,
                key_prefix: String::new(),
                progress: false,
                interval: None,
            },
            db_latency_ms: 0.0,
            store: db.store_config(),
            max_connections: 1,
            redis_url: a.redis_url.clone(),
            http: None,
            retention: None,
            webhooks: None,
            webhook_topics: None,
        },
        churn_connections: if a.no_churn { Vec::new() } else { a.churn_connections.clone() },
        churn: holdfast_bench::churn::ChurnOptions {
            connect: ConnectOptions { store: db.store_config(), ..ConnectOptions::new(String::new()) },
            targets: Vec::new(),
            token: None,
            shop: None,
            clients: a.churn_clients,
            duration: Duration::from_secs_f64(a.churn_duration),
            items: 5,
            locations: 3,
            stock: (15, 60),
            seed: clock_seed(),
            check: false,
        },
        command,
    };
    let medians = matrix::run(&opts, |done, total, r| {
        eprintln!(
            "[{done}/{total}] {} c={} lat={}ms: {:.0} reserves/s p99 {:.2} ms oversold {} undersold {}",
            bench::describe(r),
            r.sale.concurrency,
            r.db_latency_ms,
            r.sale.throughput,
            r.sale.latency.p99_ms,
            r.sale.oversold,
            r.sale.undersold
        )
    })
    .await
    .map_err(fail)?;
    let churn = matrix::run_churn(&opts, |done, total, database, c, r| {
        eprintln!(
            "[{done}/{total}] mixed load on {database}, {c} connections: {:.0} requests/s, {} slower than 2 s, books {}",
            r.per_second,
            r.over_2s,
            if r.books.is_empty() && r.audit_ok != Some(false) { "ok" } else { "DIFFER" }
        )
    })
    .await
    .map_err(fail)?;
    // Plot paths in the report are relative to the report's directory.
    let base = a
        .markdown
        .as_deref()
        .and_then(|p| p.parent())
        .map(|p| if p.as_os_str().is_empty() { std::path::Path::new(".") } else { p })
        .unwrap_or(std::path::Path::new("."));
    let plots = match &a.plots {
        Some(dir) => matrix::plots(&medians, dir, base).map_err(|e| fail(Error::Internal(format!("plots: {e}"))))?,
        None => Vec::new(),
    };
    let write = |path: &std::path::Path, text: String| {
        std::fs::write(path, text).map_err(|e| fail(Error::Internal(format!("{}: {e}", path.display()))))
    };
    if let Some(path) = &a.markdown {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        write(path, matrix::report(&opts, &medians, &churn, cores, &plots))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &a.json {
        let all = serde_json::json!({ "flash_sale": medians, "mixed_load": churn });
        write(path, serde_json::to_string_pretty(&all).expect("medians serialize"))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &a.plots {
        println!("wrote {} plot(s) under {}", plots.len(), dir.display());
    }
    let clean = medians.iter().all(|m| m.oversold == 0 && m.undersold == 0) && churn.iter().all(|c| c.books_ok);
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `holdfast bench churn`: the mixed load, its figures and its check.
pub async fn churn(db: &DbArgs, a: ChurnArgs) -> Result<ExitCode, Failure> {
    use holdfast_bench::churn::{self, ChurnOptions};
    let json = a.json;
    let fail = |e: Error| Failure { error: e, json };
    if !(a.duration > 0.0 && a.duration <= 86_400.0) {
        return Err(fail(Invalid::new("duration", "must be 0 to 86400 seconds").into()));
    }
    let stock = min_max(&a.stock);
    if !(stock.0 >= 1 && stock.0 <= stock.1 && stock.1 <= 1_000_000) {
        return Err(fail(Invalid::new("stock", "give MIN,MAX units with 1 <= MIN <= MAX <= 1000000").into()));
    }
    let tmp = std::env::temp_dir().join(format!("holdfast-churn-{}", std::process::id()));
    let database_url =
        holdfast_database(db, a.backend.unwrap_or(BenchBackend::Postgres), &tmp, "churn").map_err(fail)?;
    let opts = ChurnOptions {
        connect: ConnectOptions {
            store: db.store_config(),
            max_connections: db.max_connections,
            ..ConnectOptions::new(database_url)
        },
        targets: a.target.clone(),
        token: a.token.clone(),
        shop: a.shop.clone(),
        clients: a.concurrency,
        duration: Duration::from_secs_f64(a.duration),
        items: a.items,
        locations: a.locations,
        stock,
        seed: a.seed.unwrap_or_else(clock_seed),
        check: a.check,
    };
    let r = churn::run(&opts).await;
    let _ = std::fs::remove_dir_all(&tmp);
    let r = r.map_err(fail)?;
    let ok = r.books.is_empty() && r.linearizable != Some(false) && r.audit_ok != Some(false);
    if json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    println!(
        "bench churn: {} clients for {:.1} s on {} ({} items x {} locations, {}-{} units each, seed {})",
        opts.clients,
        r.seconds,
        if opts.targets.is_empty() {
            opts.connect.url.split('@').next_back().unwrap_or("").to_string()
        } else {
            opts.targets.join(", ")
        },
        opts.items,
        opts.locations,
        stock.0,
        stock.1,
        opts.seed
    );
    println!("{:.0} requests/s ({} requests); {} slower than 2 s", r.per_second, r.requests, r.over_2s);
    println!(
        "  {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9}  outcomes",
        "OPERATION", "COUNT", "PER S", "P50 MS", "P95 MS", "P99 MS", "MAX MS"
    );
    for o in &r.ops {
        let outcomes: Vec<String> = o.outcomes.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "  {:<14} {:>9} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>9.1}  {}",
            o.op,
            o.count,
            o.per_second,
            o.latency.p50_ms,
            o.latency.p95_ms,
            o.latency.p99_ms,
            o.latency.max_ms,
            outcomes.join(", ")
        );
    }
    for (reason, n) in &r.unknown {
        println!("  no answer ({n}): {reason}");
    }
    if let Some(a) = r.audit_ok {
        println!("audit: {}", if a { "ok" } else { "BREACH" });
    }
    if r.books.is_empty() {
        println!("books: units sold on the ledger are what the clients were told");
    }
    for b in &r.books {
        println!("BOOKS DIFFER: {b}");
    }
    match r.linearizable {
        Some(true) => println!("every answer checked: linearizable ({:.1} s)", r.check_seconds),
        Some(false) => {
            for v in &r.violations {
                println!("{v}");
            }
            println!("answers checked: NOT linearizable or no verdict ({:.1} s)", r.check_seconds);
        }
        None => {}
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `holdfast bench verify`: run and check, or check a recorded history.
pub async fn verify(db: &DbArgs, a: VerifyArgs) -> Result<ExitCode, Failure> {
    use holdfast_bench::verify::{self, Fault, VerifyOptions, history};
    let json = a.json;
    let fail = |e: Error| Failure { error: e, json };
    let io = |what: &str, p: &std::path::Path, e: std::io::Error| {
        fail(Error::Internal(format!("cannot {what} {}: {e}", p.display())))
    };
    let (events, audit_ok) = if let Some(path) = &a.check {
        let file = std::fs::File::open(path).map_err(|e| io("read", path, e))?;
        (history::read(std::io::BufReader::new(file)).map_err(|e| io("read", path, e))?, None)
    } else {
        if !(a.duration > 0.0 && a.duration <= 86_400.0) {
            return Err(fail(Invalid::new("duration", "must be 0 to 86400 seconds").into()));
        }
        let (lo, hi) = min_max(&a.fault_every);
        if !(lo > 0.0 && lo <= hi) {
            return Err(fail(Invalid::new("fault_every", "give MIN,MAX seconds with 0 < MIN <= MAX").into()));
        }
        let ttl = min_max(&a.ttl);
        if !(ttl.0 >= 1 && ttl.0 <= ttl.1 && ttl.1 <= 86_400) {
            return Err(fail(Invalid::new("ttl", "give MIN,MAX seconds with 1 <= MIN <= MAX <= 86400").into()));
        }
        let faults: Vec<Fault> = a.faults.iter().flatten().copied().collect();
        let tmp = std::env::temp_dir().join(format!("holdfast-verify-{}", std::process::id()));
        let database_url = holdfast_database(db, a.backend, &tmp, "verify").map_err(fail)?;
        // SQLite is a file in this process: nothing on the network to break.
        let faults: Vec<Fault> = if database_url.starts_with("sqlite:") && a.target.is_none() {
            faults.into_iter().filter(|f| matches!(f, Fault::Kill | Fault::Redis)).collect()
        } else {
            faults
        };
        let opts = VerifyOptions {
            database_url,
            store: db.store_config(),
            clients: a.clients,
            duration: Duration::from_secs_f64(a.duration),
            faults,
            fault_every: (lo, hi),
            ttl,
            seed: a.seed.unwrap_or_else(clock_seed),
            serve: a.serve,
            mode: a.mode.map(|m| {
                let mode = match m {
                    VerifyMode::Shadow => holdfast_core::Mode::Shadow,
                    VerifyMode::SqlPrimary => holdfast_core::Mode::SqlPrimary,
                };
                (mode, a.redis_url.clone())
            }),
            target: a.target.clone().map(|url| verify::Target {
                url,
                token: a.token.clone(),
                shop: a.shop.clone(),
                backend: match a.backend {
                    BenchBackend::Mysql => holdfast_core::Backend::MySql,
                    BenchBackend::Sqlite => holdfast_core::Backend::Sqlite,
                    _ => holdfast_core::Backend::Postgres,
                },
            }),
            restart_cmd: a.restart_cmd.clone(),
        };
        if !json {
            eprintln!(
                "recording {} clients for {} s on {} (coalescing {}, faults: {}, seed {})",
                opts.clients,
                a.duration,
                match &opts.target {
                    Some(t) => t.url.as_str(),
                    None => opts.database_url.split('@').next_back().unwrap_or(""),
                },
                if opts.store.coalesce { "on" } else { "off" },
                if opts.faults.is_empty() {
                    "none".to_string()
                } else {
                    format!("{:?} every {lo}-{hi} s", opts.faults)
                },
                opts.seed
            );
        }
        let run = verify::run(&opts).await.or_fail(json)?;
        let _ = std::fs::remove_dir_all(&tmp);
        if let Some(path) = &a.history {
            let file = std::fs::File::create(path).map_err(|e| io("write", path, e))?;
            history::write(&run.events, &mut std::io::BufWriter::new(file)).map_err(|e| io("write", path, e))?;
        }
        (run.events, run.audit_ok)
    };
    let report = verify::check(events).await.or_fail(json)?;
    Ok(summarize(&report, audit_ok, json))
}

fn summarize(r: &holdfast_bench::verify::check::Report, audit_ok: Option<bool>, json: bool) -> ExitCode {
    let ok = r.ok() && audit_ok != Some(false);
    if json {
        let v = serde_json::json!({
            "ok": ok,
            "operations": r.operations,
            "unknown": r.unknown,
            "faults": r.faults,
            "groups": r.groups,
            "steps": r.steps,
            "check_seconds": r.elapsed.as_secs_f64(),
            "audit_ok": audit_ok,
            "violations": r.violations.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        println!(
            "{} operations ({} without an answer), {} fault events, {} item groups; checked in {:.2} s ({} steps)",
            r.operations,
            r.unknown,
            r.faults,
            r.groups,
            r.elapsed.as_secs_f64(),
            r.steps
        );
        if let Some(a) = audit_ok {
            println!("audit: {}", if a { "ok" } else { "BREACH" });
        }
        for v in &r.violations {
            println!("{} {v}", if v.gave_up { "INCONCLUSIVE" } else { "VIOLATION" });
        }
        let verdict = if ok {
            "linearizable: every answer is one a correct inventory gives"
        } else if r.violations.iter().all(|v| v.gave_up) && audit_ok != Some(false) {
            "no verdict: the search gave up"
        } else {
            "NOT linearizable"
        };
        println!("{verdict}");
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// A seed from the clock, for runs not given one (each run prints its seed).
fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

/// A `MIN,MAX` flag: one value stands for both; anything else is (0, 0),
/// which every caller refuses.
fn min_max<T: Copy + Default>(v: &[T]) -> (T, T) {
    match v {
        [lo, hi] => (*lo, *hi),
        [n] => (*n, *n),
        _ => (T::default(), T::default()),
    }
}

/// The database a `bench` command runs holdfast on: `--database-url`, or the
/// local server's `holdfast_bench`, or a throw-away SQLite file in `tmp`
/// named after `what`.
fn holdfast_database(db: &DbArgs, backend: BenchBackend, tmp: &std::path::Path, what: &str) -> Result<String, Error> {
    Ok(match (&db.database_url, backend) {
        (Some(u), _) => u.clone(),
        (None, BenchBackend::Sqlite) => {
            std::fs::create_dir_all(tmp)
                .map_err(|e| Error::Internal(format!("cannot create {}: {e}", tmp.display())))?;
            format!("sqlite://{}", tmp.join(format!("{what}.db")).display())
        }
        (None, BenchBackend::Mysql) => bench::DEFAULT_MYSQL_URL.into(),
        (None, BenchBackend::Postgres) => bench::DEFAULT_POSTGRES_URL.into(),
        (None, _) => {
            return Err(Invalid::new("backend", format!("{what} runs holdfast: sqlite, postgres or mysql")).into());
        }
    })
}
