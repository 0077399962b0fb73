//! A small SVG line chart for the benchmark plots: a few dozen lines of text
//! output instead of a plotting library with font handling. Each axis is
//! linear or logarithmic, with ticks from the data or given with labels:
//! [`line_chart`] draws the matrix plots (log x at the data's x values,
//! linear y from 0), [`chart`] anything else (the single run's latency
//! percentile plot: both axes log, labelled percentiles).

use std::fmt::Write as _;

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// (x, y); on a log axis only values > 0 are drawn.
    pub points: Vec<(f64, f64)>,
}

/// One axis of a [`Chart`].
#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    /// Tick positions with their labels. `None`: on x, a tick at each x value
    /// of the data; on a linear y, six even steps from 0; on a log y, the
    /// powers of ten (with 2 and 5 between them when the range is short).
    pub ticks: Option<Vec<(f64, String)>>,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Self {
        Self { label: label.into(), log: false, ticks: None }
    }

    pub fn log(label: impl Into<String>) -> Self {
        Self { label: label.into(), log: true, ticks: None }
    }

    pub fn with_ticks(mut self, ticks: Vec<(f64, String)>) -> Self {
        self.ticks = Some(ticks);
        self
    }
}

/// A line chart: series of points, a title and, below it, an optional
/// smaller line (the headline figures of a run).
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub subtitle: Option<String>,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 40.0;
/// The plot's top when a subtitle takes a second title line.
const TOP_WITH_SUBTITLE: f64 = 58.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Log x at the data's x values, linear y from 0: the matrix plots.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    chart(&Chart {
        title: title.into(),
        subtitle: None,
        x: Axis::log(x_label),
        y: Axis::linear(y_label),
        series: series.to_vec(),
    })
}

/// Maps data values of one axis to pixels.
struct Scale {
    log: bool,
    min: f64,
    max: f64,
    /// Pixel of `min` and of `max`.
    from: f64,
    to: f64,
}

impl Scale {
    fn at(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.ln() - self.min.ln()) / (self.max.ln() - self.min.ln())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        self.from + t * (self.to - self.from)
    }

    fn shows(&self, v: f64) -> bool {
        v.is_finite() && (!self.log || v > 0.0)
    }
}

