//! Property tests of every parser in `gpuhub-core` that users reach: quantities (memory, CPUs,
//! durations), names and the environment policy (the API request JSON: gpuhub-api's props). Each asserts no panic plus a
//! real property (a round trip, or agreement with the rule as written).
//!
//! The case count is small by default so CI stays fast; `PROPTEST_CASES=100000` runs more.

use gpuhub_core::{Bytes, CoreError, CpuMilli, Seconds, env, names};
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// The name rule as the docs state it, written independently of `names::validate`.
fn name_rule(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && *b.last().unwrap() != b'-'
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn memory_text_parses_or_is_a_typed_error(s in "\\PC{0,24}") {
        match Bytes::parse(&s) {
            Ok(_) => {}
            Err(CoreError::Quantity { input, .. }) => prop_assert_eq!(input, s),
            Err(e) => prop_assert!(false, "unexpected error kind: {e}"),
        }
    }

    #[test]
    fn memory_like_text_never_panics(n in "[0-9.]{0,24}", sp in " ?", unit in "[KkMmGgTtPpIiBb]{0,3}") {
        let s = format!("{n}{sp}{unit}");
        if let Ok(b) = Bytes::parse(&s) {
            // whatever parses prints as something that parses back (within the 2-decimal rounding)
            let back = Bytes::parse(&b.to_string()).unwrap();
            prop_assert!((back.0 as f64 - b.0 as f64).abs() <= b.0 as f64 * 0.005 + 1.0);
        }
    }

    #[test]
    fn memory_integers_round_trip_exactly(n in any::<u64>()) {
        prop_assert_eq!(Bytes::parse(&n.to_string()).unwrap(), Bytes(n));
        let json: Bytes = serde_json::from_value(Value::from(n)).unwrap();
        prop_assert_eq!(json, Bytes(n));
        let neg: Result<Bytes, _> = serde_json::from_value(Value::from(-(n as i128).clamp(1, i64::MAX as i128) as i64));
        prop_assert!(neg.is_err(), "negative memory is refused");
    }

    #[test]
    fn durations_parse_or_are_typed_errors(s in "\\PC{0,24}") {
        match Seconds::parse(&s) {
            Ok(d) => prop_assert_eq!(Seconds::parse(&d.to_string()).unwrap(), d),
            Err(CoreError::Quantity { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error kind: {e}"),
        }
    }

    #[test]
    fn duration_like_text_round_trips(s in "[0-9]{0,22}[smhdx]?([0-9]{0,3}[smhd])?") {
        if let Ok(d) = Seconds::parse(&s) {
            prop_assert_eq!(Seconds::parse(&d.to_string()).unwrap(), d);
        }
    }

    #[test]
    fn cpus_from_any_float(c in any::<f64>()) {
        match CpuMilli::from_cores(c) {
            Ok(m) => {
                prop_assert!((0.0..=1_000_000.0).contains(&c));
                prop_assert!((m.cores() - c).abs() <= 0.0005 + 1e-9 * c);
            }
            Err(_) => prop_assert!(!(0.0..=1_000_000.0).contains(&c)),
        }
    }

    #[test]
    fn names_follow_the_stated_rule(s in prop_oneof!["\\PC{0,70}", "[a-z0-9-]{0,70}", "[a-z][a-z0-9-]{0,64}"]) {
        prop_assert_eq!(names::validate("workload", &s).is_ok(), name_rule(&s), "{:?}", s);
    }

    #[test]
    fn env_policy_never_panics_and_keeps_its_promises(
        vars in prop::collection::btree_map("\\PC{0,20}", "\\PC{0,20}", 0..8),
    ) {
        let ok = env::check_user_env(&vars).is_ok();
        let clean = vars.iter().all(|(k, v)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_graphic()) && !k.contains('=') && !v.contains('\0')
                && env::reserved(k).is_none()
        });
        prop_assert_eq!(ok, clean && vars.len() <= env::MAX_VARIABLES && vars.keys().all(|k| k.len() <= env::MAX_NAME_BYTES));
    }

    #[test]
    fn reserved_names_are_refused_in_any_case(prefix in prop::sample::select(env::RESERVED_PREFIXES.to_vec()), rest in "[A-Za-z0-9_]{0,10}") {
        let name = format!("{prefix}{rest}");
        let vars = BTreeMap::from([(name.to_lowercase(), "1".to_owned())]);
        let allowed = env::ALLOWED_CUDA.contains(&name.to_uppercase().as_str());
        prop_assert_eq!(env::check_user_env(&vars).is_ok(), allowed);
    }

    #[test]
    fn quantity_json_text_deserializes_or_fails_cleanly(s in "\\PC{0,64}") {
        let _ = serde_json::from_str::<Bytes>(&s);
        let _ = serde_json::from_str::<Seconds>(&s);
    }
}
