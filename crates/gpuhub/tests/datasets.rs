//! Datasets on the real Docker engine, through the `gpuhub` CLI: an admin registers a directory of this
//! host as a dataset (`gpuhub datasets add`); a user's job mounts it by name (`--dataset`) and reads it at
//! `/datasets/<name>`, while writing there fails inside the container (read-only); a user cannot
//! register one, an unknown name is refused naming those there are, and removing a dataset leaves
//! submitted work as it was. Needs root and a Docker engine.

mod common;

use anyhow::{Result, ensure};
use common::{Hub, IMAGE};

#[test]
fn a_job_reads_a_dataset_and_cannot_write_it() -> Result<()> {
    let _serial = common::serial();
    let mut hub = Hub::start()?;
    let alice = hub.user("alice")?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("corpus");
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("hello.txt"), "words of the corpus\n")?;
    // a directory readable by the job's UID, as a shared dataset is
    std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(dir.path()).status()?;
    let name = format!("corpus-{}", common::suffix());
    let path = data.display().to_string();

    let err = alice.fails(&["datasets", "add", &name, &path])?;
    ensure!(err.contains("403") || err.to_lowercase().contains("admin"), "a user registering a dataset: {err}");
    let added = hub.admin.ok(&["datasets", "add", &name, &path, "--description", "a test corpus"])?;
    ensure!(added.contains(&format!("/datasets/{name}")), "datasets add printed {added:?}");
    let listed = alice.ok(&["datasets"])?;
    ensure!(listed.contains(&name) && listed.contains(&path), "gpuhub datasets: {listed}");

    let script = format!(
        "cat /datasets/{name}/hello.txt; if touch /datasets/{name}/x 2>/dev/null; then echo WROTE; else echo read-only; fi"
    );
    let out = alice.ok(&[
        "run",
        "--name",
        "reader",
        "--image",
        IMAGE,
        "--dataset",
        &name,
        "--follow",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    ensure!(out.contains("words of the corpus"), "the job read: {out:?}");
    ensure!(out.contains("read-only") && !out.contains("WROTE"), "the job could write the dataset: {out:?}");
    ensure!(!data.join("x").exists(), "a file appeared in the dataset");
    let w = alice.inspect("reader")?;
    ensure!(w["state"] == "succeeded", "reader: {w:#}");
    ensure!(w["datasets"][0]["name"] == name.as_str() && w["datasets"][0]["path"] == path.as_str(), "{w:#}");

    let err = alice.fails(&["run", "--name", "nope", "--image", IMAGE, "--dataset", "missing", "--", "true"])?;
    ensure!(err.contains("no dataset named \"missing\"") && err.contains(&name), "an unknown dataset: {err}");

    // removing it refuses new work and leaves the submitted as it was
    hub.admin.ok(&["datasets", "rm", &name])?;
    let err = alice.fails(&["run", "--name", "later", "--image", IMAGE, "--dataset", &name, "--", "true"])?;
    ensure!(err.contains("no dataset named"), "after removal: {err}");
    let w = alice.inspect("reader")?;
    ensure!(w["datasets"][0]["name"] == name.as_str(), "the submitted workload keeps its dataset: {w:#}");
    Ok(())
}
