//! A small reader for the traces' plain CSV (no quoting): columns by header name, errors that name the
//! file, the line and the field.

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

    /// Parses `text` as if read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, SimError> {
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let Some((_, head)) = lines.next() else {
            return Err(SimError::Format {
                path: path.to_owned(),
                reason: "empty file (expected a header line)".into(),
            });
        };
        let header: Vec<String> = head.trim_start_matches('\u{feff}').split(',').map(|s| s.trim().to_owned()).collect();
        let mut rows = Vec::new();
        for (i, l) in lines {
            let cells: Vec<String> = l.split(',').map(|s| s.trim().to_owned()).collect();
            if cells.len() > header.len() {
                return Err(SimError::Parse {
                    path: path.to_owned(),
                    line: i + 1,
                    field: header.last().cloned().unwrap_or_default(),
                    reason: format!("{} values but the header has {} columns", cells.len(), header.len()),
                });
            }
            rows.push((i + 1, cells));
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
