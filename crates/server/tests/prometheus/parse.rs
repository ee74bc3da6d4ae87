//! A strict reader of Prometheus' text exposition format 0.0.4, to check what `/metrics` writes: every
//! sample line `name{labels} value` with labels quoted and escaped as the format says, every sample
//! after its family's `# TYPE` and with the other samples of that family, no series twice, and every
//! histogram's buckets cumulative up to `+Inf`, which equals its `_count`.

use std::collections::{BTreeMap, HashMap, HashSet};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A whole document, read back.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Family → its TYPE.
    pub types: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// The samples of `name` whose labels include `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
            .collect()
    }

    /// The value of the one sample of `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.find(name, labels);
        assert_eq!(found.len(), 1, "{name}{labels:?}: expected one sample, found {found:#?}");
        found[0].value
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn number(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        v if v.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) => v.parse().ok(),
        _ => None,
    }
}

/// Reads `name{a="x",b="y"} value` (labels optional, an optional timestamp after the value).
fn sample(line: &str) -> Result<Sample, String> {
    let end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..end];
    if !valid_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let close = loop {
            match chars.peek() {
                Some((i, '}')) => break *i,
                None => return Err("unclosed labels".into()),
                _ => {}
            }
            let start = chars.peek().map(|(i, _)| *i).unwrap_or_default();
            let mut key_end = start;
            for (i, c) in chars.by_ref() {
                if c == '=' {
                    key_end = i;
                    break;
                }
            }
            let key = &r[start..key_end];
            if !valid_name(key) || key.contains(':') {
                return Err(format!("bad label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return Err(format!("label {key}: bad escape {other:?}")),
                    },
                    Some('\n') => return Err(format!("label {key}: raw newline")),
                    Some(c) => value.push(c),
                    None => return Err(format!("label {key}: unterminated value")),
                }
            }
            if labels.insert(key.to_owned(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
            if chars.peek().map(|(_, c)| *c) == Some(',') {
                chars.next();
            }
        };
        rest = &r[close + 1..];
    }
    let mut fields = rest.strip_prefix(' ').ok_or("no space before the value")?.split(' ');
    let v = fields.next().ok_or("no value")?;
    let value = number(v).ok_or_else(|| format!("bad value {v:?}"))?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>().map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample { name: name.to_owned(), labels, value })
}

/// The family a sample belongs to: its own name, or a histogram's base name.
fn family_of(name: &str, types: &HashMap<String, String>) -> Option<String> {
    if types.contains_key(name) {
        return Some(name.to_owned());
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|s| name.strip_suffix(s))
        .find(|base| types.get(*base).map(String::as_str) == Some("histogram"))
        .map(str::to_owned)
}

/// Reads a document; panics naming the line that breaks the format.
pub fn parse(text: &str) -> Scrape {
    assert!(text.ends_with('\n'), "the document must end with a newline");
    let mut out = Scrape::default();
    let mut current: Option<String> = None;
    let mut done: HashSet<String> = HashSet::new();
    let mut series: HashSet<(String, BTreeMap<String, String>)> = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if let Some(c) = line.strip_prefix("# ") {
            let mut parts = c.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), _) => assert!(valid_name(name), "line {n}: {line}"),
                (Some("TYPE"), Some(name), Some(kind)) => {
                    assert!(valid_name(name), "line {n}: {line}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                        "line {n}: bad type {kind}"
                    );
                    assert!(out.types.insert(name.to_owned(), kind.to_owned()).is_none(), "line {n}: TYPE twice");
                    if let Some(prev) = current.replace(name.to_owned()) {
                        done.insert(prev);
                    }
                }
                _ => {}
            }
            continue;
        }
        assert!(!line.starts_with('#') && !line.trim().is_empty(), "line {n}: {line:?}");
        let s = sample(line).unwrap_or_else(|e| panic!("line {n}: {e}: {line}"));
        let family = family_of(&s.name, &out.types).unwrap_or_else(|| panic!("line {n}: no TYPE for {}", s.name));
        assert_eq!(current.as_ref(), Some(&family), "line {n}: {} is apart from its family", s.name);
        assert!(!done.contains(&family), "line {n}: family {family} continues after another");
        assert!(series.insert((s.name.clone(), s.labels.clone())), "line {n}: series twice: {line}");
        out.samples.push(s);
    }
    check_histograms(&out);
    out
}

/// A series' labels but `le`, sorted.
type SeriesKey = Vec<(String, String)>;

/// Each histogram series: buckets non-decreasing by `le`, a `+Inf` bucket equal to `_count`, a `_sum`.
fn check_histograms(s: &Scrape) {
    for (family, _) in s.types.iter().filter(|(_, t)| *t == "histogram") {
        let mut by_series: BTreeMap<SeriesKey, Vec<(f64, f64)>> = BTreeMap::new();
        for b in s.samples.iter().filter(|x| x.name == format!("{family}_bucket")) {
            let le = number(b.labels.get("le").unwrap_or_else(|| panic!("{family}_bucket without le")))
                .unwrap_or_else(|| panic!("{family}: bad le"));
            let key = b.labels.iter().filter(|(k, _)| *k != "le").map(|(k, v)| (k.clone(), v.clone())).collect();
            by_series.entry(key).or_default().push((le, b.value));
        }
        for (labels, mut buckets) in by_series {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{family}{labels:?}: buckets not cumulative");
            let last = buckets.last().unwrap();
            assert_eq!(last.0, f64::INFINITY, "{family}{labels:?}: no +Inf bucket");
            let refs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(s.value(&format!("{family}_count"), &refs), last.1, "{family}{labels:?}: +Inf != count");
            assert!(s.value(&format!("{family}_sum"), &refs) >= 0.0);
        }
    }
}

#[test]
fn the_reader_refuses_what_the_format_does_not_allow() {
    let ok = "# HELP a x\n# TYPE a gauge\na{l=\"q\\\"\\\\\\n\"} 1\na 2 1700000000000\n";
    let s = parse(ok);
    assert_eq!(s.value("a", &[("l", "q\"\\\n")]), 1.0);
    for bad in [
        "a 1\n",                                      // no TYPE
        "# TYPE a gauge\na{l=q} 1\n",                 // unquoted
        "# TYPE a gauge\na{l=\"\\t\"} 1\n",           // bad escape
        "# TYPE a gauge\na 1\na 2\n",                 // twice
        "# TYPE a gauge\n# TYPE b gauge\nb 1\na 1\n", // apart
        "# TYPE a gauge\na one\n",                    // value
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 0\nh_count 1\n",
    ] {
        assert!(std::panic::catch_unwind(|| parse(bad)).is_err(), "accepted {bad:?}");
    }
}
