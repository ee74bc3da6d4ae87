//! Property tests of the server's parsers that users reach: the config file (arbitrary TOML text and
//! config-like documents), `GPUHUB_*` variables with arbitrary values, the SSH gateway's login names,
//! and the app-proxy and terminal paths (arbitrary segments against an in-process hub: never a 5xx
//! or a panic, always a problem document).
//!
//! The case count is small by default so CI stays fast; `PROPTEST_CASES=100000` runs more.

use gpuhub_testkit as common;

use common::{Hub, job};
use gpuhub_server::access::parse_ssh_user;
use gpuhub_server::config::Config;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::json;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() }
}

/// Every server variable, and one no setting has.
fn keys() -> Vec<&'static str> {
    let mut keys = gpuhub_server::config::env::SERVER_VARIABLES.to_vec();
    keys.push("NO_SUCH_KEY");
    keys
}

fn arb_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        "-?[0-9]{0,22}",
        prop::sample::select(vec![
            "",
            "0",
            "-1",
            "true",
            "yes",
            "NaN",
            "1e400",
            "18446744073709551616",
            "127.0.0.1:0",
            "[::1]:99999",
            "4GiB",
            "0B",
            "[]",
            "[{\"uuid\":\"x\"}]",
            "fifo",
            "drf",
            "10.0.0.0/33",
            "none",
            "mps",
        ])
        .prop_map(str::to_owned),
    ]
}

/// TOML-ish documents: known keys and tables with arbitrary values.
fn arb_toml() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "listen",
        "data_dir",
        "gpu_mode",
        "reconcile_secs",
        "log_max_bytes",
        "allow_any_image",
        "session_hours",
        "trusted_proxies",
        "gpus",
        "pids_limit",
        "x",
    ]);
    let value = prop_oneof![
        "-?[0-9]{1,22}".prop_map(|s| s),
        "\\PC{0,12}".prop_map(|s| format!("{s:?}")),
        prop::sample::select(vec!["true", "nan", "inf", "-inf", "1e400", "[]", "{}", "[1, \"a\"]", "\"4GiB\""])
            .prop_map(str::to_owned),
    ];
    let line = (key, value).prop_map(|(k, v)| format!("{k} = {v}"));
    let table = prop::sample::select(vec![
        "[limits]",
        "[scheduler]",
        "[[scheduler.queues]]",
        "[[priority_classes]]",
        "[[gpus]]",
        "[auth]",
    ])
    .prop_map(str::to_owned);
    prop::collection::vec(prop_oneof![3 => line, 1 => table], 0..10).prop_map(|l| l.join("\n"))
}

fn valid_name() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,20}[a-z0-9])?"
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn config_text_parses_or_says_why(text in "\\PC{0,80}") {
        if let Err(e) = Config::from_toml(&text) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn config_documents_parse_or_say_why(text in arb_toml()) {
        if let Err(e) = Config::from_toml(&text) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn gpuhub_variables_load_or_name_the_key(
        vars in prop::collection::vec((prop::sample::select(keys()), arb_value()), 0..4),
    ) {
        let env: Vec<(String, String)> = vars.iter().map(|(k, v)| (format!("GPUHUB_{k}"), v.clone())).collect();
        match Config::load(None, env.clone()) {
            Ok(_) => prop_assert!(vars.iter().all(|(k, _)| *k != "NO_SUCH_KEY")),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn ssh_user_names_round_trip(owner in valid_name(), name in valid_name()) {
        prop_assert_eq!(parse_ssh_user(&name), Some((None, name.as_str())));
        let both = format!("{owner}.{name}");
        prop_assert_eq!(parse_ssh_user(&both), Some((Some(owner.as_str()), name.as_str())));
    }

    #[test]
    fn ssh_user_names_accept_only_valid_parts(s in prop_oneof!["\\PC{0,40}", "[a-z./%\\\\+@-]{0,20}", "\\.{0,3}[a-z]{0,5}\\.{0,3}"]) {
        if let Some((owner, name)) = parse_ssh_user(&s) {
            prop_assert!(gpuhub_core::names::validate("workload", name).is_ok());
            prop_assert!(owner.is_none_or(|o| gpuhub_core::names::validate("user", o).is_ok()));
            prop_assert!(!s.contains('/') && !s.contains("..") && s.is_ascii());
        }
    }
}

/// One path segment that might trick a router or a proxy.
fn arb_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}",
        prop::sample::select(vec![
            "..",
            ".",
            "%2e%2e",
            "%2E%2E",
            "%252e%252e",
            "..%2f",
            "%2f",
            "%5c",
            "..\\",
            "%00",
            "%ff",
            "%E2%80%AE",
            "alice",
            "ws",
            "lab",
            "bob",
            "",
            "~",
            "%",
            "%zz",
            "a;b",
            "a?b",
            "ws#x",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z0-9%.~_-]{0,12}",
    ]
}

/// Arbitrary app-proxy and terminal paths, sent raw: a 4xx problem (or a redirect), never a 5xx.
#[test]
fn proxy_and_terminal_paths_never_fail_the_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (hub, token) = rt.block_on(async {
        let hub = Hub::start().await;
        let admin = hub.admin().await;
        let token = hub.user(&admin, "alice").await;
        let mut ws = job("ws", 0);
        ws["kind"] = json!("workspace");
        ws["apps"] = json!([{"name": "lab", "port": 8888}]);
        hub.submit(&token, ws).await;
        (hub, token)
    });
    let addr = hub.url.trim_start_matches("http://").to_owned();
    let strategy = (prop::sample::select(vec!["/w", "/terminal"]), prop::collection::vec(arb_segment(), 0..6));
    let mut runner =
        TestRunner::new(ProptestConfig { cases: cases(64), failure_persistence: None, ..Default::default() });
    runner
        .run(&strategy, |(root, segments)| {
            let path = format!("{root}/{}", segments.join("/"));
            // a user's own running app answers through its app (the fake has none listening: 502) —
            // not what this test is about
            let own_app = segments.len() >= 3 && segments[..3] == ["alice", "ws", "lab"];
            let (status, ctype) = rt.block_on(raw_get(&addr, &path, &token));
            prop_assert!(status != 0 && (status < 500 || own_app), "{path}: {status}");
            if (400..500).contains(&status) {
                prop_assert_eq!(ctype, "application/problem+json", "{}", path);
            }
            Ok(())
        })
        .unwrap();
    rt.block_on(async {
        let (s, _) = hub.call(reqwest::Method::GET, "/api/v1/health", None, None).await;
        assert_eq!(s, 200);
    });
}

async fn raw_get(addr: &str, path: &str, token: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let ctype = text
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    (status, ctype)
}
