//! The `GPUHUB_*` variables: the table of the settings they set, which belong to others, and the error
//! for one that is neither.

use crate::homes::HomeBackend;
use crate::{EngineKind, GpuMode};
use figment::value::{Empty, Value};
use gpuhub_core::node::{GpuDevice, GpuSharing};
use gpuhub_driver::settings::{kube, slurm};
use serde::Serialize;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::LazyLock;

/// `GPUHUB_*` variables that are not server settings: the CLI's (`SERVER`, `TOKEN`, `SSH`), the log
/// filter (`LOG`), what containers get (`WORKLOAD`, `NAME`, `GPU_MILLI`, `GPU_MEMORY`, `BASE_URL`,
/// `PORT`, `SFTP_SERVERS`) and the scripts' and tests' switches. Any other unknown one is an error,
/// like an unknown key in the file, so that a misspelt setting does not go unnoticed.
pub const NOT_SERVER_SETTINGS: &[&str] = &[
    "SERVER",
    "TOKEN",
    "SSH",
    "LOG",
    "WORKLOAD",
    "NAME",
    "GPU_MILLI",
    "GPU_MEMORY",
    "BASE_URL",
    "PORT",
    "SFTP_SERVERS",
    "SKIP_SETUP",
    "TEST_POSTGRES_URL",
    "BUSYBOX_IMAGE",
    "DEBIAN_MIRROR",
    "FORCE_APT",
    "FORCE_BUILD",
    "SKIP_LDAP_TESTS",
    "SKIP_OIDC_TESTS",
    "SKIP_XFS_TESTS",
    "SKIP_S3_TESTS",
    "HISTORY_BENCH_WORKLOADS",
    "HISTORY_BENCH_SKIP_GROWTH",
    "PORTAL_BENCH_WORKLOADS",
    "MEMBER",
    "SLURM_DIR",
    "SLURM_NODES",
    "SLURM_NET",
    "SLURM_TESTS",
    "SLURM_BENCH_N",
    "SLURM_BENCH_QUEUE",
    "SLURM_BENCH_SETTLE_MS",
    "LXD_TESTS",
    "TEST_KUBECONFIG",
    "BIN",
    "SCHEMATHESIS_SECS",
    "SCHEMATHESIS_EXAMPLES",
    "SKIP_SCHEMATHESIS",
];

/// Whether a variable (without the prefix) is one containers get: `GPUHUB_PORT_<APP>`, an app's port.
pub fn container_variable(name: &str) -> bool {
    name.strip_prefix("PORT_").is_some_and(|app| !app.is_empty())
}

/// How a variable's text becomes the value of its key: checked here, so that a bad value is an error
/// naming the variable, and a good one reaches the typed configuration as the type expects it.
type Read = fn(&str) -> Result<Value, String>;

