//! The portal's charts: server-side SVG drawn by `plotters` (no script, no geometry of our own), put
//! into the page as it is (plotters escapes every text and attribute it writes) with an HTML legend.
//! Every chart is drawn from the same numbers the page's table beside it shows, so the table is the
//! chart's fallback (and what tests read).

use chrono::{DateTime, DurationRound, Utc};
use maud::{Markup, PreEscaped, html};
use plotters::prelude::*;

/// Width and height of a line chart, pixels (the page scales it to fit; two side by side on a wide
/// screen), and its labels' size.
const LINE_SIZE: ((u32, u32), u32) = ((600, 300), 18);
/// The same for a bar chart (one across the page).
const BAR_SIZE: ((u32, u32), u32) = ((900, 320), 15);
/// The colours of the series, in order (Tableau 10, less its red, kept for events).
const PALETTE: [(u8, u8, u8); 9] = [
    (78, 121, 167),
    (242, 142, 43),
    (89, 161, 79),
    (176, 122, 161),
    (118, 183, 178),
    (237, 201, 72),
    (156, 117, 95),
    (255, 157, 167),
    (186, 176, 172),
];
/// Events on the time axis.
const EVENT: RGBColor = RGBColor(200, 40, 40);
/// Limits and grants (dashed).
const LIMIT: RGBColor = RGBColor(90, 98, 114);

/// A line over time.
#[derive(Debug, Clone)]
pub struct Line {
    /// What it shows (the legend).
    pub label: String,
    /// Its points; a `None` is a gap.
    pub points: Vec<(DateTime<Utc>, Option<f64>)>,
    /// A limit or grant: dashed.
    pub dashed: bool,
}

/// Something that happened at a time, marked on the time axis (a preemption, a restart, a warning).
#[derive(Debug, Clone)]
pub struct Mark {
    /// When.
    pub at: DateTime<Utc>,
    /// What (a word or two).
    pub label: String,
    /// More, for the list beside the chart (what the workload said then).
    pub detail: Option<String>,
}

/// A chart of lines over `from`–`to`.
#[derive(Debug, Clone)]
pub struct TimeChart {
    /// The heading above it.
    pub title: String,
    /// The unit of the values (`%`, `GiB`, `cores`).
    pub unit: String,
    /// Start of the time axis.
    pub from: DateTime<Utc>,
    /// End of the time axis.
    pub to: DateTime<Utc>,
    /// The lines.
    pub lines: Vec<Line>,
    /// The marks.
    pub marks: Vec<Mark>,
    /// The top of the value axis (else the largest value, or 1).
    pub y_max: Option<f64>,
}

/// Stacked bars per time bucket, with a line over them (e.g. GPU-hours held, stacked by user, and used).
#[derive(Debug, Clone)]
pub struct BarChart {
    /// The heading above it.
    pub title: String,
    /// The unit of the values.
    pub unit: String,
    /// The buckets' start and end, in order.
    pub buckets: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    /// Each stack's label and value per bucket.
    pub stacks: Vec<(String, Vec<f64>)>,
    /// A line over the bars: its label and value per bucket.
    pub overlay: Option<(String, Vec<f64>)>,
}

