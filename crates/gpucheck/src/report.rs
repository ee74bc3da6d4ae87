//! What gpu-check found: a header (date, host, GPUs, driver, CUDA) and one [`Row`] per check, printed
//! as a table (check, expected, seen, ok) or as JSON.

use serde::Serialize;
use std::fmt::Write as _;

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// What was checked (`gpu0 cuda load`).
    pub check: String,
    /// What passing looks like.
    pub expected: String,
    /// What was seen.
    pub seen: String,
    /// Whether it passed.
    pub ok: bool,
}

impl Row {
    /// A row.
    pub fn new(check: impl Into<String>, expected: impl Into<String>, seen: impl Into<String>, ok: bool) -> Self {
        Self { check: check.into(), expected: expected.into(), seen: seen.into(), ok }
    }
}

/// One GPU as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    /// NVML's index.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// `NVIDIA H200`.
    pub model: String,
    /// Its memory, bytes.
    pub memory: u64,
    /// MIG mode: `Some(true)` enabled, `None` where the GPU has no MIG.
    pub mig: Option<bool>,
}

/// The whole outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// When it ran (RFC 3339, UTC).
    pub date: String,
    /// This host's name.
    pub host: String,
    /// The driver's version.
    pub driver: String,
    /// The newest CUDA the driver supports (`13.0`), where NVML says.
    pub cuda: Option<String>,
    /// The GPUs.
    pub gpus: Vec<GpuInfo>,
    /// The checks, in the order they ran.
    pub rows: Vec<Row>,
    /// Whether every check passed.
    pub ok: bool,
}

impl Report {
    /// The exit code: 0 when every check passed, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        if self.ok { 0 } else { 1 }
    }

    /// The header line: `gpu-check 2026-11-26T04:00:00Z on gpu1: 1× NVIDIA H200, driver 580.95.05, CUDA 13.0`.
    pub fn header(&self) -> String {
        let mut models: Vec<(String, usize)> = Vec::new();
        for g in &self.gpus {
            match models.iter_mut().find(|(m, _)| *m == g.model) {
                Some((_, n)) => *n += 1,
                None => models.push((g.model.clone(), 1)),
            }
        }
        let models: Vec<String> = models.into_iter().map(|(m, n)| format!("{n}× {m}")).collect();
        format!(
            "gpu-check {} on {}: {}, driver {}, CUDA {}",
            self.date,
            self.host,
            models.join(", "),
            self.driver,
            self.cuda.as_deref().unwrap_or("unknown")
        )
    }

    /// The header, the table and a closing line.
    pub fn table(&self) -> String {
        let heads = ["check", "expected", "seen", "ok"];
        let cells: Vec<[String; 4]> = self
            .rows
            .iter()
            .map(|r| [r.check.clone(), r.expected.clone(), r.seen.clone(), if r.ok { "ok" } else { "FAIL" }.into()])
            .collect();
        let mut widths = heads.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = format!("{}\n\n", self.header());
        let line = |out: &mut String, row: [&str; 4]| {
            let mut s = String::new();
            for (i, (c, w)) in row.iter().zip(widths).enumerate() {
                if i == 3 {
                    s.push_str(c);
                } else {
                    let _ = write!(s, "{c:<w$}  ");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&mut out, heads);
        for row in &cells {
            line(&mut out, [row[0].as_str(), row[1].as_str(), row[2].as_str(), row[3].as_str()]);
        }
        let failed = self.rows.iter().filter(|r| !r.ok).count();
        let _ = write!(
            out,
            "\n{} of {} checks passed{}\n",
            self.rows.len() - failed,
            self.rows.len(),
            if failed == 0 { String::new() } else { format!("; {failed} failed") }
        );
        out
    }

    /// The report as one JSON document.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Bytes as MiB (rounded down) for the table.
pub fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

/// Bytes as GiB with one decimal for the table.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rows: Vec<Row>) -> Report {
        let ok = rows.iter().all(|r| r.ok);
        Report {
            date: "2026-11-26T04:00:00Z".into(),
            host: "gpu1".into(),
            driver: "580.95.05".into(),
            cuda: Some("13.0".into()),
            gpus: vec![
                GpuInfo { index: 0, uuid: "GPU-a".into(), model: "NVIDIA H200".into(), memory: 1, mig: Some(false) },
                GpuInfo { index: 1, uuid: "GPU-b".into(), model: "NVIDIA H200".into(), memory: 1, mig: None },
            ],
            rows,
            ok,
        }
    }

    #[test]
    fn a_table_with_a_header_and_a_closing_line() {
        let r = report(vec![
            Row::new("gpu0 cuda load", "2048 MiB allocated", "2048 MiB allocated; 132 SMs", true),
            Row::new("gpu0 mps limit", "3072 MiB refused", "allocated", false),
        ]);
        assert_eq!(
            r.table(),
            "gpu-check 2026-11-26T04:00:00Z on gpu1: 2× NVIDIA H200, driver 580.95.05, CUDA 13.0\n\n\
             check           expected            seen                         ok\n\
             gpu0 cuda load  2048 MiB allocated  2048 MiB allocated; 132 SMs  ok\n\
             gpu0 mps limit  3072 MiB refused    allocated                    FAIL\n\
             \n1 of 2 checks passed; 1 failed\n"
        );
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn all_passed_exits_0_and_the_json_has_every_row() {
        let r = report(vec![Row::new("gpu0 inventory", "a", "b", true)]);
        assert_eq!(r.exit_code(), 0);
        assert!(r.table().ends_with("\n1 of 1 checks passed\n"));
        let v: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["rows"][0]["check"], "gpu0 inventory");
        assert_eq!(v["gpus"][1]["mig"], serde_json::Value::Null);
        assert_eq!(v["cuda"], "13.0");
    }

    #[test]
    fn mib_rounds_down() {
        assert_eq!(mib(3 << 20), "3 MiB");
        assert_eq!(mib((3 << 20) - 1), "2 MiB");
        assert_eq!(gib(150_000 << 20), "146.5 GiB");
    }
}
