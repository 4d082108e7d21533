//! Small hand-written SVG charts: lines or stacked areas over a linear or
//! logarithmic x axis, with ticks, axis labels and a legend. Enough for the
//! simulator's three charts without a plotting dependency.

use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 56.0;
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// One chart's description.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// A logarithmic x axis (points at x ≤ 0 are left out).
    pub log_x: bool,
    /// Fill the areas between cumulative sums instead of drawing lines.
    pub stacked: bool,
    /// Fixed top of the y axis, else the data's maximum.
    pub y_max: Option<f64>,
    pub series: Vec<Line>,
    /// Vertical lines at moments worth seeing (a phase change, a
    /// borrowing adjustment), on linear x axes.
    pub markers: Vec<Marker>,
}

/// A labelled vertical line.
#[derive(Debug, Clone, Default)]
pub struct Marker {
    pub x: f64,
    pub label: String,
    /// Drawn in the accent colour (phase changes) rather than grey.
    pub strong: bool,
}

/// One series.
#[derive(Debug, Clone, Default)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (ignored when stacked).
    pub dashed: bool,
    /// Index into the palette; by default the series' own index.
    pub color: Option<usize>,
}

impl Line {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.into(),
            points,
            ..Line::default()
        }
    }
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        let (lo, hi, v) = if self.log {
            (self.lo.log10(), self.hi.log10(), v.max(self.lo).log10())
        } else {
            (self.lo, self.hi, v)
        };
        let span = if hi > lo { hi - lo } else { 1.0 };
        self.from + (v - lo) / span * (self.to - self.from)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut t = Vec::new();
            let mut v = 10f64.powf(self.lo.log10().floor());
            while v <= self.hi * 1.0001 {
                if v >= self.lo * 0.9999 {
                    t.push(v);
                }
                v *= 10.0;
            }
            return t;
        }
        let span = (self.hi - self.lo).max(f64::MIN_POSITIVE);
        let raw = span / 6.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|&s| span / s <= 7.0)
            .unwrap_or(10.0 * magnitude);
        let mut t = Vec::new();
        let mut v = (self.lo / step).ceil() * step;
        while v <= self.hi + step * 1e-9 {
            t.push(v);
            v += step;
        }
        t
    }
}

/// A tick label: no trailing zeros, `k`/`M` for big numbers.
fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Renders `chart` as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let series: Vec<Line> = if chart.stacked {
        stack(&chart.series)
    } else {
        chart.series.clone()
    };
    let points = || {
        series
            .iter()
            .flat_map(|l| l.points.iter().copied())
            .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!chart.log_x || x > 0.0))
    };
    let (mut x_lo, mut x_hi) = points()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (x, _)| {
            (lo.min(x), hi.max(x))
        });
    if !x_lo.is_finite() {
        (x_lo, x_hi) = if chart.log_x { (1e-3, 1.0) } else { (0.0, 1.0) };
    }
    if chart.log_x {
        x_lo = 10f64.powf(x_lo.log10().floor());
        x_hi = 10f64.powf(x_hi.log10().ceil()).max(x_lo * 10.0);
    } else if x_hi <= x_lo {
        x_hi = x_lo + 1.0;
    } else {
        x_lo = x_lo.min(0.0);
    }
    let y_hi = chart
        .y_max
        .unwrap_or_else(|| points().map(|(_, y)| y).fold(0.0, f64::max) * 1.05)
        .max(1e-9);
    let y_hi = if chart.y_max.is_none() && y_hi < 1.0 {
        1.0
    } else {
        y_hi
    };
    let x = Axis {
        lo: x_lo,
        hi: x_hi,
        log: chart.log_x,
        from: LEFT,
        to: WIDTH - RIGHT,
    };
    let y = Axis {
        lo: 0.0,
        hi: y_hi,
        log: false,
        from: HEIGHT - BOTTOM,
        to: TOP,
    };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(&chart.title)
    );
    axes(&mut s, &x, &y, chart);
    markers(&mut s, &x, &y, chart);
    for (i, line) in series.iter().enumerate() {
        let (name, pts) = (&line.name, &line.points);
        let color = color(line, i);
        let path: Vec<String> = pts
            .iter()
            .filter(|&&(px, py)| px.is_finite() && py.is_finite() && (!chart.log_x || px > 0.0))
            .map(|&(px, py)| format!("{:.1},{:.1}", x.map(px), y.map(py.min(y_hi))))
            .collect();
        if path.is_empty() {
            continue;
        }
        if chart.stacked {
            // Down along this series' top, back along the one beneath.
            let below: Vec<String> = if i == 0 {
                vec![
                    format!("{:.1},{:.1}", x.map(pts[pts.len() - 1].0), y.map(0.0)),
                    format!("{:.1},{:.1}", x.map(pts[0].0), y.map(0.0)),
                ]
            } else {
                series[i - 1]
                    .points
                    .iter()
                    .rev()
                    .map(|&(px, py)| format!("{:.1},{:.1}", x.map(px), y.map(py.min(y_hi))))
                    .collect()
            };
            let _ = writeln!(
                s,
                r#"<polygon points="{} {}" fill="{color}" fill-opacity="0.85" stroke="{color}"><title>{}</title></polygon>"#,
                path.join(" "),
                below.join(" "),
                escape(name)
            );
        } else {
            let dash = if line.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"{dash}><title>{}</title></polyline>"#,
                path.join(" "),
                escape(name)
            );
        }
    }
    legend(&mut s, &series);
    s.push_str("</svg>\n");
    s
}

