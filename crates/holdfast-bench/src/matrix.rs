//! `holdfast bench matrix`: every backend at several concurrencies and added
//! latencies, each cell run several times (interleaved, so a noisy neighbour
//! hurts every backend alike); the medians as a Markdown report, as JSON, and
//! as SVG plots, each written where the caller says. Then the mixed load
//! (churn.rs) on each SQL database at several pool sizes, the same way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use holdfast_core::Error;
use serde::Serialize;

use crate::bench::{self, BenchBackend, BenchOptions, BenchReport};
use crate::churn::{self, ChurnOptions, ChurnReport};
use crate::latency::Latency;
use crate::svg::{Series, line_chart};

/// One configuration of the grid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// holdfast (requests coalesced), holdfast-uncoalesced (one transaction
    /// per request), counter, ceiling or redis (the legacy store).
    pub design: String,
    /// sqlite, postgres or mysql; redis for the legacy store.
    pub database: String,
    pub concurrency: u32,
    pub db_latency_ms: f64,
}

/// The medians of one cell over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct Medians {
    pub cell: Cell,
    pub runs: usize,
    pub throughput: f64,
    /// Each reserve latency figure's median over the runs.
    #[serde(flatten)]
    pub latency: Latency,
    /// Worst over the runs: any unit oversold or undersold disqualifies.
    pub oversold: u64,
    pub undersold: u64,
    pub retries: u64,
    pub deadlocks: u64,
    pub all_throughputs: Vec<f64>,
}

#[derive(Debug, Clone)]
pub struct MatrixOptions {
    /// What to run: each backend with its database URL; holdfast backends
    /// once coalesced and once not, unless the template turns coalescing off.
    pub targets: Vec<(BenchBackend, Option<String>)>,
    pub concurrency: Vec<u32>,
    pub latencies_ms: Vec<f64>,
    pub runs: usize,
    /// The options every run shares (duration, stock, hold-only, …).
    pub template: BenchOptions,
    /// The mixed load: each SQL database of `targets` at each of these pool
    /// sizes (none: not run), every run from this template.
    pub churn_connections: Vec<u32>,
    pub churn: ChurnOptions,
    /// The command line that produced it, for the report.
    pub command: String,
}

/// The medians of one mixed-load cell (a database at one pool size).
#[derive(Debug, Clone, Serialize)]
pub struct ChurnMedians {
    pub database: String,
    pub coalesce: bool,
    pub connections: u32,
    pub clients: u32,
    pub runs: usize,
    /// Requests per second, all operations.
    pub per_second: f64,
    pub reserve_p99_ms: f64,
    /// The slowest request of the slowest run.
    pub max_ms: f64,
    /// Worst over the runs.
    pub over_2s: u64,
    pub unknown: u64,
    /// Every run's audit clean and books equal to what clients were told.
    pub books_ok: bool,
    pub all_per_second: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Each latency figure's median over the runs, figure by figure: a cell's
/// p99 is its median run's p99 (not the p99 of every run's calls together),
/// and its max need not come from the same run as its p50.
fn median_latency<'a>(runs: impl Iterator<Item = &'a Latency> + Clone) -> Latency {
    let m = |g: fn(&Latency) -> f64| median(runs.clone().map(g).collect());
    Latency { p50_ms: m(|l| l.p50_ms), p95_ms: m(|l| l.p95_ms), p99_ms: m(|l| l.p99_ms), max_ms: m(|l| l.max_ms) }
}

fn design_of(r: &BenchReport) -> (String, String) {
    match r.backend.as_str() {
        "counter" | "ceiling" => {
            (r.backend.clone(), if r.database.starts_with("postgres") { "postgres" } else { "mysql" }.into())
        }
        "redis" => ("redis".into(), "redis".into()),
        other if r.coalesce => ("holdfast".into(), other.into()),
        other => ("holdfast-uncoalesced".into(), other.into()),
    }
}

