//! `holdfast bench churn`: the mixed checkout load of a shop in business —
//! multi-line carts with candidate locations, split and partial reserves,
//! short holds, claims, releases, extends, replays, stock sets, adjustments
//! and fulfilments, level reads — on a few items that sell out and come back,
//! against the library or one or several `holdfast serve` replicas. It is
//! the workload `bench verify` checks ([`crate::verify::workload`]), with the
//! shape of a sale instead of a fault drill, and reports what an operator
//! asks of it: requests per second by operation, latency percentiles with
//! the maximum, errors by code, and whether every answer was right (the
//! linearizability check over the recorded history, and the audit).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use holdfast_core::{Backend, Error, ShopId, Store};
use holdfast_sql::ConnectOptions;
use serde::Serialize;

use crate::latency::Latency;
use crate::verify;
use crate::verify::history::{Answer, Call, Event, Recorder};
use crate::verify::serve::HttpStore;
use crate::verify::workload::{self, Workload};

#[derive(Debug, Clone)]
pub struct ChurnOptions {
    /// The library on this database, unless `targets` are given.
    pub connect: ConnectOptions,
    /// `holdfast serve` replicas to drive instead, round-robin by client.
    pub targets: Vec<String>,
    pub token: Option<String>,
    pub shop: Option<ShopId>,
    pub clients: u32,
    pub duration: Duration,
    pub items: u32,
    pub locations: u32,
    /// Units each (item, location) starts with: MIN, MAX.
    pub stock: (u32, u32),
    pub seed: u64,
    /// Also run the linearizability checker over the history (on a large
    /// shape it may give no verdict within its step budget).
    pub check: bool,
}

/// One operation's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpFigures {
    pub op: String,
    pub count: u64,
    pub per_second: f64,
    #[serde(flatten)]
    pub latency: Latency,
    /// Answers by outcome: `ok`, a refusal's code, or `unknown`.
    pub outcomes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChurnReport {
    pub seconds: f64,
    pub requests: u64,
    pub per_second: f64,
    pub ops: Vec<OpFigures>,
    /// Answers that said nothing about the outcome (timeouts, `503`s, lost
    /// connections), by reason.
    pub unknown: BTreeMap<String, u64>,
    /// Requests slower than 2 s.
    pub over_2s: u64,
    pub audit_ok: Option<bool>,
    /// Units sold (committed) per (item, location) at the end that differ
    /// from what the clients were told; empty when the books agree.
    pub books: Vec<String>,
    /// `None` when not checked; the checker's verdict otherwise.
    pub linearizable: Option<bool>,
    pub check_seconds: f64,
    /// What the checker found, printed.
    pub violations: Vec<String>,
}

/// Runs the load and reports on it.
pub async fn run(opts: &ChurnOptions) -> Result<ChurnReport, Error> {
    let run_id = format!("{:x}", rand::random::<u32>());
    let shop = match &opts.shop {
        Some(s) => s.clone(),
        None => ShopId::new(format!("churn-{run_id}"))?,
    };
    // The stores the clients use, and the library store when there is one
    // (it runs the sweeper and the audit).
    let (stores, direct): (Vec<Arc<dyn Store>>, _) = if opts.targets.is_empty() {
        if !opts.connect.url.starts_with("sqlite:") {
            crate::bench::ensure_database(&opts.connect.url).await?;
        }
        let store = holdfast_sql::connect(&opts.connect).await?;
        store.migrate().await?;
        (vec![store.clone()], Some(store))
    } else {
        let stores = opts
            .targets
            .iter()
            .map(|t| Arc::new(HttpStore::new(t, Backend::Postgres, opts.token.clone())) as Arc<dyn Store>)
            .collect();
        (stores, None)
    };
    let w = Arc::new(Workload {
        shop: shop.clone(),
        clients: opts.clients,
        families: 1,
        items_per_family: opts.items,
        locations: opts.locations,
        // Longer than a serve's request timeout (10 s by default), so its
        // `503 timeout` is what a client sees.
        timeout: Duration::from_secs(15),
        ttl: (1, 5),
        stock: opts.stock,
        seed: opts.seed,
    });
    let rec = Arc::new(Recorder::new());
    let started = tokio::time::Instant::now();
    workload::session(&stores, &w, &rec, opts.duration, direct.is_some(), |_| async { Ok(()) }).await?;
    let seconds = started.elapsed().as_secs_f64().min(opts.duration.as_secs_f64() + 1.0);
    let audit_ok = match &direct {
        Some(store) => Some(store.audit(Some(&shop)).await?.ok()),
        None => HttpStore::new(&opts.targets[0], Backend::Postgres, opts.token.clone()).audit_over_http(&shop).await?,
    };
    let events = rec.events();
    let mut report = figures(&events, opts.duration.as_secs_f64());
    report.seconds = seconds;
    report.audit_ok = audit_ok;
    if opts.check {
        let r = verify::check(events).await?;
        report.linearizable = Some(r.ok());
        report.check_seconds = r.elapsed.as_secs_f64();
        report.violations = r
            .violations
            .iter()
            .map(|v| format!("{} {v}", if v.gave_up { "INCONCLUSIVE" } else { "VIOLATION" }))
            .collect();
    }
    Ok(report)
}

