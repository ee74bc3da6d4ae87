//! Property tests of the API request JSON: every request type reads arbitrary JSON or text or says
//! why, never panics, and what reads can be checked and written back.
//!
//! The case count is small by default so CI stays fast; `PROPTEST_CASES=100000` runs more.

use gpuhub_api::{
    ChangePasswordRequest, CreateReservationRequest, CreateUserRequest, CreateWorkloadRequest, ImageEntry,
    LoginRequest, PatchUserRequest, ResourceRequest,
};
use proptest::prelude::*;
use serde_json::Value;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Arbitrary JSON, nested a few levels, with the numbers that trouble parsers.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        prop::sample::select(vec!["NaN", "inf", "-1", "0", "1e400", "4GiB", "-4GiB", "18446744073709551616", "1h30m"])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "name",
                    "kind",
                    "image",
                    "command",
                    "env",
                    "resources",
                    "cpus",
                    "memory",
                    "gpus",
                    "gpu_milli",
                    "gpu_memory",
                    "priority",
                    "queue",
                    "constraint",
                    "runtime_limit",
                    "members",
                    "apps",
                    "port",
                    "username",
                    "password",
                    "admin",
                    "disabled",
                    "start",
                    "end",
                    "id",
                    "model",
                    "x",
                ])
                .prop_map(str::to_owned),
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn request_json_deserializes_or_fails_cleanly(v in arb_json()) {
        // every request type either reads the value or says why; reading never panics, and what reads
        // can be checked (resolve) and written back
        if let Ok(r) = serde_json::from_value::<CreateWorkloadRequest>(v.clone()) {
            let _ = r.resources.resolve();
            let again: CreateWorkloadRequest = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
            prop_assert_eq!(serde_json::to_value(&again).unwrap(), serde_json::to_value(&r).unwrap());
        }
        if let Ok(r) = serde_json::from_value::<ResourceRequest>(v.clone()) {
            if let Ok(res) = r.resolve() {
                prop_assert!(res.cpu_milli.0 >= gpuhub_api::MIN_CPU_MILLI);
            }
        }
        let _ = serde_json::from_value::<LoginRequest>(v.clone());
        let _ = serde_json::from_value::<ChangePasswordRequest>(v.clone());
        let _ = serde_json::from_value::<CreateUserRequest>(v.clone());
        let _ = serde_json::from_value::<PatchUserRequest>(v.clone());
        let _ = serde_json::from_value::<CreateReservationRequest>(v.clone());
        let _ = serde_json::from_value::<ImageEntry>(v);
    }

    #[test]
    fn request_text_deserializes_or_fails_cleanly(s in "\\PC{0,64}") {
        let _ = serde_json::from_str::<CreateWorkloadRequest>(&s);
    }
}