/// Runs the grid; calls `progress` after each run with (done, total, report).
pub async fn run(
    opts: &MatrixOptions,
    mut progress: impl FnMut(usize, usize, &BenchReport),
) -> Result<Vec<Medians>, Error> {
    let mut plan = Vec::new();
    for (backend, url) in &opts.targets {
        let holdfast = matches!(backend, BenchBackend::Sqlite | BenchBackend::Postgres | BenchBackend::Mysql);
        let variants: &[bool] = if holdfast && opts.template.store.coalesce { &[true, false] } else { &[false] };
        for &lat in &opts.latencies_ms {
            if *backend == BenchBackend::Sqlite && lat > 0.0 {
                continue; // embedded: there is no network to delay
            }
            for &c in &opts.concurrency {
                for &coalesce in variants {
                    plan.push((*backend, url.clone(), c, lat, coalesce));
                }
            }
        }
    }
    let total = plan.len() * opts.runs;
    let mut results: BTreeMap<usize, Vec<BenchReport>> = BTreeMap::new();
    let mut done = 0;
    for _ in 0..opts.runs {
        for (i, (backend, url, c, lat, coalesce)) in plan.iter().enumerate() {
            let mut o = opts.template.clone();
            o.store.coalesce = *coalesce;
            o.backend = *backend;
            o.database_url = url.clone();
            o.sale.concurrency = *c;
            o.db_latency_ms = *lat;
            o.max_connections = (*c).min(90);
            let r = bench::run(&o).await?;
            done += 1;
            progress(done, total, &r);
            results.entry(i).or_default().push(r);
        }
    }
    Ok(results
        .into_values()
        .map(|runs| {
            let (design, database) = design_of(&runs[0]);
            let f = |g: fn(&BenchReport) -> f64| median(runs.iter().map(g).collect());
            Medians {
                cell: Cell {
                    design,
                    database,
                    concurrency: runs[0].sale.concurrency,
                    db_latency_ms: runs[0].db_latency_ms,
                },
                runs: runs.len(),
                throughput: f(|r| r.sale.throughput),
                latency: median_latency(runs.iter().map(|r| &r.sale.latency)),
                oversold: runs.iter().map(|r| r.sale.oversold).max().unwrap_or(0),
                undersold: runs.iter().map(|r| r.sale.undersold).max().unwrap_or(0),
                retries: runs.iter().map(|r| r.sale.retries).sum::<u64>() / runs.len() as u64,
                deadlocks: runs.iter().map(|r| r.sale.deadlocks).sum::<u64>() / runs.len() as u64,
                all_throughputs: runs.iter().map(|r| r.sale.throughput).collect(),
            }
        })
        .collect())
}

/// Runs the mixed load on each SQL database of the grid at each pool size,
/// interleaved; calls `progress` after each run.
pub async fn run_churn(
    opts: &MatrixOptions,
    mut progress: impl FnMut(usize, usize, &str, u32, &ChurnReport),
) -> Result<Vec<ChurnMedians>, Error> {
    let mut plan = Vec::new();
    for (backend, url) in &opts.targets {
        let (database, url) = match (backend, url) {
            (BenchBackend::Postgres, Some(url)) => ("postgres", url),
            (BenchBackend::Mysql, Some(url)) => ("mysql", url),
            _ => continue,
        };
        for &c in &opts.churn_connections {
            plan.push((database.to_string(), url.clone(), c));
        }
    }
    let total = plan.len() * opts.runs;
    let mut results: BTreeMap<usize, Vec<ChurnReport>> = BTreeMap::new();
    let mut done = 0;
    for _ in 0..opts.runs {
        for (i, (database, url, c)) in plan.iter().enumerate() {
            let mut o = opts.churn.clone();
            (o.connect.url, o.connect.max_connections) = (url.clone(), *c);
            let r = churn::run(&o).await?;
            done += 1;
            progress(done, total, database, *c, &r);
            results.entry(i).or_default().push(r);
        }
    }
    Ok(results
        .into_iter()
        .map(|(i, runs)| {
            let reserve_p99 =
                |r: &ChurnReport| r.ops.iter().find(|o| o.op == "reserve").map_or(0.0, |o| o.latency.p99_ms);
            let max = |r: &ChurnReport| r.ops.iter().map(|o| o.latency.max_ms).fold(0.0, f64::max);
            ChurnMedians {
                database: plan[i].0.clone(),
                coalesce: opts.churn.connect.store.coalesce,
                connections: plan[i].2,
                clients: opts.churn.clients,
                runs: runs.len(),
                per_second: median(runs.iter().map(|r| r.per_second).collect()),
                reserve_p99_ms: median(runs.iter().map(reserve_p99).collect()),
                max_ms: runs.iter().map(max).fold(0.0, f64::max),
                over_2s: runs.iter().map(|r| r.over_2s).max().unwrap_or(0),
                unknown: runs.iter().map(|r| r.unknown.values().sum::<u64>()).max().unwrap_or(0),
                books_ok: runs.iter().all(|r| r.books.is_empty() && r.audit_ok != Some(false)),
                all_per_second: runs.iter().map(|r| r.per_second).collect(),
            }
        })
        .collect())
}

