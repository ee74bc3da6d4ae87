//! The `GPUHUB_*` variables: which are server settings, which belong to others, and the error for
//! one that is neither.

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

/// The `[slurm]` settings a `GPUHUB_SLURM_<KEY>` variable sets (the maps `queues` and `accounts` only
/// come from the file).
pub const SLURM_VARIABLES: &[&str] = &[
    "CONF",
    "BIN_DIR",
    "PARTITION",
    "ACCOUNT",
    "QOS",
    "MAP_USERNAMES",
    "BUNDLE_DIR",
    "LOG_DIR",
    "OCI_RUNTIME",
    "OCI_ROOT",
    "INIT",
    "SHARDS_PER_GPU",
    "ACCOUNTING",
    "POLL_MS",
];

/// Sets the `[slurm]` key `name` (of `SLURM_VARIABLES`) from the variable `key`'s value `v`.
pub(super) fn apply_slurm(
    c: &mut gpuhub_slurm::SlurmConfig,
    key: &str,
    name: &str,
    v: String,
) -> Result<(), super::ConfigError> {
    use std::path::PathBuf;
    let invalid = |reason: String| super::ConfigError::Invalid { key: key.to_owned(), reason };
    let word =
        |v: &str| -> Result<serde_json::Value, super::ConfigError> { Ok(serde_json::Value::String(v.to_owned())) };
    let opt = |v: String| (!v.is_empty()).then_some(v);
    match name {
        "CONF" => c.conf = opt(v).map(PathBuf::from),
        "BIN_DIR" => c.bin_dir = opt(v).map(PathBuf::from),
        "PARTITION" => c.partition = opt(v),
        "ACCOUNT" => c.account = opt(v),
        "QOS" => c.qos = opt(v),
        "MAP_USERNAMES" => c.map_usernames = v.parse().map_err(|e| invalid(format!("{e}")))?,
        "BUNDLE_DIR" => c.bundle_dir = PathBuf::from(v),
        "LOG_DIR" => c.log_dir = PathBuf::from(v),
        "OCI_RUNTIME" => {
            c.oci_runtime =
                serde_json::from_value(word(&v)?).map_err(|_| invalid(format!("{v:?} is not crun or runc")))?
        }
        "OCI_ROOT" => c.oci_root = PathBuf::from(v),
        "INIT" => c.init = opt(v).map(PathBuf::from),
        "SHARDS_PER_GPU" => c.shards_per_gpu = v.parse().map_err(|e| invalid(format!("{e}")))?,
        "ACCOUNTING" => {
            c.accounting =
                serde_json::from_value(word(&v)?).map_err(|_| invalid(format!("{v:?} is not slurmdbd or none")))?
        }
        "POLL_MS" => c.poll_ms = v.parse().map_err(|e| invalid(format!("{e}")))?,
        other => return Err(invalid(format!("no [slurm] setting {other}"))),
    }
    Ok(())
}

/// The `[lxd]` settings a `GPUHUB_LXD_<KEY>` variable sets.
pub const LXD_VARIABLES: &[&str] = &["SOCKET", "PROJECT", "STORAGE_POOL", "STATE_DIR", "NETWORK", "POLL_MS"];

/// Sets the `[lxd]` key `name` (of `LXD_VARIABLES`) from the variable `key`'s value `v`.
pub(super) fn apply_lxd(
    c: &mut gpuhub_lxd::LxdConfig,
    key: &str,
    name: &str,
    v: String,
) -> Result<(), super::ConfigError> {
    use std::path::PathBuf;
    let invalid = |reason: String| super::ConfigError::Invalid { key: key.to_owned(), reason };
    match name {
        "SOCKET" => c.socket = PathBuf::from(v),
        "PROJECT" => c.project = v,
        "STORAGE_POOL" => c.storage_pool = v,
        "STATE_DIR" => c.state_dir = PathBuf::from(v),
        "NETWORK" => c.network = (!v.is_empty()).then_some(v),
        "POLL_MS" => c.poll_ms = v.parse().map_err(|e| invalid(format!("{e}")))?,
        other => return Err(invalid(format!("no [lxd] setting {other}"))),
    }
    c.check().map_err(invalid)
}

