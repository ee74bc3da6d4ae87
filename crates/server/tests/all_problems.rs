//! A refused submission names every problem at once, each with its field: the API's problem lists them
//! in `errors` (its `detail` and `field` the first's), the portal's form shows each beside its field
//! with what was typed kept (also when the form itself cannot read a field), and the client prints
//! one a line with a non-zero end.

use gpuhub_testkit as common;

use common::Hub;
use reqwest::header::{COOKIE, SET_COOKIE};
use reqwest::{Method, StatusCode, redirect::Policy};
use serde_json::{Value, json};

/// The `(field, detail)` pairs of a problem's `errors`.
fn errors(v: &Value) -> Vec<(String, String)> {
    let list = v["errors"].as_array().unwrap_or_else(|| panic!("no errors list: {v}"));
    list.iter().map(|e| (e["field"].as_str().unwrap().to_owned(), e["detail"].as_str().unwrap().to_owned())).collect()
}

#[tokio::test]
async fn a_submission_with_several_bad_fields_is_refused_naming_each() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({
        "kind": "job",
        "name": "Bad Name",
        "image": "busybox:latest",
        "resources": {"cpus": 0.001, "memory": "1MiB", "gpus": 1},
        "members": 0,
        "queue": "nowhere",
        "runtime_limit": "400d",
        "env": {"NVIDIA_VISIBLE_DEVICES": "all"},
        "apps": [{"name": "web", "port": 8000}, {"name": "web", "port": 8001}],
    });
    let (status, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let all = errors(&v);
    let fields: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        ["name", "resources.cpus", "resources.memory", "members", "queue", "runtime_limit", "env", "apps"],
        "{v:#}"
    );
    // the first problem stays the document's detail and field, as before
    assert_eq!((v["detail"].as_str(), v["field"].as_str()), (Some(all[0].1.as_str()), Some("name")), "{v}");
    for (field, detail) in &all {
        assert!(!detail.is_empty() && detail.chars().next().is_some_and(|c| !c.is_uppercase()), "{field}: {detail}");
    }
    assert!(all[2].1.contains("at least 6MiB"), "{:?}", all[2]);
    assert!(all[7].1.contains("web is declared twice"), "{:?}", all[7]);
    let (status, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!((status, list.as_array().map(Vec::len)), (StatusCode::OK, Some(0)), "nothing was stored: {list}");

    // one problem: listed too, so that a client reads the list alone
    let (status, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(common::job("Bad Name", 0))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(errors(&v), [("name".to_owned(), v["detail"].as_str().unwrap().to_owned())], "{v}");
    // the OpenAPI document describes the list
    let (_, doc) = hub.call(Method::GET, "/api/v1/openapi.json", None, None).await;
    let schemas = &doc["components"]["schemas"];
    let items = &schemas["Problem"]["properties"]["errors"]["items"];
    assert_eq!(items["$ref"], "#/components/schemas/FieldProblem", "{:#}", schemas["Problem"]);
    assert_eq!(schemas["FieldProblem"]["required"], json!(["field", "detail"]), "{:#}", schemas["FieldProblem"]);
    // an error about no field has no list
    let (status, v) = hub.call(Method::GET, "/api/v1/workloads/missing", Some(&alice), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(v.get("errors").is_none() && v.get("field").is_none(), "{v}");
}

/// A browser's session on the hub: its cookie and the CSRF token of its pages.
async fn session(hub: &Hub, user: &str) -> (reqwest::Client, String, String) {
    let browser = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
    let body = json!({"username": user, "password": format!("{user}-password")});
    let r = browser.post(format!("{}/api/v1/login", hub.url)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let r = browser.get(format!("{}/new", hub.url)).header(COOKIE, &cookie).header("sec-fetch-mode", "navigate");
    let page = r.send().await.unwrap().text().await.unwrap();
    let csrf = page.split("name=\"_csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    (browser, cookie, csrf)
}

/// The message the form shows beside `field`, if any.
fn beside<'a>(page: &'a str, field: &str) -> Option<&'a str> {
    let after = page.split(&format!("id=\"{field}-error\"")).nth(1)?;
    after.split_once('>')?.1.split("</p>").next()
}

#[tokio::test]
async fn the_form_shows_every_problem_beside_its_field_keeping_what_was_typed() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let (browser, cookie, csrf) = session(&hub, "alice").await;
    let post = |fields: Vec<(&'static str, &'static str)>| {
        let mut form = fields;
        form.push(("_csrf", Box::leak(csrf.clone().into_boxed_str())));
        browser.post(format!("{}/new", hub.url)).header("origin", hub.url.clone()).header(COOKIE, &cookie).form(&form)
    };
    // three problems the hub finds (too little memory, a time limit over a year, an app twice)
    let r = post(vec![
        ("kind", "job"),
        ("name", "keep-me"),
        ("image_other", "busybox:latest"),
        ("command", "python train.py"),
        ("cpus", "2"),
        ("memory", "1MiB"),
        ("gpus", "0"),
        ("members", "1"),
        ("runtime_limit", "400d"),
        ("apps", "web:8000\nweb:8001"),
    ]);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let page = r.text().await.unwrap();
    assert!(beside(&page, "memory").is_some_and(|m| m.contains("6MiB")), "memory: {:?}", beside(&page, "memory"));
    assert!(beside(&page, "runtime_limit").is_some_and(|m| m.contains("366d")), "{:?}", beside(&page, "runtime_limit"));
    assert!(beside(&page, "apps").is_some_and(|m| m.contains("declared twice")), "{:?}", beside(&page, "apps"));
    for good in ["name", "cpus", "command", "image", "gpus"] {
        assert_eq!(beside(&page, good), None, "no error beside {good}");
    }
    assert!(page.contains("3 problems, shown beside each field"), "the summary");
    for kept in ["value=\"keep-me\"", "value=\"python train.py\"", "name=\"cpus\" value=\"2\"", "value=\"400d\""] {
        assert!(page.contains(kept), "{kept} kept");
    }
    // a field the form cannot read, and the hub's problems with the rest, at once
    let r = post(vec![
        ("kind", "job"),
        ("image_other", "busybox:latest"),
        ("cpus", "lots"),
        ("memory", "1MiB"),
        ("gpus", "0"),
        ("members", "0"),
    ]);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let page = r.text().await.unwrap();
    assert!(beside(&page, "cpus").is_some_and(|m| m.contains("not a number")), "{:?}", beside(&page, "cpus"));
    assert!(beside(&page, "memory").is_some_and(|m| m.contains("6MiB")), "{:?}", beside(&page, "memory"));
    assert!(beside(&page, "members").is_some_and(|m| m.contains("at least 1")), "{:?}", beside(&page, "members"));
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!(list.as_array().map(Vec::len), Some(0), "nothing was stored: {list}");
}

#[tokio::test]
async fn the_client_prints_every_problem_one_a_line() {
    use clap::Parser;
    use gpuhub_client::{ClientCli, Context, run_with};
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = Context::new(dir.path()).with_password("alice-password");
    let cli = |args: Vec<&str>| {
        let parsed = ClientCli::try_parse_from(std::iter::once("gpuhub").chain(args)).unwrap();
        let ctx = &ctx;
        async move {
            let mut out = Vec::new();
            let r = run_with(ctx, parsed.global, parsed.command, &mut out).await;
            (r, String::from_utf8(out).unwrap())
        }
    };
    let (r, _) = cli(vec!["login", "--server", &hub.url, "--user", "alice"]).await;
    assert_eq!(r.unwrap(), 0);
    let (r, out) = cli(vec![
        "run",
        "--name",
        "Bad Name",
        "--image",
        "busybox:latest",
        "--memory",
        "1MiB",
        "--time-limit",
        "400d",
        "--",
        "true",
    ])
    .await;
    let e = r.expect_err("refused");
    assert_eq!(e.status(), Some(422), "{e}");
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "a heading and one line a problem: {text}");
    assert_eq!(lines[0], "3 problems (HTTP 422):");
    assert!(lines[1].contains("invalid workload name") || lines[1].contains("name"), "{text}");
    assert!(lines[2].contains("resources.memory") && lines[2].contains("6MiB"), "{text}");
    assert!(lines[3].contains("runtime_limit"), "{text}");
    assert!(out.is_empty(), "nothing on standard output: {out}");
}

#[tokio::test]
async fn a_service_update_with_several_bad_fields_is_refused_naming_each() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let body = json!({"name": "web", "kind": "service", "image": "busybox:latest", "command": ["httpd", "v1"],
        "resources": {"cpus": 1, "memory": "1GiB"}, "service": {"port": 8000}});
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "web", "running").await;
    let bad = json!({"command": ["httpd", "v\u{0}2"], "env": {"NVIDIA_VISIBLE_DEVICES": "all"}});
    let (status, v) = hub.call(Method::PATCH, "/api/v1/workloads/web", Some(&alice), Some(bad)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let all = errors(&v);
    let fields: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(fields, ["command", "env"], "{v:#}");
    assert!(all[0].1.contains("NUL"), "{:?}", all[0]);
    assert!(all[1].1.contains("NVIDIA_VISIBLE_DEVICES"), "{:?}", all[1]);
    // nothing changed
    let (status, w) = hub.call(Method::GET, "/api/v1/workloads/web", Some(&alice), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((&w["command"], &w["env"]), (&json!(["httpd", "v1"]), &json!({})), "{w}");
}
