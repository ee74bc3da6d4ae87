//! Column-aligned text tables and the short forms used in them (ages, sizes, cores).

use chrono::{DateTime, Utc};
use gpuhub_core::Bytes;
use gpuhub_core::quantity::{GIB, KIB, MIB, TIB};

/// A table of text: a header row and data rows, columns separated by at least two spaces.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<S: AsRef<str>>(header: &[S]) -> Self {
        Self { header: header.iter().map(|h| h.as_ref().to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are blank, extra cells widen the table.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether there are no data rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines, each starting with `indent` and without trailing spaces: `comfy-table` with
    /// no borders, each column but the last followed by two spaces, widths by what a terminal shows.
    pub fn render(&self, indent: &str) -> String {
        let ncols = self.rows.iter().map(Vec::len).chain([self.header.len()]).max().unwrap_or(0);
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::NOTHING).set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        let full = |row: &Vec<String>| (0..ncols).map(|i| row.get(i).cloned().unwrap_or_default()).collect::<Vec<_>>();
        t.set_header(full(&self.header));
        for row in &self.rows {
            t.add_row(full(row));
        }
        for (i, column) in t.column_iter_mut().enumerate() {
            column.set_padding((0, if i + 1 < ncols { 2 } else { 0 }));
        }
        if ncols == 0 {
            return "\n".repeat(1 + self.rows.len());
        }
        let mut out = String::new();
        for line in t.lines() {
            out.push_str(format!("{indent}{line}").trim_end());
            out.push('\n');
        }
        out
    }
}

/// How long ago `then` was, in its largest whole unit: `5s`, `3m`, `2h`, `4d`.
/// A JSON value as indented `key: value` lines for people (`gpuhub inspect` without `--json`): nested
/// objects indented under their key, lists of plain values on one line, lists of objects as `-` items;
/// absent (`null`) and empty values left out.
pub fn outline(v: &serde_json::Value) -> String {
    let mut s = String::new();
    outline_into(&mut s, v, 0);
    s
}

fn plain(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(t) => Some(t.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.values().all(empty),
        _ => false,
    }
}

fn outline_into(s: &mut String, v: &serde_json::Value, indent: usize) {
    use serde_json::Value;
    let pad = " ".repeat(indent);
    let Value::Object(fields) = v else {
        s.push_str(&format!("{pad}{}\n", plain(v).unwrap_or_default()));
        return;
    };
    // who and what first, then the rest by name
    const FIRST: [&str; 6] = ["name", "owner", "kind", "state", "message", "explanation"];
    let rank = |k: &str| FIRST.iter().position(|f| *f == k).unwrap_or(FIRST.len());
    let mut fields: Vec<(&String, &Value)> = fields.iter().filter(|(_, v)| !empty(v)).collect();
    fields.sort_by_key(|(k, _)| rank(k));
    for (k, v) in fields {
        match v {
            Value::Object(_) => {
                s.push_str(&format!("{pad}{k}:\n"));
                outline_into(s, v, indent + 2);
            }
            Value::Array(items) if items.iter().all(|i| plain(i).is_some()) => {
                let list: Vec<String> = items.iter().filter_map(plain).collect();
                s.push_str(&format!("{pad}{k}: {}\n", list.join(", ")));
            }
            Value::Array(items) => {
                s.push_str(&format!("{pad}{k}:\n"));
                for item in items {
                    let mut inner = String::new();
                    outline_into(&mut inner, item, indent + 4);
                    // the item's first line carries its dash
                    let body = inner.get(indent + 4..).unwrap_or("");
                    s.push_str(&format!("{pad}  - {body}"));
                }
            }
            _ => s.push_str(&format!("{pad}{k}: {}\n", plain(v).unwrap_or_default())),
        }
    }
}

pub fn age(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `s` cut to at most `max` characters, ending in `…` when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// A size for a table: exact binary units where they are (`4GiB`), else one decimal (`1.5GiB`).
pub fn size(b: Bytes) -> String {
    let exact = b.to_string();
    if !exact.contains('.') && (b.0 < KIB || exact.ends_with("iB")) {
        return exact;
    }
    for (unit, factor) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if b.0 >= factor {
            return format!("{:.1}{unit}", b.0 as f64 / factor as f64);
        }
    }
    format!("{}B", b.0)
}

