//! Workload output in bounded memory (issue 12): a workload printing far more than `log_max_bytes` is
//! read while it runs, archived when it ends and read back from the archive (four readers at once), and
//! the server's memory stays flat throughout; the archive is cut at the cap and says so; `tail` and
//! `limit_bytes` read parts of it. This file is its own test binary (one process, one test), so that the
//! process's peak resident set measures the server and its clients alone.

use gpuhub_testkit as common;

use common::*;
use gpuhub_controller::logfile::truncation_note;
use gpuhub_driver::fake::FILLER_LINE;
use reqwest::{Method, StatusCode};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// The cap of the hub under test.
const CAP: u64 = 64 * MIB;
/// What the workload prints: 200 MiB, made by the fake runtime only as it is read.
const OUTPUT: u64 = 200 * MIB;
/// How much the peak resident set may grow in any phase: well under the cap, so that holding the
/// archive (or the output) in memory once fails, and far above what streaming needs (a few chunks).
const HEADROOM: u64 = 40 * MIB;

/// A field of `/proc/self/status` in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().unwrap();
    kib << 10
}

/// Starts a phase of measurement: forgets the peak so far (Linux `clear_refs` 5) and returns the
/// resident set now.
fn start_phase() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak resident set");
    status_bytes("VmRSS:")
}

/// How much the peak resident set rose above `base` since [`start_phase`]; fails beyond [`HEADROOM`].
fn check_phase(what: &str, base: u64) {
    let grew = status_bytes("VmHWM:").saturating_sub(base);
    eprintln!("{what}: resident set {} MiB, peak grew by {} MiB", base >> 20, grew >> 20);
    assert!(grew < HEADROOM, "{what}: peak resident set grew by {} MiB (limit {} MiB)", grew >> 20, HEADROOM >> 20);
}

/// Reads a log response chunk by chunk: its length and its last bytes (at most 4 KiB).
async fn read_log(hub: &Hub, token: &str, query: &str) -> (u64, Vec<u8>) {
    let url = format!("{}/api/v1/workloads/big/logs{query}", hub.url);
    let mut resp = hub.http.get(url).bearer_auth(token).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{query}");
    let (mut n, mut end) = (0u64, Vec::new());
    while let Some(chunk) = resp.chunk().await.unwrap() {
        n += chunk.len() as u64;
        end.extend_from_slice(&chunk);
        if end.len() > 8192 {
            end.drain(..end.len() - 4096);
        }
    }
    (n, end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_output_is_capped_and_streamed_in_bounded_memory() {
    let hub = Hub::start_with(|c| c.log_max_bytes = gpuhub_core::Bytes(CAP)).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let w = hub.submit(&alice, job("big", 0)).await;
    let id = w["id"].as_str().unwrap().to_owned();
    hub.wait_state(&alice, "big", "running").await;
    let cid = hub.run(&alice, "big").await;
    assert_eq!(hub.runtime.spec(&cid).unwrap().log_max_bytes, Some(CAP), "the engine caps the output too");
    hub.runtime.push_filler(&cid, OUTPUT / FILLER_LINE.len() as u64);

    // while it runs: all of it, straight from the runtime
    let base = start_phase();
    let (n, end) = read_log(&hub, &alice, "").await;
    assert_eq!(n, OUTPUT);
    assert!(end.ends_with(FILLER_LINE));
    check_phase("reading the running workload's 200 MiB", base);
    assert_eq!(read_log(&hub, &alice, "?tail=2").await, (128, FILLER_LINE.repeat(2)));
    assert_eq!(read_log(&hub, &alice, "?limit_bytes=100").await, (100, FILLER_LINE.repeat(2)[..100].to_vec()));

    // it ends: the archive is cut at the cap, private, and announced on the change feed
    let path = hub.dir.path().join("data").join("logs").join(format!("{id}.log"));
    let mut changes = hub.server.as_ref().unwrap().state.controller.changes();
    let base = start_phase();
    hub.runtime.exit(&cid, 0);
    tokio::time::timeout(Duration::from_secs(120), async {
        while !path.exists() {
            if let Err(tokio::sync::broadcast::error::RecvError::Closed) = changes.recv().await {
                panic!("the controller is gone");
            }
        }
    })
    .await
    .expect("the log is archived");
    check_phase("archiving 200 MiB of output", base);
    let note = truncation_note(CAP);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), CAP + note.len() as u64, "cut at the cap, plus the note");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);

    // the container is gone: the archive is what is read, by four readers at once
    hub.runtime.vanish(&cid);
    let base = start_phase();
    let reads = futures::future::join_all((0..4).map(|_| read_log(&hub, &alice, ""))).await;
    check_phase("four reads of the 64 MiB archive", base);
    for (n, end) in reads {
        assert_eq!(n, meta.len());
        assert!(end.ends_with(format!("{}{note}", std::str::from_utf8(FILLER_LINE).unwrap()).as_bytes()));
    }
    let last_three = [&FILLER_LINE.repeat(2)[..], note.as_bytes()].concat();
    assert_eq!(read_log(&hub, &alice, "?tail=3").await, (last_three.len() as u64, last_three));
    assert_eq!(read_log(&hub, &alice, "?tail=0").await, (0, vec![]));
    assert_eq!(read_log(&hub, &alice, "?limit_bytes=64").await, (64, FILLER_LINE.to_vec()));
    assert_eq!(read_log(&hub, &alice, "?tail=1&limit_bytes=10").await, (10, note.as_bytes()[..10].to_vec()));

    // bad values are refused, naming the parameter
    for (query, name) in [
        ("tail=-1", "tail"),
        ("tail=many", "tail"),
        ("limit_bytes=0", "limit_bytes"),
        ("limit_bytes=1x", "limit_bytes"),
        ("head=3", "head"),
    ] {
        let (s, v) = hub.call(Method::GET, &format!("/api/v1/workloads/big/logs?{query}"), Some(&alice), None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{query}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(name), "{query}: {v}");
    }
}