/// The `[kubernetes]` settings a `GPUHUB_KUBERNETES_<KEY>` variable sets (the map `node_selector` only
/// in the file).
pub const KUBERNETES_VARIABLES: &[&str] = &[
    "KUBECONFIG",
    "CONTEXT",
    "NAMESPACE",
    "RUNTIME_CLASS",
    "GPU_RESOURCE",
    "SHARING",
    "SHARE_RESOURCE",
    "VOLCANO",
    "GRACE_SECONDS",
];

/// Sets the `[kubernetes]` key `name` (of `KUBERNETES_VARIABLES`) from the variable `key`'s value `v`.
pub(super) fn apply_kubernetes(
    c: &mut gpuhub_kube::KubeConfig,
    key: &str,
    name: &str,
    v: String,
) -> Result<(), super::ConfigError> {
    let invalid = |reason: String| super::ConfigError::Invalid { key: key.to_owned(), reason };
    match name {
        "KUBECONFIG" => c.kubeconfig = (!v.is_empty()).then(|| std::path::PathBuf::from(v)),
        "CONTEXT" => c.context = (!v.is_empty()).then_some(v),
        "NAMESPACE" => c.namespace = v,
        "RUNTIME_CLASS" => c.runtime_class = (!v.is_empty()).then_some(v),
        "GPU_RESOURCE" => c.gpu_resource = v,
        "SHARING" => {
            c.sharing = serde_json::from_value(serde_json::Value::String(v.clone()))
                .map_err(|_| invalid(format!("{v:?} is not none, hami or mps")))?
        }
        "SHARE_RESOURCE" => c.share_resource = v,
        "VOLCANO" => c.volcano = v.parse().map_err(|_| invalid(format!("{v:?} is not true or false")))?,
        "GRACE_SECONDS" => c.grace_seconds = v.parse().map_err(|e| invalid(format!("{e}")))?,
        other => return Err(invalid(format!("no [kubernetes] setting {other}"))),
    }
    c.check().map_err(invalid)
}