/// Every setting a `GPUHUB_*` variable sets: its key in the typed configuration and how its text is
/// read. The variable's name is made from the key ([`variable_name`]): `kubernetes.grace_seconds` is
/// `GPUHUB_KUBERNETES_GRACE_SECONDS`, `[limits]`'s keys go without their section (`GPUHUB_MAX_APPS`).
/// Maps and lists of tables (`[[scheduler.queues]]`, `[slurm.accounts]`, …) come only from the file.
/// Names are looked up whole in this table, never split on `_`, so keys with `_` in them are not
/// ambiguous.
pub const SETTINGS: &[(&str, Read)] = &[
    ("listen", parsed::<SocketAddr>),
    ("ssh_listen", parsed::<SocketAddr>),
    ("uid_range", parsed::<gpuhub_core::user::UidRange>),
    ("engine", parsed::<EngineKind>),
    ("data_dir", text),
    ("homes_dir", optional),
    ("home_quota", quota),
    ("teams_dir", optional),
    ("home_backend", parsed::<HomeBackend>),
    ("container_disk", quota),
    ("database_url", optional),
    ("gpu_mode", parsed::<GpuMode>),
    ("gpus", gpus),
    ("allow_any_image", parsed::<bool>),
    ("image_allow", list),
    ("pids_limit", parsed::<i64>),
    ("pid_max", optional_number),
    ("isolate_host", parsed::<bool>),
    ("network_pool", optional),
    ("network_prefix", parsed::<u8>),
    ("stop_grace_secs", parsed::<u64>),
    ("on_engine_restart", parsed::<gpuhub_core::stop::OnEngineRestart>),
    ("reconcile_secs", parsed::<u64>),
    ("session_hours", parsed::<i64>),
    ("secure_cookies", parsed::<bool>),
    ("apps_domain", optional),
    ("public_url", optional),
    ("login_failures", parsed::<usize>),
    ("login_window_secs", parsed::<u64>),
    ("token_days", parsed::<i64>),
    ("trusted_proxies", list),
    ("scheduler.policy", parsed::<gpuhub_sched::Policy>),
    ("admins_enter_workspaces", parsed::<bool>),
    ("admins_open_apps", parsed::<bool>),
    ("admin_password", text),
    ("secret_key", optional),
    ("dataset_cache", size),
    ("limits.max_workloads_per_user", parsed::<u64>),
    ("limits.max_queued_per_user", parsed::<u64>),
    ("limits.max_command_bytes", parsed::<usize>),
    ("limits.max_env_bytes", parsed::<usize>),
    ("limits.max_apps", parsed::<usize>),
    ("limits.max_personal_images", parsed::<u64>),
    ("limits.max_personal_image_bytes", size),
    ("limits.max_in_flight", parsed::<usize>),
    ("gpu_share_library", optional),
    ("gpu_sharing", gpu_sharing),
    ("guard.grace_secs", parsed::<u64>),
    ("mps.control", optional),
    ("mps.dir", optional),
    ("mps.exclusive_process", parsed::<bool>),
    ("log_max_bytes", size),
    ("monitor.interval_secs", parsed::<u64>),
    ("monitor.raw_hours", parsed::<u64>),
    ("monitor.minute_days", parsed::<u64>),
    ("monitor.hour_days", parsed::<u64>),
    ("monitor.metrics_token", optional),
    ("monitor.metrics_allow", list),
    ("idle.enabled", parsed::<bool>),
    ("idle.threshold_pct", parsed::<f64>),
    ("idle.after_secs", parsed::<u64>),
    ("idle.grace_secs", parsed::<u64>),
    ("idle.keep_max_hours", parsed::<u64>),
    ("idle.jobs", parsed::<bool>),
    ("idle.exempt_queues", list),
    ("idle.webhook", optional),
    ("slurm.conf", optional),
    ("slurm.bin_dir", optional),
    ("slurm.partition", optional),
    ("slurm.account", optional),
    ("slurm.qos", optional),
    ("slurm.map_usernames", parsed::<bool>),
    ("slurm.bundle_dir", text),
    ("slurm.log_dir", text),
    ("slurm.oci_runtime", |v| word::<slurm::OciRuntime>(v, "crun or runc")),
    ("slurm.oci_root", text),
    ("slurm.init", optional),
    ("slurm.shards_per_gpu", parsed::<u32>),
    ("slurm.accounting", |v| word::<slurm::Accounting>(v, "slurmdbd or none")),
    ("slurm.poll_ms", parsed::<u64>),
    ("lxd.socket", text),
    ("lxd.project", text),
    ("lxd.storage_pool", text),
    ("lxd.state_dir", text),
    ("lxd.network", optional),
    ("lxd.poll_ms", parsed::<u64>),
    ("kubernetes.kubeconfig", optional),
    ("kubernetes.context", optional),
    ("kubernetes.namespace", text),
    ("kubernetes.runtime_class", optional),
    ("kubernetes.gpu_resource", text),
    ("kubernetes.sharing", |v| word::<kube::Sharing>(v, "none, hami or mps")),
    ("kubernetes.share_resource", text),
    ("kubernetes.volcano", true_or_false),
    ("kubernetes.grace_seconds", parsed::<u64>),
    ("kubernetes.app_access", |v| word::<kube::AppAccess>(v, "auto, pod-ip or port-forward")),
    ("kubernetes.home_storage_class", optional),
    ("kubernetes.home_size", text),
    ("ldap.url", text),
    ("ldap.starttls", true_or_false),
    ("ldap.ca_file", optional),
    ("ldap.bind_dn", optional),
    ("ldap.bind_password", optional),
    ("ldap.user_base", text),
    ("ldap.user_filter", text),
    ("ldap.group_base", text),
    ("ldap.group_filter", text),
    ("ldap.admin_group", optional),
    ("oidc.issuer_url", text),
    ("oidc.client_id", text),
    ("oidc.client_secret", text),
    ("oidc.redirect_url", text),
    ("oidc.username_claim", text),
    ("oidc.groups_claim", text),
    ("oidc.admin_group", text),
    ("oidc_session_hours", parsed::<i64>),
    ("identity_recheck_secs", parsed::<u64>),
];

