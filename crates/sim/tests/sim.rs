//! The simulator on small committed fixtures (no shared traces needed).

use gpuhub_sim::replay::ReplayArgs;
use gpuhub_sim::throughput::ThroughputArgs;
use gpuhub_sim::{FgdArgs, SimError, fgd_report, parse_seeds};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn fgd_args(pods: &str) -> FgdArgs {
    FgdArgs {
        nodes: fixture("nodes.csv"),
        pods: fixture(pods),
        tune: 1.3,
        seeds: "1-3".into(),
        policy: "all".into(),
        json: true,
        plot: None,
    }
}

#[test]
fn fgd_json_has_one_object_per_policy() {
    for pods in ["pods.csv", "pods_5col.csv"] {
        let out = fgd_report(&fgd_args(pods)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 6);
        let defaults: Vec<&str> =
            arr.iter().filter(|o| o["default"] == true).map(|o| o["policy"].as_str().unwrap()).collect();
        assert_eq!(defaults, ["auto"]);
        for o in arr {
            let a = o["alloc_at_100"].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&a), "{o}");
            assert_eq!(o["seeds"].as_array().unwrap().len(), 3);
            let curve = o["curve"].as_array().unwrap();
            assert!(curve.len() > 100, "the curve reaches past 100% arrived demand");
            assert_eq!(curve[100][0].as_f64(), Some(100.0));
            assert!(o["workload"].as_str().unwrap().starts_with("pods"));
        }
    }
}

