//! The error answers of every operation in the OpenAPI document, by rule rather than by hand: every
//! error is an `application/problem+json` [`gpuhub_api::Problem`], and each operation documents
//! the answers its shape can give — 401 and 403 where a caller must be signed in, 404 where the path
//! names something, 400 where it reads a query or a body, 413, 415 and 422 where it reads a body, 409
//! where it changes something, 429 where submissions or logins are counted, and 503 (the database out of
//! reach, with `Retry-After`) everywhere but `health`. Generated clients then know every answer the
//! server can give.

use serde_json::{Map, Value, json};

const PROBLEM: &str = "#/components/schemas/Problem";

/// What each status means, as the document says it.
fn description(status: &str) -> &'static str {
    match status {
        "400" => "the query or body cannot be read (malformed JSON, a bad query value)",
        "401" => "not signed in: no valid token",
        "403" => "signed in, but not allowed (admins only, a disabled account)",
        "404" => "no such object for this caller",
        "409" => "the object is not in a state that allows this, or it exists already",
        "413" => "the body is too large",
        "415" => "the body is not application/json",
        "422" => "the request is well-formed but a value is not acceptable (the problem names the field)",
        "429" => "too many tries or too much queued work: try again later",
        "503" => "the database cannot be reached now: try again after Retry-After",
        _ => "an error",
    }
}

/// Adds the error answers to every operation of `doc` and makes every error answer a problem document.
pub(crate) fn document(doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let Ok(mut v) = serde_json::to_value(&doc) else { return doc };
    if let Some(paths) = v.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else { continue };
            for (method, op) in item.iter_mut() {
                if let Some(op) = op.as_object_mut() {
                    operation(path, method, op);
                }
            }
        }
    }
    serde_json::from_value(v).unwrap_or(doc)
}

fn operation(path: &str, method: &str, op: &mut Map<String, Value>) {
    let anonymous = op
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|reqs| reqs.iter().any(|r| r.as_object().is_some_and(Map::is_empty)));
    let has_body = op.contains_key("requestBody");
    let has_query =
        op.get("parameters").and_then(Value::as_array).is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"));
    let changes = matches!(method, "post" | "put" | "patch" | "delete");
    let mut wanted: Vec<&str> = Vec::new();
    if !anonymous {
        wanted.extend(["401", "403"]);
    }
    if path.contains('{') {
        wanted.push("404");
    }
    if has_body || has_query {
        wanted.extend(["400", "422"]);
    }
    if has_body {
        wanted.extend(["413", "415"]);
    }
    if changes {
        wanted.push("409");
    }
    if path == "/api/v1/login" || (method == "post" && path == "/api/v1/workloads") {
        wanted.push("429");
    }
    if path != "/api/v1/health" {
        wanted.push("503");
    }
    let responses = op.entry("responses").or_insert_with(|| json!({}));
    let Some(responses) = responses.as_object_mut() else { return };
    for status in wanted {
        responses.entry(status).or_insert_with(|| json!({"description": description(status)}));
    }
    for (status, r) in responses.iter_mut() {
        if status.starts_with('4') || status.starts_with('5') {
            problem(status, r);
        }
    }
}

/// Makes an error answer a problem document (whatever body type it named).
fn problem(status: &str, r: &mut Value) {
    let Some(r) = r.as_object_mut() else { return };
    let desc = r.get("description").and_then(Value::as_str).unwrap_or_default();
    if desc.is_empty() {
        r.insert("description".into(), json!(description(status)));
    }
    r.insert("content".into(), json!({"application/problem+json": {"schema": {"$ref": PROBLEM}}}));
    if status == "503" || status == "429" {
        let headers = r.entry("headers").or_insert_with(|| json!({}));
        if let Some(h) = headers.as_object_mut() {
            h.entry("Retry-After").or_insert_with(
                || json!({"description": "seconds to wait before trying again", "schema": {"type": "integer"}}),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_problems_and_answers_follow_the_operation() {
        let doc = super::super::openapi();
        let v = serde_json::to_value(&doc).unwrap();
        let op = &v["paths"]["/api/v1/workloads/{name}"]["delete"]["responses"];
        for s in ["401", "403", "404", "409", "503"] {
            assert_eq!(op[s]["content"]["application/problem+json"]["schema"]["$ref"], PROBLEM, "{s}: {op}");
        }
        assert!(op.get("415").is_none(), "no body, no 415: {op}");
        let create = &v["paths"]["/api/v1/workloads"]["post"]["responses"];
        for s in ["400", "413", "415", "422", "429"] {
            assert!(create[s].is_object(), "{s}: {create}");
        }
        assert!(create["503"]["headers"]["Retry-After"].is_object(), "{create}");
        let health = &v["paths"]["/api/v1/health"]["get"]["responses"];
        assert!(health.get("401").is_none() && health.get("503").is_none(), "{health}");
        let login = &v["paths"]["/api/v1/login"]["post"]["responses"];
        assert!(login.get("401").is_some(), "login answers a wrong password with 401: {login}");
        // no error answer is plain JSON anywhere
        let text = v.to_string();
        for (path, item) in v["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, r) in op["responses"].as_object().unwrap() {
                    if status.starts_with('4') || status.starts_with('5') {
                        let content = r["content"].as_object().unwrap();
                        assert!(
                            content.keys().all(|k| k == "application/problem+json"),
                            "{method} {path} {status}: {content:?}"
                        );
                    }
                }
            }
        }
        assert!(!text.is_empty());
    }
}
