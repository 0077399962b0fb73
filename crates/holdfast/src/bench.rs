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

use crate::cli::{DbArgs, FlashSaleArgs, MatrixArgs};
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
        },
        db_latency_ms: a.db_latency,
        store: db.store_config(),
        max_connections: db.max_connections.max(a.concurrency.min(90)),
        redis_url: a.redis_url.clone(),
        http: a.target.clone().map(|url| HttpOptions { url, token: a.token.clone(), shop: a.shop.clone() }),
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
    if let Some(path) = &a.plot {
        write(path, bench::plot(&report))?;
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
        for note in &report.notes {
            println!("note: {note}");
        }
        if let Some(path) = &a.plot {
            println!("plot: {}", path.display());
        }
    }
    Ok(if report.sale.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
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
            },
            db_latency_ms: 0.0,
            store: db.store_config(),
            max_connections: 1,
            redis_url: a.redis_url.clone(),
            http: None,
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
            r.sale.p99_ms,
            r.sale.oversold,
            r.sale.undersold
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
        write(path, matrix::report(&opts, &medians, cores, &plots))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &a.json {
        write(path, serde_json::to_string_pretty(&medians).expect("medians serialize"))?;
        println!("wrote {}", path.display());
    }
    if let Some(dir) = &a.plots {
        println!("wrote {} plot(s) under {}", plots.len(), dir.display());
    }
    let clean = medians.iter().all(|m| m.oversold == 0 && m.undersold == 0);
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