/// The Markdown report: how it was produced, every cell's medians, the
/// mixed load's, and the plots (paths relative to the report).
pub fn report(opts: &MatrixOptions, m: &[Medians], churn: &[ChurnMedians], cores: usize, plots: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Matrix\n");
    let _ = writeln!(
        s,
        "Produced by\n\n```sh\n{}\n```\n\non a {cores}-core machine; {} runs per cell, interleaved, medians shown. Throughput is completed reserves per second (each one a durable hold record); latency is the reserve call, coordinated-omission corrected. Every run ends with its books checked: a run with any oversold or undersold unit does not count.\n",
        opts.command, opts.runs
    );
    let _ = writeln!(s, "### All cells\n");
    let _ = writeln!(
        s,
        "| design | database | latency ms | buyers | reserves/s | runs | p50 ms | p95 ms | p99 ms | max ms | oversold | undersold | retries | deadlocks |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for x in m {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} |",
            x.cell.design,
            x.cell.database,
            x.cell.db_latency_ms,
            x.cell.concurrency,
            x.throughput,
            x.all_throughputs.iter().map(|t| format!("{t:.0}")).collect::<Vec<_>>().join(" / "),
            x.latency.p50_ms,
            x.latency.p95_ms,
            x.latency.p99_ms,
            x.latency.max_ms,
            x.oversold,
            x.undersold,
            x.retries,
            x.deadlocks
        );
    }
    if !churn.is_empty() {
        let _ = writeln!(
            s,
            "\n### Mixed load\n\n`bench churn` through the library, {} clients for {} s, at each pool size (`--max-connections`); requests per second of every operation, the slowest request of any run, requests slower than 2 s and without an answer (worst run), and whether every run's books and audit were clean.\n",
            opts.churn.clients,
            opts.churn.duration.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "| database | coalesced | connections | requests/s | runs | reserve p99 ms | max ms | over 2 s | no answer | books |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        for x in churn {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {} | {:.1} | {:.0} | {} | {} | {} |",
                x.database,
                if x.coalesce { "yes" } else { "no" },
                x.connections,
                x.per_second,
                x.all_per_second.iter().map(|t| format!("{t:.0}")).collect::<Vec<_>>().join(" / "),
                x.reserve_p99_ms,
                x.max_ms,
                x.over_2s,
                x.unknown,
                if x.books_ok { "ok" } else { "DIFFER" }
            );
        }
    }
    if !plots.is_empty() {
        let _ = writeln!(s, "\n### Plots\n");
        for p in plots {
            let _ = writeln!(s, "![{p}]({p})\n");
        }
    }
    s
}

/// Throughput vs. concurrency per design and database, one chart per
/// latency; and p99 latency vs. concurrency. Returns the files written,
/// relative to `base`.
pub fn plots(m: &[Medians], dir: &Path, base: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let mut lats: Vec<f64> = m.iter().map(|x| x.cell.db_latency_ms).collect();
    lats.sort_by(|a, b| a.total_cmp(b));
    lats.dedup();
    for lat in lats {
        for (metric, label, get) in [
            ("throughput", "reserves per second", (|x: &Medians| x.throughput) as fn(&Medians) -> f64),
            ("p99", "p99 reserve latency (ms)", |x: &Medians| x.latency.p99_ms),
        ] {
            let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for x in m.iter().filter(|x| x.cell.db_latency_ms == lat) {
                let name = if x.cell.design == x.cell.database {
                    x.cell.design.clone()
                } else {
                    format!("{} on {}", x.cell.design, x.cell.database)
                };
                series.entry(name).or_default().push((x.cell.concurrency as f64, get(x)));
            }
            let series: Vec<Series> = series.into_iter().map(|(name, points)| Series { name, points }).collect();
            let title = format!("{label} vs. concurrent buyers, {lat} ms added latency");
            let svg = line_chart(&title, "concurrent buyers (log scale)", label, &series);
            let name = format!("{metric}-latency-{lat}ms.svg");
            let path = dir.join(&name);
            std::fs::write(&path, svg)?;
            files.push(path.strip_prefix(base).unwrap_or(&path).display().to_string());
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_medians_are_taken_figure_by_figure() {
        let l = |p50_ms, p95_ms, p99_ms, max_ms| Latency { p50_ms, p95_ms, p99_ms, max_ms };
        let runs = [l(1.0, 9.0, 20.0, 90.0), l(3.0, 5.0, 10.0, 30.0), l(2.0, 7.0, 30.0, 60.0)];
        assert_eq!(median_latency(runs.iter()), l(2.0, 7.0, 20.0, 60.0));
        assert_eq!(median_latency([].iter()), l(0.0, 0.0, 0.0, 0.0));
    }
}