/// The variable (without `GPUHUB_`) that sets `key`: the key in capitals with `.` as `_`, and the keys
/// of `[limits]` without their section.
pub fn variable_name(key: &str) -> String {
    key.strip_prefix("limits.").unwrap_or(key).replace('.', "_").to_ascii_uppercase()
}

/// The server settings' variable names, without the prefix, in the order of [`SETTINGS`].
pub static SERVER_VARIABLES: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| SETTINGS.iter().map(|(key, _)| &*Box::leak(variable_name(key).into_boxed_str())).collect());

/// The key and reader of the variable `name` (without `GPUHUB_`); `None` when it is no setting.
pub fn setting(name: &str) -> Option<(&'static str, Read)> {
    let i = SERVER_VARIABLES.iter().position(|v| *v == name)?;
    Some(SETTINGS[i])
}

fn text(v: &str) -> Result<Value, String> {
    Ok(Value::from(v))
}

/// Empty: unset (over the file's value too).
fn optional(v: &str) -> Result<Value, String> {
    if v.is_empty() { Ok(Value::from(Empty::None)) } else { text(v) }
}

/// The value as its type reads it (its own error message), then as that type writes it.
fn parsed<T>(v: &str) -> Result<Value, String>
where
    T: FromStr + Serialize,
    T::Err: fmt::Display,
{
    let t: T = v.parse().map_err(|e: T::Err| e.to_string())?;
    Value::serialize(t).map_err(|e| e.to_string())
}

/// A word of a serde enum, or an error listing the words.
fn word<T: serde::de::DeserializeOwned>(v: &str, words: &str) -> Result<Value, String> {
    match serde_json::from_value::<T>(serde_json::Value::String(v.to_owned())) {
        Ok(_) => text(v),
        Err(_) => Err(format!("{v:?} is not {words}")),
    }
}

fn true_or_false(v: &str) -> Result<Value, String> {
    v.parse::<bool>().map(Value::from).map_err(|_| format!("{v:?} is not true or false"))
}

/// Comma-separated, blanks dropped.
fn list(v: &str) -> Result<Value, String> {
    Ok(Value::from(v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>()))
}

/// `4GiB`, `100MiB`, a number of bytes.
fn size(v: &str) -> Result<Value, String> {
    gpuhub_core::Bytes::parse(v).map(|b| Value::from(b.0)).map_err(|e| e.to_string())
}

/// A size, or empty / `none` for none.
fn quota(v: &str) -> Result<Value, String> {
    if v.is_empty() || v == "none" { Ok(Value::from(Empty::None)) } else { size(v) }
}

/// A number, or empty for unset.
fn optional_number(v: &str) -> Result<Value, String> {
    if v.is_empty() { Ok(Value::from(Empty::None)) } else { parsed::<u64>(v) }
}

