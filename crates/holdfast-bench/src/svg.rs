//! A small SVG line chart (log-scale x, linear y) for the benchmark plots:
//! a few dozen lines of text output instead of a plotting library with font
//! handling.

use std::fmt::Write as _;

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// (x, y) with x > 0.
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let xs: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).filter(|x| *x > 0.0).collect();
    let (x_min, x_max) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (x_min, x_max) = if xs.is_empty() { (1.0, 10.0) } else { (x_min, x_max.max(x_min * 2.0)) };
    let y_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0_f64, f64::max).max(1e-9) * 1.1;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x.ln() - x_min.ln()) / (x_max.ln() - x_min.ln()) * pw;
    let py = |y: f64| TOP + ph - y / y_max * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#, W / 2.0, esc(title));
    // Axes, grid and ticks.
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, TOP + ph, LEFT + pw, TOP + ph);
    let _ = writeln!(s, r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>"#, TOP + ph);
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(|a, b| a.total_cmp(b));
    ticks.dedup();
    for t in ticks {
        let x = px(t);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{}" stroke="#eee"/>"##, TOP + ph);
        let _ = writeln!(s, r#"<text x="{x:.1}" y="{}" text-anchor="middle">{t}</text>"#, TOP + ph + 18.0);
    }
    for i in 0..=5 {
        let v = y_max / 1.1 * i as f64 / 5.0;
        let y = py(v);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/>"##, LEFT + pw);
        let label = if y_max > 100.0 { format!("{v:.0}") } else { format!("{v:.2}") };
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{label}</text>"#, LEFT - 6.0, y + 4.0);
    }
    let _ =
        writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, LEFT + pw / 2.0, H - 18.0, esc(x_label));
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(y_label)
    );
    // Series and legend.
    for (i, ser) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = ser.points.iter().copied().filter(|p| p.0 > 0.0).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for (x, y) in &pts {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, px(*x), py(*y));
        }
        let ly = TOP + 10.0 + i as f64 * 20.0;
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
