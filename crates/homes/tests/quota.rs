//! The quota backends on real filesystems: ext4 images loop-mounted, and XFS project quotas on an XFS
//! filesystem this test makes (itself a loop-mounted image), unmounted by the kit when a test ends. Needs
//! root, e2fsprogs and xfsprogs.

use gpuhub_homes::{HomeError, Homes, LoopHomes, XfsHomes};
use gpuhub_testkit::mounts::UnmountOnDrop;
use std::io::Write;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?} failed");
}

/// Writes `bytes` into `path` as the given uid (a child `dd`, as a container's process would), and
/// returns what `dd` printed on failure.
fn write_as(uid: u32, path: &Path, bytes: u64) -> Result<(), String> {
    let out = Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &uid.to_string(), "--clear-groups", "dd", "if=/dev/zero"])
        .arg(format!("of={}", path.display()))
        .args(["bs=1M", &format!("count={}", bytes / MIB), "conv=fsync"])
        .output()
        .unwrap();
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

async fn check_backend(homes: &dyn Homes, root: &Path) {
    let (alice, bob) = (20_001, 20_002);
    let a = homes.ensure("alice", alice, Some(64 * MIB), false).await.unwrap();
    let b = homes.ensure("bob", bob, Some(64 * MIB), false).await.unwrap();
    assert_eq!(a, root.join("alice"));
    std::fs::write(b.join("keep.txt"), b"bob's").unwrap();
    // past the quota: the write fails with the filesystem's own error, at once
    let err = write_as(alice, &a.join("big"), 100 * MIB).expect_err("a write past the quota must fail");
    assert!(err.contains("No space left") || err.contains("quota exceeded"), "{err}");
    // bob's home is untouched and still writable
    assert_eq!(std::fs::read(b.join("keep.txt")).unwrap(), b"bob's");
    write_as(bob, &b.join("ok"), 8 * MIB).unwrap();
    let ua = homes.usage("alice").await.unwrap().unwrap();
    assert_eq!(ua.quota, Some(64 * MIB), "{ua:?}");
    assert!(ua.used > 40 * MIB && ua.used <= 64 * MIB, "alice used {ua:?}");
    // alice cannot write into bob's home (0700, his)
    assert!(write_as(alice, &b.join("x"), MIB).is_err());
    // a larger quota: the write fits now; files kept (a loop image grows unmounted where the kernel
    // refuses an online resize, so with her work stopped)
    std::fs::remove_file(a.join("big")).unwrap();
    homes.ensure("alice", alice, Some(160 * MIB), false).await.unwrap();
    write_as(alice, &a.join("big"), 100 * MIB).unwrap();
    assert_eq!(homes.usage("alice").await.unwrap().unwrap().quota, Some(160 * MIB));
    // a quota below what she holds is refused, and changes nothing
    match homes.ensure("alice", alice, Some(32 * MIB), false).await {
        Err(HomeError::BelowUsage { used, .. }) => assert!(used >= 100 * MIB),
        other => panic!("expected BelowUsage, got {other:?}"),
    }
    assert!(a.join("big").exists());
    assert!(homes.usage("carol").await.unwrap().is_none());
    let mut f = std::fs::File::create(a.join("note")).unwrap();
    f.write_all(b"hi").unwrap();
}

#[tokio::test]
async fn loop_homes_enforce_quotas_and_keep_files() {
    let d = tempfile::tempdir().unwrap();
    let _m = UnmountOnDrop(d.path().to_owned());
    let root = d.path().join("homes");
    // a plain home from before quotas: its files move into her image
    std::fs::create_dir_all(root.join("alice/old")).unwrap();
    std::fs::write(root.join("alice/old/thesis.tex"), b"chapter 1").unwrap();
    let homes = LoopHomes::new(&root).unwrap();
    check_backend(&homes, &root).await;
    assert_eq!(std::fs::read(root.join("alice/old/thesis.tex")).unwrap(), b"chapter 1");
    // shrinking needs her work stopped, then fits
    std::fs::remove_file(root.join("alice/big")).unwrap();
    assert!(matches!(homes.ensure("alice", 20_001, Some(64 * MIB), true).await, Err(HomeError::Busy { .. })));
    homes.ensure("alice", 20_001, Some(64 * MIB), false).await.unwrap();
    assert_eq!(homes.usage("alice").await.unwrap().unwrap().quota, Some(64 * MIB));
    assert_eq!(std::fs::read(root.join("alice/note")).unwrap(), b"hi");
    assert!(matches!(homes.ensure("dan", 20_004, Some(MIB), false).await, Err(HomeError::TooSmall { .. })));
    // released: unmounted; the image holds her files
    let paths = homes.release("alice").await.unwrap();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(!root.join("alice/note").exists(), "still mounted after release");
}

#[tokio::test]
async fn xfs_project_quotas_are_enforced() {
    let d = tempfile::tempdir().unwrap();
    let _m = UnmountOnDrop(d.path().to_owned());
    let image = d.path().join("xfs.img");
    std::fs::File::create(&image).unwrap().set_len(512 * MIB).unwrap();
    let mkfs = Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&image).status();
    if !matches!(mkfs, Ok(s) if s.success()) {
        assert!(
            std::env::var("GPUHUB_SKIP_XFS_TESTS").is_ok(),
            "mkfs.xfs failed or is missing: apt-get install xfsprogs (or GPUHUB_SKIP_XFS_TESTS=1)"
        );
        return;
    }
    let mnt = d.path().join("srv");
    std::fs::create_dir_all(&mnt).unwrap();
    let (img, at) = (image.display().to_string(), mnt.display().to_string());
    let root = mnt.join("homes");
    // not XFS: refused, naming what is there
    let ext = XfsHomes::new(d.path().join("plain")).await.unwrap_err().to_string();
    assert!(ext.contains("not xfs"), "{ext}");
    // XFS without project quotas: refused, naming the option
    sh(&["mount", "-o", "loop", &img, &at]);
    let plain = XfsHomes::new(&root).await.unwrap_err().to_string();
    assert!(plain.contains("not mounted with prjquota"), "{plain}");
    sh(&["umount", &at]);
    let with_quota = Command::new("mount").args(["-o", "loop,prjquota", &img, &at]).output().unwrap();
    if !with_quota.status.success() {
        // the same filesystem mounted without the option a moment ago: the kernel is built without
        // XFS quota support (this project's CI machine's is: "XFS: quota support not available in
        // this kernel"); what can be checked here was
        let why = String::from_utf8_lossy(&with_quota.stderr);
        eprintln!(
            "xfs project quotas not checked: mount -o prjquota failed ({why}); the kernel said: {}",
            kernel_log()
        );
        return;
    }
    let homes = XfsHomes::new(&root).await.unwrap();
    check_backend(&homes, &root).await;
    // XFS shrinks at once, even with work running, when the files fit
    std::fs::remove_file(root.join("alice/big")).unwrap();
    homes.ensure("alice", 20_001, Some(32 * MIB), true).await.unwrap();
    assert_eq!(homes.usage("alice").await.unwrap().unwrap().quota, Some(32 * MIB));
    assert!(write_as(20_001, &root.join("alice/big"), 40 * MIB).is_err());
}

/// The kernel's last lines about XFS (why a mount failed), or that they cannot be read.
fn kernel_log() -> String {
    let out = Command::new("dmesg").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    match out {
        Ok(l) => l.lines().rev().filter(|l| l.contains("XFS")).take(2).collect::<Vec<_>>().join(" / "),
        Err(e) => format!("(dmesg: {e})"),
    }
}