/// A short label for a tick value.
fn number(v: f64) -> String {
    if v == 0.0 || (v.abs() >= 1.0 && v.fract() == 0.0) {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Powers of ten covering [lo, hi], with 2× and 5× steps when that spans
/// fewer than three decades.
fn log_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<(f64, String)>) {
    let lo_exp = lo.log10().floor() as i32;
    let hi_exp = (hi.log10().ceil() as i32).max(lo_exp + 1);
    let fine = hi_exp - lo_exp < 3;
    let mut ticks = Vec::new();
    for e in lo_exp..=hi_exp {
        for m in if fine { &[1.0, 2.0, 5.0][..] } else { &[1.0][..] } {
            let v = m * 10f64.powi(e);
            if v <= 10f64.powi(hi_exp) {
                ticks.push((v, number(v)));
            }
        }
    }
    (10f64.powi(lo_exp), 10f64.powi(hi_exp), ticks)
}

pub fn chart(c: &Chart) -> String {
    let top = if c.subtitle.is_some() { TOP_WITH_SUBTITLE } else { TOP };
    let pw = W - LEFT - RIGHT;
    let ph = H - top - BOTTOM;
    let data = |f: fn(&(f64, f64)) -> f64, log: bool| -> Vec<f64> {
        c.series.iter().flat_map(|s| s.points.iter().map(f)).filter(|v| v.is_finite() && (!log || *v > 0.0)).collect()
    };

    // x: the data's range (at least a doubling on a log axis), ticks at the
    // data's x values unless given.
    let xs = data(|p| p.0, c.x.log);
    let (x_min, x_max) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (mut x_min, mut x_max) = if xs.is_empty() {
        (1.0, 10.0)
    } else if c.x.log {
        (x_min, x_max.max(x_min * 2.0))
    } else {
        (x_min, if x_max > x_min { x_max } else { x_min + 1.0 })
    };
    let x_ticks = match &c.x.ticks {
        Some(t) => {
            for (v, _) in t.iter().filter(|(v, _)| v.is_finite() && (!c.x.log || *v > 0.0)) {
                x_min = x_min.min(*v);
                x_max = x_max.max(*v);
            }
            t.clone()
        }
        None => {
            let mut t = xs.clone();
            t.sort_by(|a, b| a.total_cmp(b));
            t.dedup();
            t.into_iter().map(|v| (v, format!("{v}"))).collect()
        }
    };
    let sx = Scale { log: c.x.log, min: x_min, max: x_max, from: LEFT, to: LEFT + pw };

    // y: linear from 0 to 1.1 × the largest value, or log over whole decades.
    let ys = data(|p| p.1, c.y.log);
    let (sy, y_ticks) = if c.y.log {
        let (lo, hi) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
        let (lo, hi) = if ys.is_empty() { (1.0, 10.0) } else { (lo, hi) };
        let (lo, hi, auto) = log_ticks(lo, hi);
        (Scale { log: true, min: lo, max: hi, from: top + ph, to: top }, c.y.ticks.clone().unwrap_or(auto))
    } else {
        let y_max = ys.iter().copied().fold(0.0_f64, f64::max).max(1e-9) * 1.1;
        let auto = (0..=5)
            .map(|i| {
                let v = y_max / 1.1 * i as f64 / 5.0;
                (v, if y_max > 100.0 { format!("{v:.0}") } else { format!("{v:.2}") })
            })
            .collect();
        (Scale { log: false, min: 0.0, max: y_max, from: top + ph, to: top }, c.y.ticks.clone().unwrap_or(auto))
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#, W / 2.0, esc(&c.title));
    if let Some(sub) = &c.subtitle {
        let _ = writeln!(s, r#"<text x="{}" y="40" text-anchor="middle">{}</text>"#, W / 2.0, esc(sub));
    }
    // Axes, grid and ticks.
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, top + ph, LEFT + pw, top + ph);
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{}" stroke="black"/>"#, top + ph);
    for (t, label) in x_ticks.iter().filter(|(t, _)| sx.shows(*t)) {
        let x = sx.at(*t);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{}" stroke="#eee"/>"##, top + ph);
        let _ = writeln!(s, r#"<text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#, top + ph + 18.0, esc(label));
    }
    for (v, label) in y_ticks.iter().filter(|(v, _)| sy.shows(*v) && *v >= sy.min && *v <= sy.max) {
        let y = sy.at(*v);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/>"##, LEFT + pw);
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, esc(label));
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 18.0,
        esc(&c.x.label)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        esc(&c.y.label)
    );
    // Series and legend.
    for (i, ser) in c.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = ser.points.iter().copied().filter(|p| sx.shows(p.0) && sy.shows(p.1)).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", sx.at(*x), sy.at(*y))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for (x, y) in &pts {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, sx.at(*x), sy.at(*y));
        }
        let ly = top + 10.0 + i as f64 * 20.0;
        let lx = LEFT + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/>"#,
            lx + 20.0
        );
        let _ = writeln!(s, r#"<text x="{}" y="{}">{}</text>"#, lx + 26.0, ly + 4.0, esc(&ser.name));
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_cover_the_data_in_decades() {
        let (lo, hi, t) = log_ticks(0.35, 42.0);
        assert_eq!((lo, hi), (0.1, 100.0));
        let labels: Vec<&str> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0.1", "1", "10", "100"]);
        let (_, _, t) = log_ticks(1.2, 8.0);
        let labels: Vec<&str> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["1", "2", "5", "10"]);
    }

    #[test]
    fn log_log_chart_with_labelled_ticks_and_subtitle() {
        let svg = chart(&Chart {
            title: "a <b> & c".into(),
            subtitle: Some("p50 1 ms".into()),
            x: Axis::log("percentile").with_ticks(vec![(1.0, "p0".into()), (100.0, "p99".into())]),
            y: Axis::log("ms"),
            series: vec![Series { name: "reserve".into(), points: vec![(1.0, 0.5), (2.0, 1.0), (100.0, 30.0)] }],
        });
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;b&gt; &amp; c") && svg.contains(">p50 1 ms<"));
        assert!(svg.contains(">p0<") && svg.contains(">p99<") && svg.contains(">0.1<") && svg.contains(">100<"));
        assert_eq!(svg.matches("<circle").count(), 3);
    }
}