#[test]
fn fgd_is_deterministic_and_plots() {
    let mut a = fgd_args("pods.csv");
    a.policy = "auto,bestfit".into();
    let strip = |s: String| {
        let mut v: serde_json::Value = serde_json::from_str(&s).unwrap();
        for o in v.as_array_mut().unwrap() {
            o.as_object_mut().unwrap().remove("seconds");
        }
        v
    };
    assert_eq!(strip(fgd_report(&a).unwrap()), strip(fgd_report(&a).unwrap()));
    let dir = tempfile::tempdir().unwrap();
    a.plot = Some(dir.path().join("fgd.svg"));
    a.json = false;
    let text = fgd_report(&a).unwrap();
    assert!(text.contains("auto") && text.contains("(default)"), "{text}");
    let svg = std::fs::read_to_string(dir.path().join("fgd.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("bestfit"));
}

#[test]
fn errors_name_file_line_and_field() {
    let mut a = fgd_args("pods.csv");
    a.nodes = fixture("nodes_bad_cpu.csv");
    let e = fgd_report(&a).unwrap_err();
    assert!(matches!(&e, SimError::Parse { line: 3, field, .. } if field == "cpu_milli"), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("nodes_bad_cpu.csv:3: field `cpu_milli`"), "{msg}");

    let e = fgd_report(&fgd_args("pods_bad_milli.csv")).unwrap_err().to_string();
    assert!(e.contains("pods_bad_milli.csv:3: field `gpu_milli`") && e.contains("1500"), "{e}");
    let e = fgd_report(&fgd_args("pods_missing_column.csv")).unwrap_err().to_string();
    assert!(e.contains("pods_missing_column.csv") && e.contains("missing column `gpu_milli`"), "{e}");
    let e = fgd_report(&fgd_args("no_such_file.csv")).unwrap_err().to_string();
    assert!(e.contains("no_such_file.csv"), "{e}");

    let mut r = replay_args("philly_bad_time.csv");
    let e = gpuhub_sim::replay::report(&r).unwrap_err().to_string();
    assert!(e.contains("philly_bad_time.csv:3: field `timestamp`"), "{e}");
    r.trace = fixture("philly_bad_gpus.csv");
    let e = gpuhub_sim::replay::report(&r).unwrap_err().to_string();
    assert!(e.contains("philly_bad_gpus.csv:2: field `num_gpus`"), "{e}");
}

#[test]
fn bad_arguments_are_named() {
    assert_eq!(parse_seeds("42-44").unwrap(), vec![42, 43, 44]);
    assert_eq!(parse_seeds("1,5").unwrap(), vec![1, 5]);
    assert!(parse_seeds("9-1").unwrap_err().to_string().contains("--seeds"));
    let mut a = fgd_args("pods.csv");
    a.policy = "worstfit".into();
    let e = fgd_report(&a).unwrap_err().to_string();
    assert!(e.contains("--policy") && e.contains("worstfit"), "{e}");
    a.policy = "all".into();
    a.tune = -1.0;
    assert!(fgd_report(&a).unwrap_err().to_string().contains("--tune"));
    let mut r = replay_args("philly_small.csv");
    r.policy = "lifo".into();
    assert!(gpuhub_sim::replay::report(&r).unwrap_err().to_string().contains("--policy"));
}

fn replay_args(trace: &str) -> ReplayArgs {
    ReplayArgs {
        trace: fixture(trace),
        nodes: 2,
        gpus_per_node: 8,
        policy: "fifo,fifo-backfill,auto".into(),
        rate: 1.0,
        sample: 1.0,
        tick_s: 10,
        seed: 1,
        placement_seed: 0,
        json: true,
        plot: None,
        threads: None,
        why_starved: None,
    }
}

#[test]
fn replay_reports_every_policy() {
    let out = gpuhub_sim::replay::report(&replay_args("philly_small.csv")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let arr = v.as_array().unwrap();
    let names: Vec<&str> = arr.iter().map(|o| o["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["fifo", "fifo-backfill", "auto"]);
    for o in arr {
        for k in ["jobs", "mean_jct_s", "p95_jct_s", "mean_queue_s", "makespan_s"] {
            assert!(o[k].is_number(), "{k} in {o}");
        }
        // 16-GPU jobs are gangs of two 8-GPU members on this 2-node cluster; every job finishes
        assert_eq!(o["jobs"].as_u64(), Some(60));
        assert!(o["mean_jct_s"].as_f64().unwrap() >= o["mean_queue_s"].as_f64().unwrap());
    }
    assert_eq!(arr[2]["default"], true);
    let fifo = arr[0]["mean_queue_s"].as_f64().unwrap();
    let backfill = arr[1]["mean_queue_s"].as_f64().unwrap();
    assert!(backfill <= fifo, "backfill {backfill} vs fifo {fifo}");
    let mut text = replay_args("philly_small.csv");
    text.json = false;
    let dir = tempfile::tempdir().unwrap();
    text.plot = Some(dir.path().join("alloc.svg"));
    let s = gpuhub_sim::replay::report(&text).unwrap();
    assert!(s.contains("per team") && s.contains("aa11"), "{s}");
    assert!(dir.path().join("alloc.svg").exists());
}

#[test]
fn throughput_runs_small() {
    let a = ThroughputArgs { nodes: 20, gpus_per_node: 4, pending: 50, policy: "all".into(), seed: 3, json: true };
    let out = gpuhub_sim::throughput::report(&a).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for o in v.as_array().unwrap() {
        assert!(o["placements_per_sec"].as_f64().unwrap() > 0.0);
        assert!(o["p99_decision_ms"].is_number());
        assert!(o["default"].is_boolean());
    }
}

/// Replaying the disciplines on threads changes nothing but the time taken: the same reports, in the
/// order of `--policy`.
#[test]
fn threads_change_no_figure() {
    let run = |threads: usize| {
        let mut a = replay_args("philly_small.csv");
        a.policy = "fgd+,fifo,bestfit,fifo-backfill".into();
        a.threads = Some(threads);
        let mut v: serde_json::Value = serde_json::from_str(&gpuhub_sim::replay::report(&a).unwrap()).unwrap();
        for o in v.as_array_mut().unwrap() {
            o.as_object_mut().unwrap().remove("seconds");
        }
        v
    };
    let one = run(1);
    let names: Vec<&str> = one.as_array().unwrap().iter().map(|o| o["policy"].as_str().unwrap()).collect();
    assert_eq!(names, ["fgd+", "fifo", "bestfit", "fifo-backfill"]);
    assert_eq!(run(3), one);
}

/// The default adapts to the trace: on the whole-GPU Philly jobs it spreads, except while a team below
/// its guarantee waits for more GPUs than any node has free (then it packs), so its figures are neither
/// `spread`'s nor `bestfit`'s; on the Alibaba-format tasks that all ask for GPU shares it places as
/// `fgd+` (the same figures).
#[test]
fn the_default_mixes_spread_and_packing_on_whole_gpus_and_is_fgd_plus_with_shares() {
    let figures = |policy: &str| {
        let mut a = replay_args("philly_small.csv");
        a.policy = policy.into();
        let mut v: serde_json::Value = serde_json::from_str(&gpuhub_sim::replay::report(&a).unwrap()).unwrap();
        let o = v[0].as_object_mut().unwrap();
        for k in ["policy", "default", "seconds"] {
            o.remove(k);
        }
        v
    };
    let auto = figures("auto");
    assert_ne!(auto, figures("spread"), "the fixture has a team below its guarantee waiting for a whole node");
    assert_ne!(auto, figures("bestfit"), "and times when none does");
    // every GPU task a share: the same placements as fgd+ from the first task on
    let fgd = |policy: &str| {
        let mut a = fgd_args("pods_shares.csv");
        a.policy = policy.into();
        let mut v: serde_json::Value = serde_json::from_str(&fgd_report(&a).unwrap()).unwrap();
        let o = v[0].as_object_mut().unwrap();
        for k in ["policy", "default", "seconds"] {
            o.remove(k);
        }
        v
    };
    assert_eq!(fgd("auto"), fgd("fgd+"));
    assert_ne!(fgd("auto"), fgd("spread"), "the fixture tells fragmentation descent from spreading");
}

/// `--why-starved TEAM` accounts for the team's starvation beyond grace outside the brackets, by cause.
/// Team xx (guarantee 4 of 16 GPUs) runs six 1-GPU jobs, three on each node: it borrows 2. Team bb
/// (guarantee 11) then waits with an 8-GPU job. Stopping all of xx's work would free a node (so the
/// hours are outside the brackets), but preemption takes a borrower's work only down to its guarantee:
/// two jobs, and a node needs three gone. So bb waits until xx's jobs end, and the account says why.
#[test]
fn why_starved_accounts_for_every_hour_outside_the_brackets() {
    let mut a = replay_args("philly_why.csv");
    a.policy = "auto".into();
    let plain: serde_json::Value = serde_json::from_str(&gpuhub_sim::replay::report(&a).unwrap()).unwrap();
    assert!(plain[0].get("why_starved").is_none(), "only when asked");
    a.why_starved = Some("bb".into());
    let v: serde_json::Value = serde_json::from_str(&gpuhub_sim::replay::report(&a).unwrap()).unwrap();
    let o = &v[0];
    let bb = o["teams"].as_array().unwrap().iter().find(|t| t["team"] == "bb").unwrap();
    assert_eq!(bb["guarantee_gpus"].as_f64(), Some(11.0));
    let outside =
        bb["starved_beyond_grace_hours"].as_f64().unwrap() - bb["blocked_by_guaranteed_hours"].as_f64().unwrap();
    // from 60 s (its submit) plus 40 s of grace to 10,000 s, when xx's jobs end
    assert!((outside - 9_900.0 / 3600.0).abs() < 0.01, "{outside} h outside the brackets: {bb}");
    let w = &o["why_starved"];
    assert_eq!(w["team"], "bb");
    assert_eq!(w["disagreements"], 0);
    let causes = w["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0][0], "borrowers' excess cannot make room (guaranteed work in the way)");
    assert!((causes[0][1].as_f64().unwrap() - outside).abs() < 1e-9, "{causes:?}");
    let stretches = w["stretches"].as_array().unwrap();
    assert_eq!(stretches.len(), 1);
    assert!(stretches[0]["detail"].as_str().unwrap().contains("8 GPUs: waiting for 8 free GPU(s)"), "{stretches:?}");
    a.json = false;
    let text = gpuhub_sim::replay::report(&a).unwrap();
    assert!(text.contains("why bb starved beyond grace outside the brackets, auto"), "{text}");
}
