//! The data directory's disk full: a 4 MiB tmpfs is the hub's data dir (SQLite database, logs, homes)
//! and is filled. Writes are refused with 507 naming the data directory, never a panic, hang or 500; a
//! job that ends meanwhile (its log archive failing with ENOSPC) is recorded once there is room again;
//! the database is intact afterwards.

use crate::common::{ADMIN_PASSWORD, Hub, config, node};
use gpuhub_driver::fake::FakeEngine;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::Connection;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

/// A tmpfs mounted on a temp dir, unmounted (lazily, so even a failing test leaves none) when dropped.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::create_dir(&path).unwrap();
        let ok =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&path).status();
        assert!(ok.is_ok_and(|s| s.success()), "cannot mount a tmpfs on {}", path.display());
        Tmpfs { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes `path` until the disk is full; returns how many bytes fit.
fn fill(path: &std::path::Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 16 << 10];
    let mut written = 0;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    written
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

#[tokio::test]
async fn data_dir_full_refuses_writes_with_507_and_recovers_intact() {
    if !is_root() {
        println!("SKIPPED: data_dir_full_refuses_writes_with_507_and_recovers_intact mounts a tmpfs and needs root");
        return;
    }
    let disk = Tmpfs::mount("4m");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.data_dir = disk.path.clone();
    cfg.reconcile_secs = 1;
    // the writer's archive, retried once there is room, stops at 1 MiB: unbounded, it would fill the
    // freed room again and leave none for SQLite's shared-memory file when the database is reopened
    cfg.log_max_bytes = gpuhub_core::Bytes(1 << 20);
    let fake = Arc::new(FakeEngine::new().with_nodes(vec![node(2)]));
    let mut hub = Hub::start_on(dir, cfg, fake.clone()).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, crate::common::job("writer", 0)).await;
    hub.wait_state(&alice, "writer", "running").await;
    let writer = hub.run(&alice, "writer").await;
    fake.push_filler(&writer, 100_000); // several MiB of output: its archive cannot fit

    let filler = disk.path.join("filler");
    let fitted = fill(&filler);
    println!("filled the data dir with {fitted} bytes");
    // the job ends while the disk is full: archiving its log hits ENOSPC
    fake.exit(&writer, 0);

    let data_dir = std::fs::canonicalize(&disk.path).unwrap().display().to_string();
    let pad = "x".repeat(60_000);
    let mut refused = None;
    for i in 0..100 {
        let body = json!({"name": format!("pad{i}"), "kind": "job", "image": "busybox:latest", "command": ["true"],
            "env": {"PAD": pad}, "resources": {"cpus": 0.1, "memory": "8MiB", "gpus": 0}});
        let (s, v) = hub.call(reqwest::Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
        match s {
            StatusCode::CREATED => continue,
            StatusCode::INSUFFICIENT_STORAGE => {
                refused = Some((i, v));
                break;
            }
            other => panic!("submission {i} on a full disk: {other} {v}"),
        }
    }
    let (i, v) = refused.expect("a full data dir refuses submissions");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains(&data_dir), "the 507 names the data dir: {detail}");
    println!("submission {i} on the full disk: 507 {detail}");
    // reads still work, and the server did not go away
    let (s, v) = hub.call(reqwest::Method::GET, "/api/v1/workloads?limit=1", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    std::fs::remove_file(&filler).unwrap();
    // with room again: the exit recorded (by the event or the next reconciliation), new work accepted
    let v = hub.wait_for(&alice, "writer", 20, |v| v["state"] == "succeeded").await;
    assert_eq!(v["exit_code"], 0, "{v}");
    // a 503 says "retry shortly" (the database busy while it recovers), and a client does so
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let body = crate::common::job("after", 0);
        let (s, v) = hub.call(reqwest::Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
        match s {
            StatusCode::CREATED => break,
            StatusCode::SERVICE_UNAVAILABLE if tokio::time::Instant::now() < deadline => {
                println!("new work after the disk was freed: 503 {v}; retrying");
                let mut changes = hub.server.as_ref().unwrap().state.controller.changes();
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), changes.recv()).await;
            }
            other => panic!("new work after the disk was freed: {other} {v}"),
        }
    }
    hub.wait_state(&alice, "after", "running").await;

    hub.server.take().unwrap().shutdown().await;
    for e in std::fs::read_dir(&disk.path).unwrap().flatten() {
        println!("left in the data dir: {} {} bytes", e.path().display(), e.metadata().map(|m| m.len()).unwrap_or(0));
    }
    let url = format!("sqlite://{}", disk.path.join("gpuhub.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.unwrap();
    assert_eq!(check, "ok");
    conn.close().await.unwrap();
    drop(hub);
}
