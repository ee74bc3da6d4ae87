//! What gpuhub submits for a run: the `sbatch` arguments and the batch script.
//!
//! A run is one job of `N` nodes, one member per node (`--nodes=N --ntasks-per-node=1`, the resources of
//! one member per node). The batch script runs on the job's first node, outside any container, and
//! starts member `i` as job step `m<i>` on the job's node `i` (`srun --relative=i`) in the run's OCI
//! bundle (`--container`), with the rank variables exported to that step only (`--export=<names>`: the
//! image's own environment, from the bundle's `config.json`, stays). It then waits; the first member
//! to fail makes it signal the other steps (`scancel --signal=TERM`: steps only, never the script),
//! kill what is left after a grace period, and exit with that member's code. Each member's exit status
//! is also written next to its log (`job-<id>.m<i>.exit`), which `logs --follow` watches for.

use crate::config::{Placement, SlurmConfig};
use gpuhub_driver::{DEFAULT_MASTER_PORT, EngineError, GpuGrant, MemberSpec, RunSpec, rank_env};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long the script lets the other members of a failed run end after SIGTERM before it kills them.
pub const MEMBER_GRACE_SECS: u64 = 10;

/// Everything one submission needs, decided before anything is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// `gpuhub-<instance12>-<workload>`.
    pub job_name: String,
    /// The `--comment`: the run's labels, with the member count and the run's directory name.
    pub comment: String,
    pub uid: u32,
    pub gid: u32,
    /// The per-user directory under `log_dir`.
    pub log_dir: String,
    /// The run's bundle directory (`<bundle_dir>/runs/<name>`).
    pub bundle: String,
    pub placement: Placement,
    /// The command each member runs (the spec's, or the image's default).
    pub command: Vec<String>,
}

/// The resources of one member, which every member of a run must share (one member per node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub cpus: u64,
    /// MiB; 0 leaves Slurm's default (`DefMemPerCPU`).
    pub memory_mib: u64,
    pub gpus: Gpus,
}

/// The GPUs a member asks Slurm for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gpus {
    None,
    /// `--gres=gpu:N`.
    Whole(u32),
    /// `--gres=shard:N`.
    Shards(u32),
}

/// A member's shape in Slurm's units: whole CPUs (rounded up, at least 1), memory in MiB (rounded
/// up), whole GPUs or `ceil(milli × shards_per_gpu / 1000)` shards.
pub fn shape(m: &MemberSpec, shards_per_gpu: u32) -> Result<Shape, EngineError> {
    let cpus = m.cpu_milli.div_ceil(1000).max(1);
    let memory_mib = m.memory_bytes.div_ceil(1 << 20);
    let gpus = match &m.gpus {
        GpuGrant::None => Gpus::None,
        GpuGrant::Whole { count: 0, .. } => Gpus::None,
        GpuGrant::Whole { count, .. } => Gpus::Whole(*count),
        GpuGrant::Share { milli, .. } => {
            if *milli == 0 || *milli > 1000 {
                return Err(EngineError::Rejected(format!("a GPU share is 1 to 1000 milli-GPU, not {milli}")));
            }
            let shards = (u64::from(*milli) * u64::from(shards_per_gpu)).div_ceil(1000);
            Gpus::Shards(u32::try_from(shards).unwrap_or(u32::MAX).max(1))
        }
    };
    Ok(Shape { cpus, memory_mib, gpus })
}

/// The one shape of all members of `spec`, or why there is none.
pub fn run_shape(spec: &RunSpec, shards_per_gpu: u32) -> Result<Shape, EngineError> {
    let mut shapes = spec.members.iter().map(|m| shape(m, shards_per_gpu));
    let first = shapes.next().ok_or_else(|| EngineError::Rejected("a run needs at least one member".into()))??;
    for s in shapes {
        if s? != first {
            return Err(EngineError::Rejected(
                "on Slurm every member of a run asks for the same CPUs, memory and GPUs (one member per node)".into(),
            ));
        }
    }
    Ok(first)
}

/// `--time`: `D-HH:MM:SS`, rounded up to the second.
pub fn time_limit(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let s = s.max(1);
    format!("{}-{:02}:{:02}:{:02}", s / 86400, s / 3600 % 24, s / 60 % 60, s % 60)
}

/// The arguments of `sbatch` (the script goes to its stdin).
pub fn sbatch_args(sub: &Submission, spec: &RunSpec, shape: &Shape) -> Vec<String> {
    let mut a = vec![
        "--parsable".to_owned(),
        format!("--job-name={}", sub.job_name),
        format!("--comment={}", sub.comment),
        format!("--uid={}", sub.uid),
        format!("--gid={}", sub.gid),
        "--export=NONE".to_owned(),
        format!("--chdir={}", sub.log_dir),
        format!("--output={}/job-%j.batch.log", sub.log_dir),
        format!("--nodes={}", spec.members.len()),
        "--ntasks-per-node=1".to_owned(),
        format!("--cpus-per-task={}", shape.cpus),
    ];
    if shape.memory_mib > 0 {
        a.push(format!("--mem={}M", shape.memory_mib));
    }
    match shape.gpus {
        Gpus::None => {}
        Gpus::Whole(n) => a.push(format!("--gres=gpu:{n}")),
        Gpus::Shards(n) => a.push(format!("--gres=shard:{n}")),
    }
    if let Some(p) = &sub.placement.partition {
        a.push(format!("--partition={p}"));
    }
    if let Some(acc) = &sub.placement.account {
        a.push(format!("--account={acc}"));
    }
    if let Some(q) = &sub.placement.qos {
        a.push(format!("--qos={q}"));
    }
    if let Some(t) = spec.time_limit {
        a.push(format!("--time={}", time_limit(t)));
    }
    // gpuhub decides what runs again; a requeued job would run again under the same id
    a.push("--no-requeue".to_owned());
    a
}