fn axes(s: &mut String, x: &Axis, y: &Axis, chart: &Chart) {
    let (x0, x1, y0, y1) = (x.from, x.to, y.from, y.to);
    for t in y.ticks() {
        let py = y.map(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            py + 4.0,
            tick_label(t)
        );
    }
    for t in x.ticks() {
        let px = x.map(t);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{y1}" stroke="#f0f0f0"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y0 + 16.0,
            tick_label(t)
        );
    }
    let _ = writeln!(
        s,
        r##"<polyline points="{x0},{y1} {x0},{y0} {x1},{y0}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 14.0,
        escape(&chart.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        escape(&chart.y_label)
    );
}

/// Markers as dashed vertical lines; labels only where they do not crowd
/// the previous one (every line keeps its label as a tooltip).
fn markers(s: &mut String, x: &Axis, y: &Axis, chart: &Chart) {
    if chart.log_x {
        return;
    }
    let mut last_label = f64::NEG_INFINITY;
    for m in &chart.markers {
        if !m.x.is_finite() || m.x < x.lo || m.x > x.hi {
            continue;
        }
        let px = x.map(m.x);
        let (stroke, width) = if m.strong {
            ("#7b3294", 1.4)
        } else {
            ("#999999", 0.8)
        };
        let _ = writeln!(
            s,
            r#"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{stroke}" stroke-width="{width}" stroke-dasharray="3 3"><title>{}</title></line>"#,
            y.from,
            y.to,
            escape(&m.label)
        );
        if m.strong && px - last_label > 90.0 {
            last_label = px;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{stroke}">{}</text>"#,
                px + 3.0,
                y.to + 10.0,
                escape(&m.label)
            );
        }
    }
}

fn color(line: &Line, i: usize) -> &'static str {
    PALETTE[line.color.unwrap_or(i) % PALETTE.len()]
}

fn legend(s: &mut String, series: &[Line]) {
    let x = WIDTH - RIGHT + 20.0;
    let rows = ((HEIGHT - TOP) / 18.0) as usize;
    for (i, line) in series.iter().enumerate().take(rows) {
        let name = &line.name;
        let y = TOP + 18.0 * i as f64;
        let label: String = if i + 1 == rows && series.len() > rows {
            format!("… and {} more", series.len() - i)
        } else if name.chars().count() > 30 {
            name.chars().take(29).chain(['…']).collect()
        } else {
            name.clone()
        };
        let swatch = if line.dashed {
            format!(
                r#"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2" stroke-dasharray="4 2"/>"#,
                y - 4.0,
                x + 12.0,
                y - 4.0,
                color(line, i)
            )
        } else {
            format!(
                r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
                y - 10.0,
                color(line, i)
            )
        };
        let _ = writeln!(
            s,
            r#"{swatch}<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 18.0,
            y,
            escape(&label)
        );
    }
}

/// Cumulative sums of series that share their x values.
fn stack(series: &[Line]) -> Vec<Line> {
    let mut acc: Vec<(f64, f64)> = Vec::new();
    series
        .iter()
        .map(|line| {
            if acc.is_empty() {
                acc = line.points.iter().map(|&(x, _)| (x, 0.0)).collect();
            }
            for (a, &(_, y)) in acc.iter_mut().zip(&line.points) {
                a.1 += y;
            }
            Line {
                points: acc.clone(),
                ..line.clone()
            }
        })
        .collect()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn renders_lines_stacks_and_log_axes() {
        let mut chart = Chart {
            title: "a <chart> & more".into(),
            x_label: "time (s)".into(),
            y_label: "seats".into(),
            series: vec![
                Line::new("one", vec![(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]),
                Line::new("two", vec![(0.0, 2.0), (1.0, 2.0), (2.0, 2.0)]),
            ],
            ..Chart::default()
        };
        let lines = render(&chart);
        assert!(lines.starts_with("<svg"));
        assert!(lines.trim_end().ends_with("</svg>"));
        assert_eq!(
            lines.matches("<polyline points=").count(),
            3,
            "two series and the axes"
        );
        assert!(lines.contains("a &lt;chart&gt; &amp; more"));
        chart.stacked = true;
        let stacked = render(&chart);
        assert_eq!(stacked.matches("<polygon").count(), 2);
        chart.stacked = false;
        chart.log_x = true;
        chart.series[0].points.push((0.001, 0.5));
        chart.series[1].dashed = true;
        let log = render(&chart);
        assert!(log.contains(">0.001<"), "decade ticks from the smallest x");
        assert_eq!(
            log.matches("stroke-dasharray").count(),
            2,
            "line and legend"
        );
    }

    #[test]
    fn empty_and_degenerate_data_still_render() {
        for series in [vec![], vec![Line::new("flat", vec![(1.0, 0.0)])]] {
            let svg = render(&Chart {
                series,
                ..Chart::default()
            });
            assert!(svg.contains("</svg>"));
            assert!(!svg.contains("NaN") && !svg.contains("inf"));
        }
    }

    #[test]
    fn ticks_are_round_numbers() {
        let a = Axis {
            lo: 0.0,
            hi: 60.0,
            log: false,
            from: 0.0,
            to: 1.0,
        };
        assert_eq!(a.ticks(), vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
        assert_eq!(tick_label(25000.0), "25k");
        assert_eq!(tick_label(0.25), "0.25");
    }
}