/// A JSON list of GPUs, as `[[gpus]]` in the file.
fn gpus(v: &str) -> Result<Value, String> {
    // read as the GPUs first, for the message of before (with its line and column)
    serde_json::from_str::<Vec<GpuDevice>>(v).map_err(|e| format!("expected a JSON list of GPUs: {e}"))?;
    let json: serde_json::Value = serde_json::from_str(v).map_err(|e| e.to_string())?;
    Value::serialize(json).map_err(|e| e.to_string())
}

/// `mps`, `guard`, `none`; empty or `auto`: unset (each GPU's own, else by what measures the GPUs).
fn gpu_sharing(v: &str) -> Result<Value, String> {
    match v {
        "" | "auto" => Ok(Value::from(Empty::None)),
        _ => parsed::<GpuSharing>(v),
    }
}

/// The reason an unknown `GPUHUB_` variable is refused, naming the closest known one.
pub(crate) fn unknown_variable(name: &str) -> String {
    let closest = SERVER_VARIABLES.iter().min_by_key(|known| edit_distance(name, known)).filter(|known| {
        let d = edit_distance(name, known);
        d <= 2 || (d <= 4 && d * 3 <= known.len())
    });
    match closest {
        Some(known) => format!("no such setting; did you mean GPUHUB_{known}? (unset it, or see the README's list)"),
        None => "no such setting (unset it, or see the README's list of GPUHUB_ variables)".to_owned(),
    }
}

/// A parse error of the config file, with "did you mean `key`?" added where it names an unknown key and
/// the keys expected there hold a close one (serde's "unknown field `colour`, expected one of `a`, `b`").
pub(crate) fn did_you_mean(error: &str) -> String {
    let Some((_, rest)) = error.split_once("unknown field `") else { return error.to_owned() };
    let Some((unknown, rest)) = rest.split_once('`') else { return error.to_owned() };
    let Some((_, expected)) = rest.split_once("expected ") else { return error.to_owned() };
    let expected = expected.lines().next().unwrap_or_default();
    let closest = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|k| (edit_distance(unknown, k), k))
        .filter(|&(d, k)| d <= 2 || (d <= 4 && d * 3 <= k.len()))
        .min();
    match closest {
        Some((_, k)) => format!("{error}\ndid you mean `{k}`?"),
        None => error.to_owned(),
    }
}

/// Levenshtein distance of two short ASCII names.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("LISTEN", "LISTEN"), 0);
        assert_eq!(edit_distance("LISTN", "LISTEN"), 1);
        assert_eq!(edit_distance("", "ABC"), 3);
        assert_eq!(edit_distance("TOKEN_DAY", "TOKEN_DAYS"), 1);
    }

    #[test]
    fn a_misspelt_variable_names_the_setting() {
        assert!(unknown_variable("LISTN").contains("did you mean GPUHUB_LISTEN?"), "{}", unknown_variable("LISTN"));
        assert!(unknown_variable("MAX_QUEUED_PER_USR").contains("GPUHUB_MAX_QUEUED_PER_USER"));
        assert!(!unknown_variable("FROBNICATE").contains("did you mean"));
    }

    #[test]
    fn a_misspelt_key_in_the_file_names_the_key() {
        let e = crate::Config::from_toml("listn = \"127.0.0.1:9\"\n").unwrap_err();
        assert!(e.contains("unknown field `listn`") && e.ends_with("did you mean `listen`?"), "{e}");
        let e = crate::Config::from_toml("[idle]\ngrace_sec = 5\n").unwrap_err();
        assert!(e.ends_with("did you mean `grace_secs`?"), "{e}");
        let e = crate::Config::from_toml("frobnicate = 1\n").unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn the_lists_do_not_overlap() {
        assert!(SERVER_VARIABLES.iter().all(|v| !NOT_SERVER_SETTINGS.contains(v)));
    }
}
