//! The rule for environment variables users set on their workloads.
//!
//! The platform enforces what it grants partly through the environment: which GPUs a process sees
//! (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`), the limits of a GPU share (`CUDA_DEVICE_MEMORY_LIMIT`,
//! `CUDA_DEVICE_SM_LIMIT`, `CUDA_MPS_*`, HAMi-core's `GPU_CORE_UTILIZATION_POLICY`), the share library
//! preloaded into every process, and its own `GPUHUB_*` variables. A user-set variable of those
//! families could widen a grant (a per-device `CUDA_DEVICE_MEMORY_LIMIT_0=999g` overrides the platform's
//! cap in HAMi-core) or load code around the interception library (`LD_PRELOAD`, `LD_LIBRARY_PATH`), so
//! such names are refused at submit, naming the variable. A few harmless CUDA debugging switches stay
//! open; nothing of MPS is among them: `CUDA_MPS_PIPE_DIRECTORY` set by a user would point a share's
//! CUDA away from its GPU's daemon (running it without MPS, so without limits), and
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` / `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` would widen its limits.

use crate::CoreError;
use std::collections::BTreeMap;

/// Name prefixes the platform owns: a user may set no variable that starts with one of them.
pub const RESERVED_PREFIXES: &[&str] = &["LD_", "CUDA_", "GPUHUB_", "NVIDIA_", "HAMI_", "GPU_CORE_", "__NV_"];

/// Single names the platform owns (the GPU-share library's switches).
pub const RESERVED_NAMES: &[&str] =
    &["GPU_CORE_UTILIZATION_POLICY", "ACTIVE_OOM_KILLER", "LIBCUDA_LOG_LEVEL", "MPS_PIPE_DIRECTORY"];

/// CUDA variables that change no grant and stay open to users.
pub const ALLOWED_CUDA: &[&str] = &[
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_CACHE_PATH",
    "CUDA_CACHE_DISABLE",
    "CUDA_CACHE_MAXSIZE",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
];

/// Most variables one workload may set.
pub const MAX_VARIABLES: usize = 256;

/// Longest variable name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Why `name` may not be set by a user, if it may not.
pub fn reserved(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if ALLOWED_CUDA.contains(&upper.as_str()) {
        return None;
    }
    if RESERVED_NAMES.contains(&upper.as_str()) || RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p)) {
        return Some("it is set by the platform to enforce what the workload was granted");
    }
    None
}

/// Checks the variables of a workload request: well-formed names, none the platform owns.
pub fn check_user_env(env: &BTreeMap<String, String>) -> Result<(), CoreError> {
    if env.len() > MAX_VARIABLES {
        return Err(CoreError::invalid("env", format!("at most {MAX_VARIABLES} variables, got {}", env.len())));
    }
    for (k, v) in env {
        let bad_name =
            k.is_empty() || k.len() > MAX_NAME_BYTES || k.contains('=') || !k.chars().all(|c| c.is_ascii_graphic());
        if bad_name {
            return Err(CoreError::invalid(
                "env",
                format!(
                    "{k:?} is not a valid variable name (1 to {MAX_NAME_BYTES} bytes of printable ASCII, no '=' or spaces)"
                ),
            ));
        }
        if v.contains('\0') {
            return Err(CoreError::invalid("env", format!("the value of {k} contains NUL")));
        }
        if let Some(why) = reserved(k) {
            return Err(CoreError::invalid("env", format!("{k} cannot be set: {why}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn platform_variables_are_refused_by_name() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "ld_preload",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_MEMORY_LIMIT_0",
            "CUDA_DEVICE_SM_LIMIT",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "CUDA_MPS_PIPE_DIRECTORY",
            "cuda_mps_pipe_directory",
            "CUDA_MPS_LOG_DIRECTORY",
            "GPU_CORE_UTILIZATION_POLICY",
            "NVIDIA_VISIBLE_DEVICES",
            "GPUHUB_GPU_MILLI",
        ] {
            let e = check_user_env(&env(&[(name, "x")])).unwrap_err().to_string();
            assert!(e.contains(name) && e.starts_with("invalid env"), "{name}: {e}");
        }
    }

    #[test]
    fn ordinary_and_debugging_variables_pass() {
        check_user_env(&env(&[("PYTHONUNBUFFERED", "1"), ("CUDA_LAUNCH_BLOCKING", "1"), ("OMP_NUM_THREADS", "4")]))
            .unwrap();
        assert!(reserved("MY_LD_PRELOAD").is_none());
    }

    #[test]
    fn malformed_names_and_values() {
        for (k, v) in [("", "x"), ("A=B", "x"), ("A B", "x"), ("A\nB", "x"), ("A", "x\0y")] {
            assert!(check_user_env(&env(&[(k, v)])).is_err(), "{k:?}={v:?}");
        }
        let many: BTreeMap<String, String> = (0..=MAX_VARIABLES).map(|i| (format!("V{i}"), String::new())).collect();
        assert!(check_user_env(&many).is_err());
    }
}
