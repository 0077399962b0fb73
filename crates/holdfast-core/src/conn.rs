//! Connection visibility: who held database connections, and for how long,
//! per conn tag (the business process that sent the statements). Stores count
//! it; the server reports it at `GET /admin/connections`, the CLI as
//! `holdfast conn-report`, the bench per run.

use serde::{Deserialize, Serialize};

/// One tag's connection use: totals since the process started, or (after
/// [`ConnHold::window`]) those of a window, such as one bench run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConnHold {
    /// holdfast's operation (`reserve`, `claim`, `replenish`, …) or a
    /// caller's `X-Conn-Tag`.
    pub tag: String,
    /// The pod whose connections these are, when the process runs pods
    /// (`--pods`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Connections handed out (one per transaction or standalone read).
    pub checkouts: u64,
    pub transactions: u64,
    pub statements: u64,
    /// Seconds connections were held, checkout to return.
    pub hold_seconds_total: f64,
    pub hold_seconds_mean: f64,
    /// The longest single hold; `None` in a window ([`ConnHold::window`])
    /// when it is not known: a process keeps only its longest since it
    /// started, so a window's longest is known only when it beat every
    /// earlier hold of that tag.
    pub hold_seconds_max: Option<f64>,
}

impl ConnHold {
    /// What happened between two reports: tags with any use, longest total
    /// hold first, at most `top` of them. Totals subtract exactly; the
    /// longest hold only when it is known (see `hold_seconds_max`).
    pub fn window(before: &[ConnHold], after: &[ConnHold], top: usize) -> Vec<ConnHold> {
        let mut rows: Vec<ConnHold> = after
            .iter()
            .filter_map(|a| {
                let b = before.iter().find(|b| b.tag == a.tag && b.pod == a.pod);
                let sub = |f: fn(&ConnHold) -> u64| f(a).saturating_sub(b.map(f).unwrap_or(0));
                let checkouts = sub(|r| r.checkouts);
                let statements = sub(|r| r.statements);
                if checkouts == 0 && statements == 0 {
                    return None;
                }
                let total = (a.hold_seconds_total - b.map(|b| b.hold_seconds_total).unwrap_or(0.0)).max(0.0);
                let earlier_max = b.and_then(|b| b.hold_seconds_max).unwrap_or(0.0);
                Some(ConnHold {
                    tag: a.tag.clone(),
                    pod: a.pod.clone(),
                    checkouts,
                    transactions: sub(|r| r.transactions),
                    statements,
                    hold_seconds_total: total,
                    hold_seconds_mean: if checkouts == 0 { 0.0 } else { total / checkouts as f64 },
                    hold_seconds_max: a.hold_seconds_max.filter(|m| *m > earlier_max || b.is_none()),
                })
            })
            .collect();
        rows.sort_by(|a, b| b.hold_seconds_total.total_cmp(&a.hold_seconds_total).then(a.tag.cmp(&b.tag)));
        rows.truncate(top);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tag: &str, checkouts: u64, total: f64, max: f64) -> ConnHold {
        ConnHold {
            tag: tag.into(),
            pod: None,
            checkouts,
            transactions: checkouts,
            statements: checkouts * 3,
            hold_seconds_total: total,
            hold_seconds_mean: total / checkouts.max(1) as f64,
            hold_seconds_max: Some(max),
        }
    }

    #[test]
    fn a_runs_share_is_the_difference_longest_total_first() {
        let before = [row("reserve", 10, 1.0, 0.5), row("stock", 1, 0.01, 0.01), row("claim", 4, 0.2, 0.1)];
        let after = [
            row("reserve", 30, 3.0, 0.4),
            row("stock", 1, 0.01, 0.01),
            row("claim", 8, 0.6, 0.3),
            row("replenish", 2, 0.1, 0.08),
        ];
        let d = ConnHold::window(&before, &after, 8);
        let tags: Vec<&str> = d.iter().map(|r| r.tag.as_str()).collect();
        assert_eq!(tags, ["reserve", "claim", "replenish"], "unused tags are left out");
        let reserve = &d[0];
        assert_eq!((reserve.checkouts, reserve.transactions, reserve.statements), (20, 20, 60));
        assert!((reserve.hold_seconds_total - 2.0).abs() < 1e-9 && (reserve.hold_seconds_mean - 0.1).abs() < 1e-9);
        assert_eq!(reserve.hold_seconds_max, None, "not above the earlier longest: unknown");
        assert_eq!(d[1].hold_seconds_max, Some(0.3), "a new longest belongs to this run");
        assert_eq!(d[2].hold_seconds_max, Some(0.08), "a tag first seen in this run");
        assert_eq!(ConnHold::window(&before, &after, 1).len(), 1);
    }
}