/// The colour of series `i` (the same in the SVG and its legend).
pub fn color(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// The colour of each line: limits grey, the others the palette's in turn.
fn line_colors(lines: &[Line]) -> Vec<RGBColor> {
    let mut next = 0;
    lines
        .iter()
        .map(|l| {
            if l.dashed {
                LIMIT
            } else {
                next += 1;
                color(next - 1)
            }
        })
        .collect()
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// A time axis: positions are units (minutes, hours or days, by the span) since the UTC midnight
/// before its start, so that the ticks plotters chooses (round numbers) fall on round times.
#[derive(Debug, Clone, Copy)]
struct Axis {
    origin: DateTime<Utc>,
    unit_secs: f64,
    span_secs: i64,
}

impl Axis {
    fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> Axis {
        let span_secs = (to - from).num_seconds().max(1);
        let unit_secs = match span_secs {
            s if s <= 900 => 1.0,
            s if s <= 3 * 3600 => 60.0,
            s if s <= 3 * 86_400 => 3600.0,
            _ => 86_400.0,
        };
        let origin = from.duration_trunc(chrono::TimeDelta::days(1)).unwrap_or(from);
        Axis { origin, unit_secs, span_secs }
    }

    fn x(&self, t: DateTime<Utc>) -> f64 {
        (t - self.origin).num_milliseconds() as f64 / 1000.0 / self.unit_secs
    }

    fn label(&self, x: f64) -> String {
        let t = self.origin + chrono::TimeDelta::milliseconds((x * self.unit_secs * 1000.0).round() as i64);
        let format = match self.span_secs {
            s if s <= 900 => "%H:%M:%S",
            s if s <= 2 * 86_400 => "%H:%M",
            _ => "%b %d",
        };
        t.format(format).to_string()
    }
}

/// A value for an axis label, to about three significant digits: `0`, `2.5`, `120`, `0.0012`.
pub fn num(v: f64) -> String {
    let a = v.abs();
    let decimals = match a {
        a if a == 0.0 || a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        a => (2 - a.log10().floor() as i64).clamp(2, 8) as usize,
    };
    let s = format!("{v:.decimals$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s }
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw_time(c: &TimeChart, svg: &mut String) -> DrawResult {
    let axis = Axis::new(c.from, c.to);
    let (x0, x1) = (axis.x(c.from), axis.x(c.to).max(axis.x(c.from) + 1e-6));
    let top = c.y_max.unwrap_or_else(|| {
        let m = c.lines.iter().flat_map(|l| l.points.iter().filter_map(|p| p.1)).fold(0.0, f64::max);
        if m > 0.0 { m * 1.1 } else { 1.0 }
    });
    let root = SVGBackend::with_string(svg, LINE_SIZE.0).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..top)?;
    let xf = move |x: &f64| axis.label(*x);
    let yf = |y: &f64| num(*y);
    chart
        .configure_mesh()
        .x_labels(7)
        .y_labels(5)
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .y_desc(c.unit.as_str())
        .label_style(("sans-serif", LINE_SIZE.1))
        .axis_desc_style(("sans-serif", LINE_SIZE.1))
        .light_line_style(RGBColor(238, 240, 243))
        .draw()?;
    for (l, c0) in c.lines.iter().zip(line_colors(&c.lines)) {
        let style = c0.stroke_width(2);
        // a gap in the points breaks the line
        for run in l.points.split(|p| p.1.is_none()) {
            let pts: Vec<(f64, f64)> =
                run.iter().filter_map(|(t, v)| Some((axis.x(*t).clamp(x0, x1), (*v)?.min(top)))).collect();
            if pts.len() == 1 {
                chart.draw_series(std::iter::once(Circle::new(pts[0], 2, style.filled())))?;
            } else if l.dashed {
                chart.draw_series(DashedLineSeries::new(pts, 6, 4, style))?;
            } else {
                chart.draw_series(LineSeries::new(pts, style))?;
            }
        }
    }
    let red = EVENT;
    for m in &c.marks {
        let x = axis.x(m.at);
        if !(x0..=x1).contains(&x) {
            continue;
        }
        chart.draw_series(DashedLineSeries::new(vec![(x, 0.0), (x, top)], 3, 3, red.stroke_width(1)))?;
        chart.draw_series(std::iter::once(Text::new(
            m.label.clone(),
            (x, top),
            ("sans-serif", LINE_SIZE.1).into_font().color(&red),
        )))?;
    }
    root.present()?;
    Ok(())
}

fn draw_bars(c: &BarChart, svg: &mut String) -> DrawResult {
    let (Some(first), Some(last)) = (c.buckets.first(), c.buckets.last()) else { return Ok(()) };
    let axis = Axis::new(first.0, last.1);
    let totals: Vec<f64> =
        (0..c.buckets.len()).map(|b| c.stacks.iter().map(|(_, v)| v.get(b).copied().unwrap_or(0.0)).sum()).collect();
    let over = c.overlay.iter().flat_map(|(_, v)| v.iter().copied());
    let m = totals.iter().copied().chain(over).fold(0.0, f64::max);
    let top = if m > 0.0 { m * 1.1 } else { 1.0 };
    let root = SVGBackend::with_string(svg, BAR_SIZE.0).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(34)
        .y_label_area_size(70)
        .build_cartesian_2d(axis.x(first.0)..axis.x(last.1), 0.0..top)?;
    let xf = move |x: &f64| axis.label(*x);
    let yf = |y: &f64| num(*y);
    chart
        .configure_mesh()
        .x_labels(7)
        .y_labels(5)
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .y_desc(c.unit.as_str())
        .label_style(("sans-serif", BAR_SIZE.1))
        .axis_desc_style(("sans-serif", BAR_SIZE.1))
        .light_line_style(RGBColor(238, 240, 243))
        .draw()?;
    for (b, (start, end)) in c.buckets.iter().enumerate() {
        let (x0, x1) = (axis.x(*start), axis.x(*end));
        let gap = (x1 - x0) * 0.12;
        let mut base = 0.0;
        for (i, (_, values)) in c.stacks.iter().enumerate() {
            let v = values.get(b).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let rect = Rectangle::new([(x0 + gap, base), (x1 - gap, base + v)], color(i).filled());
            chart.draw_series(std::iter::once(rect))?;
            base += v;
        }
    }
    if let Some((_, values)) = &c.overlay {
        let pts: Vec<(f64, f64)> =
            c.buckets.iter().zip(values).map(|((s, e), v)| ((axis.x(*s) + axis.x(*e)) / 2.0, *v)).collect();
        let style = BLACK.stroke_width(2);
        chart.draw_series(LineSeries::new(pts.clone(), style))?;
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, BLACK.filled())))?;
    }
    root.present()?;
    Ok(())
}