/// A number of cores without needless decimals: `4`, `0.5`, `1.25`.
pub fn cores(c: f64) -> String {
    let s = format!("{:.3}", c.max(0.0));
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// Newcomer review: `inspect` printed only JSON; people get indented lines, nothing absent shown.
    #[test]
    fn a_workload_outlines_as_indented_lines() {
        let v = serde_json::json!({
            "name": "train", "state": "queued", "exit_code": null, "command": ["python", "t.py"], "env": {},
            "explanation": {"reason": "Resources", "position": 2},
            "history": [{"state": "queued", "at": "2026-11-26T10:00:00Z"}, {"state": "running"}],
        });
        assert_eq!(
            outline(&v),
            "name: train\nstate: queued\nexplanation:\n  position: 2\n  reason: Resources\ncommand: python, t.py\n\
             history:\n  - state: queued\n    at: 2026-11-26T10:00:00Z\n  - state: running\n"
        );
    }

    #[test]
    fn renders_aligned_columns() {
        let mut t = Table::new(&["NAME", "STATE", "GPUS"]);
        t.row(vec!["train-long-name".into(), "running".into(), "2".into()]);
        t.row(vec!["x".into(), "queued".into(), "0".into()]);
        assert_eq!(
            t.render(""),
            "NAME             STATE    GPUS\n\
             train-long-name  running  2\n\
             x                queued   0\n"
        );
    }

    #[test]
    fn renders_indent_blanks_and_unicode() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["é…".into(), String::new()]);
        t.row(vec!["z".into()]);
        assert_eq!(t.render("  "), "  A   B\n  é…\n  z\n");
        assert!(Table::new(&["A"]).is_empty());
        assert_eq!(Table::new(&["ONLY"]).render(""), "ONLY\n");
        let mut blank = Table::new(&["A", "B"]);
        blank.row(vec![String::new(), String::new()]);
        assert_eq!(blank.render("  "), "  A  B\n\n", "a blank line keeps no indent");
        assert_eq!(Table::new::<&str>(&[]).render("  "), "\n");
    }

    #[test]
    fn wide_characters_are_aligned_by_the_width_a_terminal_shows() {
        let mut t = Table::new(&["NAME", "STATE"]);
        t.row(vec!["訓練".into(), "running".into()]);
        t.row(vec!["abcd".into(), "queued".into()]);
        assert_eq!(t.render(""), "NAME  STATE\n訓練  running\nabcd  queued\n");
    }

    #[test]
    fn ages() {
        let t0 = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
        let at = |s: i64| age(t0, t0 + chrono::Duration::seconds(s));
        assert_eq!(at(0), "0s");
        assert_eq!(at(5), "5s");
        assert_eq!(at(59), "59s");
        assert_eq!(at(60), "1m");
        assert_eq!(at(3 * 60 + 59), "3m");
        assert_eq!(at(2 * 3600 + 5), "2h");
        assert_eq!(at(4 * 86_400 + 7), "4d");
        assert_eq!(at(-30), "0s", "clock skew shows as now");
    }

    #[test]
    fn truncation() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("0123456789abc", 10), "012345678…");
        assert_eq!(truncate("ééééé", 3), "éé…");
    }

    #[test]
    fn sizes_and_cores() {
        assert_eq!(size(Bytes(4 * GIB)), "4GiB");
        assert_eq!(size(Bytes(1536 * MIB)), "1.5GiB");
        assert_eq!(size(Bytes(3 * GIB / 2 + 1)), "1.5GiB");
        assert_eq!(size(Bytes(123_456_789)), "117.7MiB");
        assert_eq!(size(Bytes(1000)), "1000B");
        assert_eq!(size(Bytes(0)), "0B");
        assert_eq!(cores(4.0), "4");
        assert_eq!(cores(0.5), "0.5");
        assert_eq!(cores(1.25), "1.25");
        assert_eq!(cores(-0.0001), "0");
    }
}