/// `'text'`, safe in a POSIX shell whatever the text holds.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Whether `name` can be an environment variable exported by name (`--export=A,B`).
pub fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The variables member `m` gets on top of the run's: its own (`MemberSpec::env`) and the rank
/// variables, with `MASTER_ADDR` left for the script to fill in (the first node's host name).
pub fn member_env(spec: &RunSpec, m: &MemberSpec) -> Result<BTreeMap<String, String>, EngineError> {
    let size = spec.members.len() as u32;
    let port = spec.env.get("MASTER_PORT").and_then(|p| p.parse().ok()).unwrap_or(DEFAULT_MASTER_PORT);
    let mut env = m.env.clone();
    env.extend(rank_env(m.index, size, "", port));
    env.remove("MASTER_ADDR");
    if let Some(bad) = env.keys().find(|k| !valid_env_name(k)) {
        return Err(EngineError::Rejected(format!("invalid environment variable name {bad:?}")));
    }
    Ok(env)
}

/// The batch script.
pub fn batch_script(
    config: &SlurmConfig,
    sub: &Submission,
    spec: &RunSpec,
    shape: &Shape,
) -> Result<String, EngineError> {
    let mut s = String::new();
    s.push_str("#!/bin/bash\n");
    s.push_str(&format!(
        "# gpuhub run {}: {} member(s), written by gpuhub's Slurm engine. It runs on the job's first node,\n\
         # outside any container, and starts member i as job step m<i> on the job's node i, in the run's image.\n",
        sub.job_name,
        spec.members.len()
    ));
    s.push_str("set -u\nunset SLURM_EXPORT_ENV\n");
    s.push_str(&format!("srun={}\nscancel={}\n", quote(&config.command("srun")), quote(&config.command("scancel"))));
    s.push_str(&format!("bundle={}\n", quote(&sub.bundle)));
    s.push_str(&format!("log={}/job-\"$SLURM_JOB_ID\"\n", quote(&sub.log_dir)));
    s.push_str("master=$(hostname)\n");
    s.push_str(&format!("grace={MEMBER_GRACE_SECS}\n"));
    s.push_str("# gpuhub's cancel signals the members' steps; this script waits for them to end\n");
    s.push_str("trap ':' TERM INT HUP\n");
    s.push_str("declare -A member=()\n");
    s.push_str("export MASTER_ADDR=\"$master\"\n");
    let command: String = sub.command.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
    for m in &spec.members {
        let env = member_env(spec, m)?;
        for (k, v) in &env {
            s.push_str(&format!("export {k}={}\n", quote(v)));
        }
        let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
        names.push("MASTER_ADDR");
        names.sort_unstable();
        s.push_str(&format!(
            "\"$srun\" --export={} --job-name=m{i} --nodes=1 --ntasks=1 --relative={i} --cpus-per-task={} \
             --container=\"$bundle\" --output=\"$log.m{i}.log\" --open-mode=append -- {command} &\n",
            names.join(","),
            shape.cpus,
            i = m.index,
        ));
        s.push_str(&format!("member[$!]={}\n", m.index));
    }
    s.push_str(WAIT_LOOP);
    Ok(s)
}

/// Waits for every member; the first to fail stops the others and gives the script its exit code.
const WAIT_LOOP: &str = r#"code=0 failed= killer=
left=${#member[@]}
while [ "$left" -gt 0 ]; do
    done_pid=
    wait -n -p done_pid "${!member[@]}" 2>/dev/null
    rc=$?
    if [ -z "${done_pid:-}" ]; then
        # a signal interrupted the wait, or a member ended and bash reaped it between two waits (after
        # one `wait -n` and a new background job, bash 5.2's `wait -n` calls it "no such job", 127, and
        # unsets done_pid): a plain `wait PID` still has that member's status
        for pid in "${!member[@]}"; do
            if ! kill -0 "$pid" 2>/dev/null; then
                wait "$pid"
                rc=$? done_pid=$pid
                break
            fi
        done
        [ -n "$done_pid" ] || continue
    fi
    i=${member[$done_pid]}
    unset "member[$done_pid]"
    left=$((left - 1))
    echo "$rc" >"$log.m$i.exit"
    if [ "$rc" -ne 0 ] && [ -z "$failed" ]; then
        failed=$i code=$rc
        if [ "$left" -gt 0 ]; then
            echo "gpuhub: member $i exited with $rc: stopping the other members" >&2
            "$scancel" --signal=TERM "$SLURM_JOB_ID"
            (sleep "$grace" && kill -TERM "${!member[@]}") >/dev/null 2>&1 &
            killer=$!
        fi
    fi
done
[ -z "$killer" ] || kill "$killer" 2>/dev/null
exit "$code"
"#;

#[cfg(test)]
mod tests;
