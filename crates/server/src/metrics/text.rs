//! The Prometheus text exposition format, version 0.0.4: for each family a `# HELP` and a `# TYPE`
//! line, then its samples, one a line, `name{label="value",…} value`. Label values escape backslash,
//! double quote and newline; help texts backslash and newline. Families are written whole, one after
//! the other, and a series (name and labels) written twice in a family is written once.
//!
//! Why not `prometheus-client` (0.24.1, tried for issue 22, item 7, with a `Collector` of const metrics, as
//! a document built per scrape from snapshots needs): it is not slower (2,000 gauge samples with three
//! labels: 261 µs, against 681 µs written this file's way, on the shared 2-core machine), but it writes
//! only the OpenMetrics text format, in which a counter family is named without `_total` in its HELP and
//! TYPE lines (`# TYPE gpuhub_guard_warnings counter`), values print as `73.0`, a histogram's `_sum` and
//! `_count` come before its buckets and the document ends in `# EOF`; `Registry::register` appends a `.`
//! to every HELP text; and it writes string label values as given, unescaped: a model `H200 "SXM"` with a
//! newline came out as `modelName="H200 "SXM"` and a broken line, which fails the whole scrape. Keeping
//! the families' names, HELP and this format would mean an escaping wrapper around every label value and
//! the format's differences undone, which is no less code than this file.

use gpuhub_core::histogram::HistogramSnapshot;
use std::collections::HashSet;
use std::fmt::Write as _;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// Observations in buckets (`_bucket{le}`, `_sum`, `_count`).
    Histogram,
    /// A count that only grows (its name ends in `_total`).
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Counter => "counter",
        }
    }
}

/// A document being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts family `name` (its HELP and TYPE lines); its samples follow through the returned writer.
    pub fn family(&mut self, name: &'static str, help: &str, kind: Kind) -> Family<'_> {
        debug_assert!(valid_name(name), "metric name {name:?}");
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        Family { out: &mut self.out, name, seen: HashSet::new() }
    }

    /// The document.
    pub fn finish(self) -> String {
        self.out
    }
}

/// The samples of one family.
#[derive(Debug)]
pub struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
    /// The label sets written so far (a family never repeats a series).
    seen: HashSet<String>,
}

impl Family<'_> {
    /// One sample of a gauge.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        let labels = render_labels(labels, None);
        if self.seen.insert(labels.clone()) {
            let _ = writeln!(self.out, "{}{labels} {}", self.name, number(value));
        }
    }

    /// The buckets, sum and count of one histogram series.
    pub fn histogram(&mut self, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        if !self.seen.insert(render_labels(labels, None)) {
            return;
        }
        for (bound, n) in &h.buckets {
            let le = number(*bound);
            let _ = writeln!(self.out, "{}_bucket{} {n}", self.name, render_labels(labels, Some(&le)));
        }
        let _ = writeln!(self.out, "{}_bucket{} {}", self.name, render_labels(labels, Some("+Inf")), h.count);
        let plain = render_labels(labels, None);
        let _ = writeln!(self.out, "{}_sum{plain} {}", self.name, number(h.sum));
        let _ = writeln!(self.out, "{}_count{plain} {}", self.name, h.count);
    }
}

/// `{a="x",b="y"}` (with `le` last when given), or nothing without labels.
fn render_labels(labels: &[(&str, &str)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().copied().chain(le.map(|le| ("le", le))).enumerate() {
        debug_assert!(valid_name(k) && !k.contains(':'), "label name {k:?}");
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"{}\"", escape_label(v));
    }
    s.push('}');
    s
}

/// A label value: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A help text: `\` → `\\`, newline → `\n`.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as Go's `ParseFloat` reads it: `+Inf`, `-Inf`, `NaN`, or the shortest decimal
/// that reads back the same (`73`, `0.005`, `151397597184`).
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_escape_label_values_and_help_and_never_repeat_a_series() {
        let mut x = Exposition::default();
        let mut f = x.family("demo_value", "a \\ help\nover two lines", Kind::Gauge);
        f.sample(&[("model", "H200 \"SXM\" \\ 141GB\nx"), ("gpu", "0")], 73.0);
        f.sample(&[("model", "H200 \"SXM\" \\ 141GB\nx"), ("gpu", "0")], 74.0);
        f.sample(&[], f64::INFINITY);
        let mut h = x.family("demo_seconds", "durations", Kind::Histogram);
        h.histogram(&[("route", "/x")], &HistogramSnapshot { buckets: vec![(0.005, 1), (1.0, 2)], sum: 0.5, count: 3 });
        assert_eq!(
            x.finish(),
            "# HELP demo_value a \\\\ help\\nover two lines\n\
             # TYPE demo_value gauge\n\
             demo_value{model=\"H200 \\\"SXM\\\" \\\\ 141GB\\nx\",gpu=\"0\"} 73\n\
             demo_value +Inf\n\
             # HELP demo_seconds durations\n\
             # TYPE demo_seconds histogram\n\
             demo_seconds_bucket{route=\"/x\",le=\"0.005\"} 1\n\
             demo_seconds_bucket{route=\"/x\",le=\"1\"} 2\n\
             demo_seconds_bucket{route=\"/x\",le=\"+Inf\"} 3\n\
             demo_seconds_sum{route=\"/x\"} 0.5\n\
             demo_seconds_count{route=\"/x\"} 3\n"
        );
    }

    #[test]
    fn numbers_read_back_as_go_parses_them() {
        assert_eq!(number(73.0), "73");
        assert_eq!(number(0.005), "0.005");
        assert_eq!(number(151_397_597_184.0), "151397597184");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(-1.5), "-1.5");
    }
}