/// The SVG of `draw`, or a line saying why there is none.
fn figure(title: &str, draw: impl FnOnce(&mut String) -> DrawResult, legend: Markup) -> Markup {
    let mut svg = String::new();
    let drawn = draw(&mut svg);
    html! {
        figure.chart {
            figcaption { (title) }
            @match drawn {
                Ok(()) => { div.svg role="img" aria-label=(title) { (PreEscaped(svg)) } }
                Err(e) => { p.error { "the chart could not be drawn: " (e.to_string()) } }
            }
            (legend)
        }
    }
}

/// A legend entry: a swatch of series `i`'s colour (or black) and its label.
fn key(c: RGBColor, label: &str, dashed: bool) -> Markup {
    html! {
        li {
            svg width="18" height="10" aria-hidden="true" {
                line x1="0" y1="5" x2="18" y2="5" stroke=(hex(c)) stroke-width="3"
                    stroke-dasharray=[dashed.then_some("4 3")] {}
            }
            " " (label)
        }
    }
}

/// A line chart over time as a figure: the SVG and its legend.
pub fn time_chart(c: &TimeChart) -> Markup {
    let legend = html! {
        ul.legend {
            @for (l, c0) in c.lines.iter().zip(line_colors(&c.lines)) { (key(c0, &l.label, l.dashed)) }
            @if !c.marks.is_empty() { (key(EVENT, "events", true)) }
        }
    };
    figure(&c.title, |svg| draw_time(c, svg), legend)
}

/// Stacked bars as a figure: the SVG and its legend.
pub fn bar_chart(c: &BarChart) -> Markup {
    let legend = html! {
        ul.legend {
            @for (i, (label, _)) in c.stacks.iter().enumerate() { (key(color(i), label, false)) }
            @if let Some((label, _)) = &c.overlay { (key(BLACK, label, false)) }
        }
    };
    figure(&c.title, |svg| draw_bars(c, svg), legend)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn charts_are_svg_with_their_text_escaped() {
        let c = TimeChart {
            title: "GPU".into(),
            unit: "%".into(),
            from: t("2026-11-01T10:00:00Z"),
            to: t("2026-11-01T11:00:00Z"),
            lines: vec![Line {
                label: "member 0".into(),
                points: vec![
                    (t("2026-11-01T10:00:00Z"), Some(10.0)),
                    (t("2026-11-01T10:10:00Z"), None),
                    (t("2026-11-01T10:20:00Z"), Some(50.0)),
                    (t("2026-11-01T10:30:00Z"), Some(40.0)),
                ],
                dashed: false,
            }],
            marks: vec![Mark { at: t("2026-11-01T10:15:00Z"), label: "<script>".into(), detail: None }],
            y_max: Some(100.0),
        };
        let html = time_chart(&c).into_string();
        assert!(html.contains("<svg"), "{html}");
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains(">\n10:30") && html.contains(">\n10:40"), "round time labels: {html}");
        let b = BarChart {
            title: "GPU-hours".into(),
            unit: "GPU-hours".into(),
            buckets: vec![
                (t("2026-11-01T00:00:00Z"), t("2026-11-02T00:00:00Z")),
                (t("2026-11-02T00:00:00Z"), t("2026-11-03T00:00:00Z")),
            ],
            stacks: vec![("alice".into(), vec![1.0, 2.0]), ("bob".into(), vec![0.0, 3.0])],
            overlay: Some(("used".into(), vec![0.5, 1.0])),
        };
        assert_eq!(
            [num(0.0), num(2.5), num(120.4), num(0.00123), num(15.26)],
            ["0", "2.5", "120", "0.00123", "15.3"].map(String::from)
        );
        let html = bar_chart(&b).into_string();
        assert!(html.contains("<svg") && html.contains("<rect"), "{html}");
        // empty charts draw nothing, without failing
        let empty = BarChart { buckets: vec![], ..b };
        assert!(!bar_chart(&empty).into_string().contains("could not"));
    }
}