/// The figures of a recorded history: client 0's calls (the stocking and
/// the closing reads) are not part of the load.
pub fn figures(events: &[Event], seconds: f64) -> ChurnReport {
    let mut invoked: BTreeMap<u64, (i64, &'static str)> = BTreeMap::new();
    let mut per_op: BTreeMap<&'static str, (Histogram<u64>, BTreeMap<String, u64>)> = BTreeMap::new();
    let mut unknown: BTreeMap<String, u64> = BTreeMap::new();
    let mut over_2s = 0;
    for e in events {
        match e {
            Event::Invoke { at, op, client, call } if *client != 0 => {
                invoked.insert(*op, (*at, name(call)));
            }
            Event::Complete { at, op, answer } => {
                let Some((from, kind)) = invoked.remove(op) else { continue };
                let us = (at - from).max(1) as u64;
                if us > 2_000_000 {
                    over_2s += 1;
                }
                let (h, outcomes) = per_op.entry(kind).or_insert_with(|| {
                    (Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"), BTreeMap::new())
                });
                let _ = h.record(us.min(600_000_000));
                let outcome = match answer {
                    Answer::Refused { code, .. } => code.clone(),
                    Answer::Unknown { reason } => {
                        *unknown.entry(reason.chars().take(80).collect()).or_default() += 1;
                        "unknown".into()
                    }
                    _ => "ok".into(),
                };
                *outcomes.entry(outcome).or_default() += 1;
            }
            _ => {}
        }
    }
    let ops: Vec<OpFigures> = per_op
        .into_iter()
        .map(|(op, (h, outcomes))| OpFigures {
            op: op.into(),
            count: h.len(),
            per_second: h.len() as f64 / seconds,
            latency: Latency::from_micros(&h),
            outcomes,
        })
        .collect();
    let requests = ops.iter().map(|o| o.count).sum();
    ChurnReport {
        seconds,
        requests,
        per_second: requests as f64 / seconds,
        ops,
        unknown,
        over_2s,
        audit_ok: None,
        books: books(events),
        linearizable: None,
        check_seconds: 0.0,
        violations: Vec::new(),
    }
}

/// What the clients were told against the ledger at the end: per (item,
/// location), the units committed by the closing reads must lie between what
/// was surely sold — holds answered `claimed` anywhere, less fulfilments
/// answered, less fulfilments whose answer was lost — and what may have
/// been — plus the holds of claims whose answer was lost. One line per
/// (item, location) outside that range.
pub fn books(events: &[Event]) -> Vec<String> {
    type Place = (String, String);
    let mut calls: BTreeMap<u64, (&Call, u32)> = BTreeMap::new();
    let mut lines_of: BTreeMap<i64, Vec<(Place, i64)>> = BTreeMap::new();
    let mut claimed: std::collections::BTreeSet<i64> = Default::default();
    let mut maybe_claimed: std::collections::BTreeSet<i64> = Default::default();
    let mut fulfilled: BTreeMap<Place, (i64, i64)> = BTreeMap::new();
    let mut last: BTreeMap<Place, i64> = BTreeMap::new();
    for e in events {
        match e {
            Event::Invoke { op, call, client, .. } => {
                calls.insert(*op, (call, *client));
            }
            Event::Complete { op, answer, .. } => {
                let Some((call, client)) = calls.remove(op) else { continue };
                if let Answer::Reservation(h) = answer {
                    lines_of.insert(
                        h.id,
                        h.lines.iter().map(|a| ((a.item.clone(), a.location.clone()), a.qty as i64)).collect(),
                    );
                    if h.status == "claimed" {
                        claimed.insert(h.id);
                    }
                }
                match (call, answer) {
                    (Call::Claim { id }, Answer::Unknown { .. }) => {
                        maybe_claimed.insert(*id);
                    }
                    (Call::Stock { item, location, change, n }, Answer::Level { .. } | Answer::Unknown { .. })
                        if change == "fulfil" =>
                    {
                        let f = fulfilled.entry((item.clone(), location.clone())).or_default();
                        if answer.is_unknown() {
                            f.1 += n;
                        } else {
                            f.0 += n;
                        }
                    }
                    (Call::Levels { item }, Answer::Levels { locations }) if client == 0 => {
                        for (location, q) in locations {
                            last.insert((item.clone(), location.clone()), q.committed);
                        }
                    }
                    _ => {}
                }
            }
            Event::Fault { .. } => {}
        }
    }
    let mut range: BTreeMap<Place, (i64, i64)> = BTreeMap::new();
    for (ids, sure) in [(&claimed, true), (&maybe_claimed, false)] {
        for id in ids.iter().filter(|id| sure || !claimed.contains(id)) {
            for (place, n) in lines_of.get(id).into_iter().flatten() {
                let r = range.entry(place.clone()).or_default();
                if sure {
                    r.0 += n;
                }
                r.1 += n;
            }
        }
    }
    for (place, (sure, maybe)) in &fulfilled {
        let r = range.entry(place.clone()).or_default();
        r.0 -= sure + maybe;
        r.1 -= sure;
    }
    let mut out = Vec::new();
    for (place, committed) in &last {
        let (lo, hi) = range.get(place).copied().unwrap_or_default();
        if *committed < lo || *committed > hi {
            out.push(format!(
                "{} at {}: {committed} units sold on the ledger, clients were told {lo}..={hi}",
                place.0, place.1
            ));
        }
    }
    out
}

fn name(call: &Call) -> &'static str {
    match call {
        Call::Reserve { .. } => "reserve",
        Call::Claim { .. } => "claim",
        Call::Release { .. } => "release",
        Call::Extend { .. } => "extend",
        Call::Stock { change, .. } => match change.as_str() {
            "set" => "stock set",
            "adjust" => "stock adjust",
            _ => "stock fulfil",
        },
        Call::Levels { .. } => "levels",
        Call::Lapse { .. } | Call::Read { .. } => "checker step",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::history::{Alloc, Held, Qty};

    fn events(committed_at_end: i64, fulfil_lost: bool) -> Vec<Event> {
        let held = |status: &str| {
            Answer::Reservation(Held {
                id: 7,
                status: status.into(),
                expires_at: 0,
                lines: vec![Alloc { item: "i".into(), location: "l".into(), qty: 3 }],
                created: None,
            })
        };
        let level = |committed| Qty { on_hand: 10, available: 10 - committed, reserved: 0, committed };
        vec![
            Event::Invoke { at: 1, op: 1, client: 1, call: Call::Claim { id: 7 } },
            Event::Complete { at: 2, op: 1, answer: held("claimed") },
            Event::Invoke {
                at: 3,
                op: 2,
                client: 1,
                call: Call::Stock { item: "i".into(), location: "l".into(), change: "fulfil".into(), n: 1 },
            },
            Event::Complete {
                at: 4,
                op: 2,
                answer: if fulfil_lost {
                    Answer::Unknown { reason: "lost".into() }
                } else {
                    Answer::Level { location: "l".into(), qty: level(2) }
                },
            },
            Event::Invoke { at: 5, op: 3, client: 0, call: Call::Levels { item: "i".into() } },
            Event::Complete {
                at: 6,
                op: 3,
                answer: Answer::Levels { locations: vec![("l".into(), level(committed_at_end))] },
            },
        ]
    }

    #[test]
    fn the_books_agree_with_what_clients_were_told() {
        assert!(books(&events(2, false)).is_empty());
        // A fulfilment whose answer was lost may or may not have shipped.
        assert!(books(&events(2, true)).is_empty());
        assert!(books(&events(3, true)).is_empty());
    }

    #[test]
    fn a_unit_sold_that_nobody_was_told_of_is_found() {
        assert_eq!(books(&events(3, false)).len(), 1, "one unit too many sold");
        assert_eq!(books(&events(1, false)).len(), 1, "one sold unit missing");
        assert_eq!(books(&events(4, true)).len(), 1);
    }
}
