//! The traces' CSV, read with the `csv` crate: columns by header name, errors that name the file, the
//! line and the field.

use crate::SimError;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A CSV file read into memory.
#[derive(Debug)]
pub struct Csv {
    path: PathBuf,
    header: Vec<String>,
    rows: Vec<(usize, Vec<String>)>,
}

/// One row, with its line number, for typed access by column name.
#[derive(Debug)]
pub struct Row<'a> {
    csv: &'a Csv,
    line: usize,
    cells: &'a [String],
}

impl Csv {
    /// Reads `path`; the first line is the header.
    pub fn read(path: &Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::Io { path: path.to_owned(), source: e })?;
        Self::parse(path, &text)
    }

    /// Parses `text` as if read from `path` (with the `csv` crate: quoted fields too, a byte-order mark
    /// and blank lines skipped, cells trimmed).
    pub fn parse(path: &Path, text: &str) -> Result<Self, SimError> {
        let mut reader = csv::ReaderBuilder::new().flexible(true).trim(csv::Trim::All).from_reader(text.as_bytes());
        let bad =
            |line: usize, field: String, reason: String| SimError::Parse { path: path.to_owned(), line, field, reason };
        let header: Vec<String> = match reader.headers() {
            Ok(h) if !h.is_empty() => h.iter().map(|s| s.trim_start_matches('\u{feff}').to_owned()).collect(),
            Ok(_) => {
                return Err(SimError::Format {
                    path: path.to_owned(),
                    reason: "empty file (expected a header line)".into(),
                });
            }
            Err(e) => return Err(SimError::Format { path: path.to_owned(), reason: e.to_string() }),
        };
        let mut rows = Vec::new();
        let mut lines = Lines { text, pos: 0, line: 1 };
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| lines.at(p.byte()));
                bad(line, String::new(), e.to_string())
            })?;
            let line = record.position().map_or(0, |p| lines.at(p.byte()));
            if record.len() > header.len() {
                let field = header.last().cloned().unwrap_or_default();
                let reason = format!("{} values but the header has {} columns", record.len(), header.len());
                return Err(bad(line, field, reason));
            }
            rows.push((line, record.iter().map(str::to_owned).collect()));
        }
        Ok(Csv { path: path.to_owned(), header, rows })
    }

    /// Fails unless every named column is present.
    pub fn require(&self, cols: &[&str]) -> Result<(), SimError> {
        for c in cols {
            if !self.has(c) {
                return Err(SimError::Format {
                    path: self.path.clone(),
                    reason: format!("missing column `{c}` (header: {})", self.header.join(",")),
                });
            }
        }
        Ok(())
    }

    /// Whether the column exists.
    pub fn has(&self, col: &str) -> bool {
        self.header.iter().any(|h| h == col)
    }

    /// The rows.
    pub fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|(line, cells)| Row { csv: self, line: *line, cells })
    }
}

/// Line numbers of records met in order: the newlines before a record are counted from the last one
/// asked for, not from the start (counting from the start made reading the Philly trace quadratic: 65%
/// of a replay's time).
struct Lines<'a> {
    text: &'a str,
    /// A byte offset, and the 1-based line it lies on.
    pos: usize,
    line: usize,
}

impl Lines<'_> {
    /// The 1-based line of the record at byte `at` (the crate's position may be that of blank lines
    /// before it).
    fn at(&mut self, at: u64) -> usize {
        let text = self.text;
        let at = usize::try_from(at).unwrap_or(usize::MAX).min(text.len());
        let start = text[at..].find(|c: char| c != '\n' && c != '\r').map_or(text.len(), |i| at + i);
        if start < self.pos {
            (self.pos, self.line) = (0, 1);
        }
        self.line += text.as_bytes()[self.pos..start].iter().filter(|&&b| b == b'\n').count();
        self.pos = start;
        self.line
    }
}

impl Row<'_> {
    /// The 1-based line number.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The raw text of a column ("" when the column or the cell is missing).
    pub fn str(&self, col: &str) -> &str {
        self.csv.header.iter().position(|h| h == col).and_then(|i| self.cells.get(i)).map_or("", |s| s.as_str())
    }

    /// An error about `col` on this line.
    pub fn error(&self, col: &str, reason: impl Into<String>) -> SimError {
        SimError::Parse { path: self.csv.path.clone(), line: self.line, field: col.to_owned(), reason: reason.into() }
    }

    /// A required value of a column, parsed.
    pub fn get<T: FromStr>(&self, col: &str) -> Result<T, SimError>
    where
        T::Err: std::fmt::Display,
    {
        let s = self.str(col);
        if s.is_empty() {
            return Err(self.error(col, "missing value"));
        }
        s.parse::<T>().map_err(|e| self.error(col, format!("{s:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_column_with_their_lines() {
        let text = "\u{feff}name, gpu\n\na,1\n\"b, quoted\", 2\n";
        let csv = Csv::parse(Path::new("t.csv"), text).unwrap();
        let rows: Vec<_> =
            csv.rows().map(|r| (r.line(), r.str("name").to_owned(), r.get::<u32>("gpu").unwrap())).collect();
        assert_eq!(rows, [(3, "a".to_owned(), 1), (4, "b, quoted".to_owned(), 2)]);
        assert!(csv.require(&["name", "gpu"]).is_ok());
        assert!(csv.require(&["cpu"]).unwrap_err().to_string().contains("missing column `cpu`"));
    }

    #[test]
    fn too_many_values_and_bad_values_name_the_line_and_field() {
        let e = Csv::parse(Path::new("t.csv"), "a,b\n1,2\n1,2,3\n").unwrap_err();
        assert!(matches!(&e, SimError::Parse { line: 3, field, .. } if field == "b"), "{e}");
        let csv = Csv::parse(Path::new("t.csv"), "a\nx\n").unwrap();
        let e = csv.rows().next().unwrap().get::<u32>("a").unwrap_err();
        assert!(matches!(&e, SimError::Parse { line: 2, field, .. } if field == "a"), "{e}");
        assert!(matches!(Csv::parse(Path::new("t.csv"), ""), Err(SimError::Format { .. })));
    }

    #[test]
    fn lines_counted_in_order_match_lines_counted_from_the_start() {
        let mut text = String::from("a,b\n");
        let mut want = Vec::new();
        for i in 0..200 {
            if i % 7 == 0 {
                text += "\n\r\n";
            }
            want.push(text.matches('\n').count() + 1);
            text += &format!("{i},x\n");
        }
        let csv = Csv::parse(Path::new("t.csv"), &text).unwrap();
        assert_eq!(csv.rows().map(|r| r.line()).collect::<Vec<_>>(), want);
        let mut lines = Lines { text: &text, pos: 0, line: 1 };
        assert_eq!(lines.at(text.len() as u64 - 6), want[199]);
        assert_eq!(lines.at(4), want[0], "asked out of order, it counts again from the start");
    }
}