/// The server settings' variable names, without the prefix (what `apply_env` reads).
pub const SERVER_VARIABLES: &[&str] = &[
    "LISTEN",
    "SSH_LISTEN",
    "DATA_DIR",
    "HOMES_DIR",
    "HOME_QUOTA",
    "TEAMS_DIR",
    "HOME_BACKEND",
    "CONTAINER_DISK",
    "DATABASE_URL",
    "GPU_MODE",
    "GPUS",
    "ALLOW_ANY_IMAGE",
    "IMAGE_ALLOW",
    "PIDS_LIMIT",
    "ISOLATE_HOST",
    "STOP_GRACE_SECS",
    "ON_ENGINE_RESTART",
    "RECONCILE_SECS",
    "SESSION_HOURS",
    "SECURE_COOKIES",
    "APPS_DOMAIN",
    "PUBLIC_URL",
    "LOGIN_FAILURES",
    "LOGIN_WINDOW_SECS",
    "TOKEN_DAYS",
    "TRUSTED_PROXIES",
    "SCHEDULER_POLICY",
    "ADMINS_ENTER_WORKSPACES",
    "ADMINS_OPEN_APPS",
    "ADMIN_PASSWORD",
    "SECRET_KEY",
    "DATASET_CACHE",
    "MAX_WORKLOADS_PER_USER",
    "MAX_QUEUED_PER_USER",
    "MAX_COMMAND_BYTES",
    "MAX_ENV_BYTES",
    "MAX_APPS",
    "MAX_PERSONAL_IMAGES",
    "MAX_PERSONAL_IMAGE_BYTES",
    "MAX_IN_FLIGHT",
    "GPU_SHARE_LIBRARY",
    "GPU_SHARING",
    "GUARD_GRACE_SECS",
    "MPS_CONTROL",
    "MPS_DIR",
    "MPS_EXCLUSIVE_PROCESS",
    "LOG_MAX_BYTES",
    "ENGINE",
    "MONITOR_INTERVAL_SECS",
    "MONITOR_RAW_HOURS",
    "MONITOR_MINUTE_DAYS",
    "MONITOR_HOUR_DAYS",
    "MONITOR_METRICS_TOKEN",
    "MONITOR_METRICS_ALLOW",
    "IDLE_ENABLED",
    "IDLE_THRESHOLD_PCT",
    "IDLE_AFTER_SECS",
    "IDLE_GRACE_SECS",
    "IDLE_KEEP_MAX_HOURS",
    "IDLE_JOBS",
    "IDLE_EXEMPT_QUEUES",
    "IDLE_WEBHOOK",
    "SLURM_CONF",
    "SLURM_BIN_DIR",
    "SLURM_PARTITION",
    "SLURM_ACCOUNT",
    "SLURM_QOS",
    "SLURM_MAP_USERNAMES",
    "SLURM_BUNDLE_DIR",
    "SLURM_LOG_DIR",
    "SLURM_OCI_RUNTIME",
    "SLURM_OCI_ROOT",
    "SLURM_INIT",
    "SLURM_SHARDS_PER_GPU",
    "SLURM_ACCOUNTING",
    "SLURM_POLL_MS",
    "LXD_SOCKET",
    "LXD_PROJECT",
    "LXD_STORAGE_POOL",
    "LXD_STATE_DIR",
    "LXD_NETWORK",
    "LXD_POLL_MS",
    "KUBERNETES_KUBECONFIG",
    "KUBERNETES_CONTEXT",
    "KUBERNETES_NAMESPACE",
    "KUBERNETES_RUNTIME_CLASS",
    "KUBERNETES_GPU_RESOURCE",
    "KUBERNETES_SHARING",
    "KUBERNETES_SHARE_RESOURCE",
    "KUBERNETES_VOLCANO",
    "KUBERNETES_GRACE_SECONDS",
    "LDAP_URL",
    "LDAP_STARTTLS",
    "LDAP_CA_FILE",
    "LDAP_BIND_DN",
    "LDAP_BIND_PASSWORD",
    "LDAP_USER_BASE",
    "LDAP_USER_FILTER",
    "LDAP_GROUP_BASE",
    "LDAP_GROUP_FILTER",
    "LDAP_ADMIN_GROUP",
    "OIDC_ISSUER_URL",
    "OIDC_CLIENT_ID",
    "OIDC_CLIENT_SECRET",
    "OIDC_REDIRECT_URL",
    "OIDC_USERNAME_CLAIM",
    "OIDC_GROUPS_CLAIM",
    "OIDC_ADMIN_GROUP",
    "OIDC_SESSION_HOURS",
    "IDENTITY_RECHECK_SECS",
];

/// The reason an unknown `GPUHUB_` variable is refused, naming the closest known one.
pub(super) fn unknown_variable(name: &str) -> String {
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
pub(super) fn did_you_mean(error: &str) -> String {
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
        let e = super::super::Config::from_toml("listn = \"127.0.0.1:9\"\n").unwrap_err();
        assert!(e.contains("unknown field `listn`") && e.ends_with("did you mean `listen`?"), "{e}");
        let e = super::super::Config::from_toml("[idle]\ngrace_sec = 5\n").unwrap_err();
        assert!(e.ends_with("did you mean `grace_secs`?"), "{e}");
        let e = super::super::Config::from_toml("frobnicate = 1\n").unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn the_lists_do_not_overlap() {
        assert!(SERVER_VARIABLES.iter().all(|v| !NOT_SERVER_SETTINGS.contains(v)));
    }
}
