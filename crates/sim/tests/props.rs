//! Property tests of the trace-file parsers (Philly CSV, Alibaba pod and node CSVs): arbitrary text
//! and CSV-like text with hostile cells either reads or fails with a typed error, never a panic; what
//! reads keeps the rows' promises (positive GPU counts, finite non-negative durations, sorted jobs).
//!
//! The case count is small by default so CI stays fast; `PROPTEST_CASES=100000` runs more.

use gpuhub_sim::SimError;
use gpuhub_sim::trace::{parse_time, read_nodes, read_philly, read_pods};
use proptest::prelude::*;
use std::path::Path;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A cell that troubles number and time parsers.
fn cell() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,6}",
        "-?[0-9]{1,22}(\\.[0-9]{0,3})?",
        prop::sample::select(vec![
            "",
            "NaN",
            "inf",
            "-inf",
            "1e400",
            "-0",
            "0",
            "18446744073709551616",
            "4294967296",
            "2017-10-09 07:01:55",
            "2017-13-45 99:99:99",
            "9999999-01-01 00:00:00",
            "A100|V100",
            "\"quoted,comma\"",
            "\"",
            "\u{202e}",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,8}",
    ]
}

fn csv(header: &str, rows: Vec<Vec<String>>) -> String {
    let mut out = format!("{header}\n");
    for r in rows {
        out.push_str(&r.join(","));
        out.push('\n');
    }
    out
}

fn with_file<T>(text: &str, read: impl Fn(&Path) -> Result<T, SimError>) -> Result<T, SimError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    std::fs::write(&path, text).unwrap();
    read(&path)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_reads_or_fails_cleanly(text in "\\PC{0,200}") {
        for header in ["", "timestamp,duration,num_gpus,cluster\n", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "sn,cpu_milli,memory_mib,gpu,model\n"] {
            let t = format!("{header}{text}");
            let _ = with_file(&t, read_philly);
            let _ = with_file(&t, read_pods);
            let _ = with_file(&t, read_nodes);
        }
    }

    #[test]
    fn philly_rows_read_or_fail_cleanly(rows in prop::collection::vec(prop::collection::vec(cell(), 3..6), 0..6)) {
        let text = csv("timestamp,duration,num_gpus,cluster", rows);
        if let Ok(jobs) = with_file(&text, read_philly) {
            prop_assert!(!jobs.is_empty());
            prop_assert!(jobs.iter().all(|j| j.gpus > 0 && j.duration_s.is_finite() && j.duration_s >= 0.0));
            prop_assert!(jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        }
    }

    #[test]
    fn alibaba_rows_read_or_fail_cleanly(
        pods in prop::collection::vec(prop::collection::vec(cell(), 4..7), 0..6),
        nodes in prop::collection::vec(prop::collection::vec(cell(), 4..6), 0..6),
    ) {
        let _ = with_file(&csv("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec", pods), read_pods);
        if let Ok(cluster) = with_file(&csv("sn,cpu_milli,memory_mib,gpu,model", nodes), read_nodes) {
            prop_assert!(!cluster.nodes.is_empty());
            prop_assert!(cluster.nodes.iter().all(|n| n.gpus.len() <= 1024));
        }
    }

    #[test]
    fn times_parse_or_are_none(s in prop_oneof!["\\PC{0,24}", "[0-9]{1,9}-[0-9]{1,3}-[0-9]{1,3}[ T][0-9]{1,3}:[0-9]{1,3}:[0-9.]{1,6}Z?"]) {
        let _ = parse_time(&s);
    }
}
