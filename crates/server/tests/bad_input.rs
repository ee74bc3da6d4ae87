//! The bad-input suite: every user-reachable route gets hostile input (bodies over the limit, deeply
//! nested JSON, huge and non-finite numbers, negative and zero quantities, unicode tricks and control
//! characters in names, wrong content types and methods, path tricks) and must answer a 4xx
//! `application/problem+json` whose detail names the problem — never a 5xx, never a panic — and stay
//! healthy afterwards.
//!
//! Requests go over a raw TCP connection so that paths reach the server byte for byte (an HTTP client
//! library would normalise `..` and `%2e%2e` away before sending).

use gpuhub_testkit as common;

use common::{Hub, job};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One raw HTTP/1.1 exchange: the status, the content type and the body.
async fn raw(hub: &Hub, method: &str, path: &str, token: Option<&str>, ctype: Option<&str>, body: &[u8]) -> Answer {
    let addr = hub.url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(c) = ctype {
        head.push_str(&format!("Content-Type: {c}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).await.unwrap();
    // the server may answer (413) and close before reading all of an oversized body
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = headers.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let ctype = headers
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    let json = body.find('{').and_then(|i| serde_json::from_str::<Value>(&body[i..=body.rfind('}')?]).ok());
    Answer { status, ctype, detail: json.and_then(|v| v["detail"].as_str().map(str::to_owned)).unwrap_or_default() }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    ctype: String,
    detail: String,
}

/// Who sends a case.
#[derive(Clone, Copy)]
enum Who {
    Nobody,
    User,
    Admin,
}

struct Case {
    method: &'static str,
    path: String,
    who: Who,
    ctype: Option<&'static str>,
    body: Vec<u8>,
    /// The exact status, or `None` for any 4xx.
    status: Option<u16>,
    /// Words the detail must hold (case-insensitive).
    detail: &'static str,
}

fn case(
    method: &'static str,
    path: impl Into<String>,
    who: Who,
    body: Option<Value>,
    status: u16,
    detail: &'static str,
) -> Case {
    let (ctype, body) = match body {
        Some(v) => (Some("application/json"), serde_json::to_vec(&v).unwrap()),
        None => (None, Vec::new()),
    };
    Case { method, path: path.into(), who, ctype, body, status: (status != 0).then_some(status), detail }
}

fn raw_case(method: &'static str, path: &str, who: Who, body: &str, status: u16, detail: &'static str) -> Case {
    Case {
        method,
        path: path.into(),
        who,
        ctype: Some("application/json"),
        body: body.as_bytes().to_vec(),
        status: (status != 0).then_some(status),
        detail,
    }
}

/// Every route that takes a JSON body, with a valid body for it.
fn json_routes() -> Vec<(&'static str, &'static str, Who, Value)> {
    vec![
        ("POST", "/api/v1/login", Who::Nobody, json!({"username": "alice", "password": "alice-password"})),
        ("POST", "/api/v1/me/password", Who::User, json!({"current_password": "x", "new_password": "y"})),
        ("POST", "/api/v1/users", Who::Admin, json!({"username": "carol", "password": "carol-password"})),
        ("PATCH", "/api/v1/users/alice", Who::Admin, json!({"disabled": false})),
        ("POST", "/api/v1/workloads", Who::User, job("j1", 0)),
        ("POST", "/api/v1/me/ssh-keys", Who::User, json!({"key": "ssh-ed25519 AAAA"})),
        ("POST", "/api/v1/images", Who::Admin, json!({"name": "bb", "image": "busybox:latest"})),
        ("POST", "/api/v1/queues", Who::Admin, json!({"name": "newq"})),
        ("PATCH", "/api/v1/queues/team", Who::Admin, json!({"weight": 2})),
        (
            "POST",
            "/api/v1/reservations",
            Who::Admin,
            json!({"queue": "team", "gpus": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z"}),
        ),
    ]
}

/// A workload request with `resources` replaced.
fn with_resources(resources: Value) -> Value {
    let mut j = job("r", 0);
    j["resources"] = resources;
    j
}

fn with(field: &str, value: Value) -> Value {
    let mut j = job("f", 0);
    j[field] = value;
    j
}

/// Names no rule should let through: unicode tricks, control characters, path tricks, sizes.
const BAD_NAMES: &[&str] = &[
    "",
    "a\u{202e}b",
    "a\u{200b}b",
    "\u{1f600}",
    "e\u{301}",
    "a\0b",
    "a\nb",
    "a\x1b[31mb",
    "../etc",
    "a/b",
    "a b",
    "A",
    "-a",
    "a.b",
    "a%2fb",
];

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let over = vec![b' '; 3 << 20];
    let deep = "[".repeat(100_000);
    for (method, path, who, body) in json_routes() {
        // over the body limit
        let mut big = b"{\"pad\": \"".to_vec();
        big.extend_from_slice(&over);
        big.extend_from_slice(b"\"}");
        v.push(Case {
            method,
            path: path.into(),
            who,
            ctype: Some("application/json"),
            body: big,
            status: Some(413),
            detail: "limit",
        });
        v.push(raw_case(method, path, who, &deep, 0, "invalid request body"));
        v.push(raw_case(method, path, who, "{\"a\": NaN}", 0, "invalid request body"));
        v.push(raw_case(method, path, who, "{", 400, "eof"));
        // (serde would read a struct of optional fields from `[]`: an empty PATCH, once answered 200)
        v.push(raw_case(method, path, who, "[]", 422, "expected a json object"));
        v.push(raw_case(method, path, who, " [\"x\"]", 422, "expected a json object"));
        v.push(raw_case(method, path, who, "null", 422, "invalid request body"));
        v.push(raw_case(method, path, who, "{\"no_such_field\": 1}", 422, "unknown field"));
        v.push(Case {
            method,
            path: path.into(),
            who,
            ctype: Some("application/json"),
            body: vec![b'{', 0xff, 0xfe, b'}'],
            status: Some(400),
            detail: "invalid request body",
        });
        for ctype in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            v.push(Case {
                method,
                path: path.into(),
                who,
                ctype: Some(ctype),
                body: serde_json::to_vec(&body).unwrap(),
                status: Some(415),
                detail: "content-type",
            });
        }
        v.push(Case {
            method,
            path: path.into(),
            who,
            ctype: None,
            body: Vec::new(),
            status: Some(415),
            detail: "content-type",
        });
    }

    // huge, non-finite, negative and zero quantities
    let w = "/api/v1/workloads";
    for (res, detail) in [
        (json!({"cpus": -1}), "resources.cpus"),
        (json!({"cpus": 0}), "resources.cpus"),
        (json!({"cpus": 1e300}), "resources.cpus"),
        (json!({"cpus": "NaN"}), "resources.cpus"),
        (json!({"cpus": "Infinity"}), "resources.cpus"),
        (json!({"cpus": 0.001}), "resources.cpus"),
        (json!({"memory": -1}), "resources.memory"),
        (json!({"memory": 0}), "resources.memory"),
        (json!({"memory": "0"}), "resources.memory"),
        (json!({"memory": "-1GiB"}), "resources.memory"),
        (json!({"memory": "NaN"}), "resources.memory"),
        (json!({"memory": "inf"}), "resources.memory"),
        (json!({"memory": "1e400"}), "resources.memory"),
        (json!({"memory": "99999999999999TiB"}), "resources.memory"),
        (json!({"memory": "4PiB"}), "resources.memory"),
        (json!({"memory": u64::MAX}), "resources.memory"),
        (json!({"memory": 1.5}), "resources.memory"),
        (json!({"gpus": -1}), "resources.gpus"),
        (json!({"gpus": 4_294_967_296u64}), "resources.gpus"),
        (json!({"gpus": 1.5}), "resources.gpus"),
        (json!({"gpus": 100}), "gpu"),
        (json!({"gpu_milli": 0}), "resources.gpu_milli"),
        (json!({"gpu_milli": 1000}), "resources.gpu_milli"),
        (json!({"gpu_milli": -1}), "resources.gpu_milli"),
        (json!({"gpu_milli": 500, "gpu_memory": "0"}), "resources.gpu_memory"),
        (json!({"gpu_milli": 500, "gpu_memory": "-1GiB"}), "resources.gpu_memory"),
        (json!({"gpu_milli": 500, "gpu_memory": "1e400"}), "resources.gpu_memory"),
        (json!({"gpu_memory": "1GiB"}), "resources.gpu_memory"),
        (json!({"cpus": 1, "extra": 1}), "unknown field"),
    ] {
        v.push(case("POST", w, Who::User, Some(with_resources(res)), 0, detail));
    }
    // numbers JSON cannot hold or that do not fit
    for (body, detail) in [
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"cpus\":1e400}}",
            "number out of range",
        ),
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"memory\":18446744073709551616}}",
            "resources.memory",
        ),
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"gpus\":18446744073709551616}}",
            "resources.gpus",
        ),
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"cpus\":Infinity}}",
            "invalid request body",
        ),
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"cpus\":NaN}}",
            "invalid request body",
        ),
        (
            "{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"resources\":{\"memory\":-1e400}}",
            "number out of range",
        ),
        ("{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"priority\":2147483648}", "priority"),
        ("{\"name\":\"x\",\"kind\":\"job\",\"image\":\"busybox:latest\",\"runtime_limit\":-1}", "runtime_limit"),
    ] {
        v.push(raw_case("POST", w, Who::User, body, 0, detail));
    }
    for (field, value, detail) in [
        ("runtime_limit", json!(0), "runtime_limit"),
        ("runtime_limit", json!("0s"), "runtime_limit"),
        ("runtime_limit", json!("-1h"), "runtime_limit"),
        ("runtime_limit", json!("NaN"), "runtime_limit"),
        ("runtime_limit", json!("99999999999999999999d"), "runtime_limit"),
        ("runtime_limit", json!("400d"), "runtime_limit"),
        ("members", json!(0), "members"),
        ("members", json!(4_294_967_296u64), "members"),
        ("members", json!(-1), "members"),
        ("kind", json!("daemon"), "kind"),
        ("kind", json!("job\0"), "kind"),
        ("image", json!(""), "image"),
        ("image", json!("busybox\n:latest"), "image"),
        ("image", json!("busybox\u{202e}"), "image"),
        ("image", json!("busy box"), "image"),
        ("image", json!("a".repeat(10_000)), "image"),
        ("command", json!(["a\0b"]), "command"),
        ("command", json!("true"), "command"),
        ("env", json!({"A=B": "x"}), "env"),
        ("env", json!({"": "x"}), "env"),
        ("env", json!({"A\0": "x"}), "env"),
        ("env", json!({"\u{202e}": "x"}), "env"),
        ("env", json!({"A": "x\0y"}), "env"),
        ("env", json!({"A": 1}), "env"),
        ("queue", json!("../default"), "queue"),
        ("queue", json!("q\0"), "queue"),
        ("queue", json!("\u{202e}"), "queue"),
        ("constraint", json!("(".repeat(100_000)), "constraint"),
        ("constraint", json!("gpu.model == "), "constraint"),
        ("constraint", json!("\0"), "constraint"),
        ("constraint", json!("gpu.memory >= 1e400GiB"), "constraint"),
        ("priority_class", json!("\u{202e}"), "priority"),
        ("apps", json!([{"name": "lab", "port": 0}]), "port"),
        ("apps", json!([{"name": "lab", "port": 70000}]), "apps"),
        ("apps", json!([{"name": "lab", "port": -1}]), "apps"),
    ] {
        v.push(case("POST", w, Who::User, Some(with(field, value)), 0, detail));
    }
    for name in BAD_NAMES {
        v.push(case("POST", w, Who::User, Some(with("name", json!(name))), 422, "workload"));
        v.push(case("POST", w, Who::User, Some(with("apps", json!([{"name": name, "port": 8888}]))), 422, "app"));
        v.push(case(
            "POST",
            "/api/v1/users",
            Who::Admin,
            Some(json!({"username": name, "password": "long-enough-password"})),
            422,
            "user",
        ));
        v.push(case(
            "POST",
            "/api/v1/images",
            Who::Admin,
            Some(json!({"name": name, "image": "busybox:latest"})),
            422,
            "image",
        ));
        v.push(case("POST", "/api/v1/login", Who::Nobody, Some(json!({"username": name, "password": "x"})), 0, ""));
    }
    v.push(case("POST", "/api/v1/workloads", Who::User, Some(with("name", json!("a".repeat(64)))), 422, "63"));
    v.push(case("POST", "/api/v1/images", Who::Admin, Some(json!({"name": "bb", "image": "busy\nbox"})), 422, "image"));
    v.push(case(
        "POST",
        "/api/v1/images",
        Who::Admin,
        Some(json!({"name": "bb", "image": "busybox:latest", "apps": [{"name": "a\u{202e}", "port": 1}]})),
        422,
        "app",
    ));
    v.push(case(
        "POST",
        "/api/v1/users",
        Who::Admin,
        Some(json!({"username": "dave", "password": ""})),
        422,
        "password",
    ));
    v.push(case(
        "POST",
        "/api/v1/users",
        Who::Admin,
        Some(json!({"username": "dave", "password": "x".repeat(1 << 20)})),
        422,
        "password",
    ));
    v.push(case(
        "POST",
        "/api/v1/users",
        Who::Admin,
        Some(json!({"username": "dave", "password": "pass\0word-long"})),
        422,
        "password",
    ));
    // ssh keys: garbage, control characters and unicode in the key line and its comment
    for key in [
        "",
        "ssh-ed25519",
        "ssh-ed25519 AAAA\0",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a\u{202e}b\n",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl \x1b[2J",
        "\u{1f600} AAAA",
    ] {
        v.push(case("POST", "/api/v1/me/ssh-keys", Who::User, Some(json!({"key": key, "signature": "x"})), 422, "key"));
    }
    // reservations
    let r = "/api/v1/reservations";
    let res =
        |q: Value, gpus: Value, start: &str, end: &str| json!({"queue": q, "gpus": gpus, "start": start, "end": end});
    for (body, detail) in [
        (res(json!("team"), json!(0), "2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z"), "gpus"),
        (res(json!("team"), json!(-1), "2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z"), "gpus"),
        (res(json!("team"), json!(4_294_967_296u64), "2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z"), "gpus"),
        (res(json!("team"), json!(1), "2030-01-02T00:00:00Z", "2030-01-01T00:00:00Z"), "end"),
        (res(json!("team"), json!(1), "+275760-09-13T00:00:00Z", "+275760-09-14T00:00:00Z"), "out of range"),
        (res(json!("team"), json!(1), "NaN", "2030-01-01T00:00:00Z"), "start"),
        (res(json!("a\u{202e}"), json!(1), "2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z"), "queue"),
        (res(json!("\0"), json!(1), "2030-01-01T00:00:00Z", "2030-01-02T00:00:00Z"), "queue"),
    ] {
        v.push(case("POST", r, Who::Admin, Some(body), 0, detail));
    }

    // query strings
    for path in [
        "/api/v1/workloads",
        "/api/v1/users",
        "/api/v1/me/tokens",
        "/api/v1/me/ssh-keys",
        "/api/v1/images",
        "/api/v1/nodes",
        "/api/v1/reservations",
    ] {
        for (q, detail) in [
            ("limit=-1", "limit"),
            ("limit=0", "limit"),
            ("limit=1e400", "limit"),
            ("limit=NaN", "limit"),
            ("limit=18446744073709551616", "limit"),
            ("limit=1001", "limit"),
            ("cursor=%00%ff", "cursor"),
            ("cursor=..%2F..%2Fetc", "cursor"),
            ("cursor=", "cursor"),
            ("limit=1&limit=2", "limit"),
        ] {
            v.push(case("GET", format!("{path}?{q}"), Who::Admin, None, 400, detail));
        }
    }
    for (q, detail) in [
        ("tail=-1", "tail"),
        ("tail=1e400", "tail"),
        ("tail=18446744073709551616", "tail"),
        ("limit_bytes=0", "limit_bytes"),
        ("limit_bytes=-1", "limit_bytes"),
        ("follow=maybe", "follow"),
        ("nonsense=1", "nonsense"),
    ] {
        v.push(case("GET", format!("/api/v1/workloads/ws/logs?{q}"), Who::User, None, 0, detail));
    }
    // `owner` is for admins (a user's own is implied): tricks in it find nothing
    for q in ["owner=..%2Fbob", "owner=%E2%80%AE", "owner=%00", "owner=alice%2F..%2Fbob", "owner="] {
        v.push(case("GET", format!("/api/v1/workloads/ws/logs?{q}"), Who::Admin, None, 404, "no workload"));
        v.push(case("GET", format!("/api/v1/workloads/ws?{q}"), Who::Admin, None, 404, "no workload"));
        v.push(case("POST", format!("/api/v1/workloads/ws/stop?{q}"), Who::Admin, None, 404, "no workload"));
    }
    v.push(case("GET", "/api/v1/workloads/ws?bogus=1", Who::User, None, 400, "bogus"));
    v.push(case("DELETE", "/api/v1/users/bob?keep=maybe", Who::Admin, None, 400, "invalid query"));
    v.push(case("POST", "/api/v1/workloads/ws/stop?bogus=1", Who::User, None, 400, "bogus"));

    // names in paths: unicode, control characters, traversal, encodings
    for seg in [
        "%00",
        "%E2%80%AE",
        "%F0%9F%98%80",
        "..",
        "..%2F..%2Fusers",
        "%2e%2e",
        "%252e%252e",
        "a%5C..%5Cb",
        "%ff",
        &"a".repeat(5000),
    ] {
        for (method, path, who) in [
            ("GET", format!("/api/v1/workloads/{seg}"), Who::User),
            ("DELETE", format!("/api/v1/workloads/{seg}"), Who::User),
            ("POST", format!("/api/v1/workloads/{seg}/stop"), Who::User),
            ("POST", format!("/api/v1/workloads/{seg}/start"), Who::User),
            ("GET", format!("/api/v1/workloads/{seg}/logs"), Who::User),
            ("GET", format!("/api/v1/users/{seg}"), Who::Admin),
            ("DELETE", format!("/api/v1/users/{seg}"), Who::Admin),
            ("DELETE", format!("/api/v1/me/tokens/{seg}"), Who::User),
            ("DELETE", format!("/api/v1/me/ssh-keys/{seg}"), Who::User),
            ("DELETE", format!("/api/v1/reservations/{seg}"), Who::Admin),
            ("DELETE", format!("/api/v1/queues/{seg}"), Who::Admin),
        ] {
            v.push(case(method, path, who, None, 0, ""));
        }
        v.push(case("PATCH", format!("/api/v1/users/{seg}"), Who::Admin, Some(json!({"disabled": true})), 0, ""));
        // the app proxy and the terminal: path tricks in owner, workspace and app
        for path in [
            format!("/w/{seg}/ws/lab/"),
            format!("/w/alice/{seg}/lab/"),
            format!("/w/alice/ws/{seg}/"),
            format!("/w/alice/ws/{seg}/x"),
            format!("/w/{seg}/{seg}/{seg}/"),
            format!("/terminal/{seg}/ws/"),
            format!("/terminal/alice/{seg}/"),
            format!("/terminal/alice/ws/{seg}"),
        ] {
            v.push(case("GET", path, Who::User, None, 0, ""));
        }
    }
    // an app root without its slash redirects only for valid names (a decoded NUL once gave a 500)
    for path in ["/w/alice/ws/%00", "/w/alice/%0a/lab", "/w/%E2%80%AE/ws/lab", "/w/alice/ws/..%2F"] {
        v.push(case("GET", path, Who::User, None, 404, "no such app"));
    }
    // (what follows a user's own app prefix goes to that app unchanged: it is the app's to judge)
    for path in [
        "/w/bob/ws/lab/",
        "/w/alice/../bob/ws/lab/",
        "/w/alice/%2e%2e/bob/lab/",
        "/w/alice\\..\\bob/ws/lab/",
        "/w/alice/ws%2F..%2F..%2Fbob/lab/",
        "/w/%2F/ws/lab/",
        "/terminal/bob/ws/",
        "/terminal/alice/ws/..%2F..%2Fetc%2Fpasswd",
        "/terminal/alice/ws/%2e%2e",
    ] {
        v.push(case("GET", path, Who::User, None, 0, ""));
    }

    // queues: numbers and names no queue may have
    for body in [
        json!({"name": "q1", "weight": -1}),
        json!({"name": "q2", "weight": 1e300}),
        json!({"name": "q3", "weight": "NaN"}),
        json!({"name": "q4", "guarantee": {"gpus": -2}}),
        json!({"name": "q5", "user_limit": {"memory": "-1GiB"}}),
        json!({"name": "Q\u{202e}x"}),
        json!({"name": "q\nx"}),
        json!({"name": "q7", "members": ["\u{0}"]}),
    ] {
        v.push(case("POST", "/api/v1/queues", Who::Admin, Some(body), 0, ""));
    }
    v.push(case("PATCH", "/api/v1/queues/team", Who::Admin, Some(json!({"weight": -3})), 0, ""));
    v.push(case("PATCH", "/api/v1/queues/team", Who::Admin, Some(json!({"colour": "red"})), 0, "colour"));

    // wrong methods
    for (method, path) in [
        ("PUT", "/api/v1/workloads"),
        ("PATCH", "/api/v1/login"),
        ("DELETE", "/api/v1/health"),
        ("PUT", "/api/v1/queues"),
        ("POST", "/api/v1/queues/team"),
        ("POST", "/api/v1/nodes"),
        ("PUT", "/api/v1/users/alice"),
        ("GET", "/api/v1/workloads/ws/stop"),
        ("GET", "/api/v1/logout"),
        ("DELETE", "/api/v1/images"),
        ("POST", "/api/v1/me"),
        ("TRACE", "/api/v1/me"),
        ("PUT", "/login"),
    ] {
        v.push(case(method, path, Who::Admin, None, 405, "method not allowed"));
    }
    v.push(case("GET", "/api/v1/no-such-thing", Who::User, None, 404, "no such endpoint"));
    v.push(case("GET", format!("/api/{}", "x".repeat(8000)), Who::User, None, 404, "no such endpoint"));
    // no or a bad token on every authenticated route
    for path in ["/api/v1/me", "/api/v1/workloads", "/api/v1/users", "/api/v1/queues", "/api/v1/nodes", "/api/v1/info"]
    {
        v.push(case("GET", path, Who::Nobody, None, 401, ""));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_input_gets_4xx_problems_and_the_server_stays_healthy() {
    let hub = Hub::start_with(|c| c.scheduler.queues = vec![gpuhub_sched::QueueSpec::open("team")]).await;
    let admin = hub.admin().await;
    let user = hub.user(&admin, "alice").await;
    hub.user(&admin, "bob").await;
    let mut ws = job("ws", 0);
    ws["kind"] = json!("workspace");
    ws["apps"] = json!([{"name": "lab", "port": 8888}]);
    hub.submit(&user, ws).await;
    hub.wait_state(&user, "ws", "running").await;

    let mut failures = Vec::new();
    let cases = cases();
    for c in &cases {
        let token = match c.who {
            Who::Nobody => None,
            Who::User => Some(user.as_str()),
            Who::Admin => Some(admin.as_str()),
        };
        let a = raw(&hub, c.method, &c.path, token, c.ctype, &c.body).await;
        let shown = |s: &str| s.chars().take(120).collect::<String>().escape_debug().to_string();
        let what = format!("{} {} {}", c.method, shown(&c.path), shown(&String::from_utf8_lossy(&c.body)));
        let status_ok = match c.status {
            Some(s) => a.status == s,
            None => (400..500).contains(&a.status),
        };
        if !status_ok || a.ctype != "application/problem+json" || !a.detail.to_lowercase().contains(c.detail) {
            failures.push(format!("{what}\n    expected {:?} ~{:?}, got {a:?}", c.status, c.detail));
        }
        if a.status == 0 || a.status >= 500 {
            let (s, _) = hub.call(reqwest::Method::GET, "/api/v1/health", None, None).await;
            assert_eq!(s, 200, "unhealthy after {what}");
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));

    // still healthy and still serving the same state
    let (s, _) = hub.call(reqwest::Method::GET, "/api/v1/health", None, None).await;
    assert_eq!(s, 200);
    let w = hub.get(&user, "ws").await;
    assert_eq!(w["state"], "running");
    let (s, list) = hub.call(reqwest::Method::GET, "/api/v1/workloads", Some(&user), None).await;
    assert_eq!(s, 200);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "no bad request created a workload: {list}");
    let (s, users) = hub.call(reqwest::Method::GET, "/api/v1/users", Some(&admin), None).await;
    assert_eq!(s, 200);
    assert_eq!(users.as_array().map(Vec::len), Some(3), "no bad request created a user: {users}");
}
