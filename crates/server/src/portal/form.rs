//! The new-workload form: kind, image from the catalog (with its description and apps), CPUs,
//! memory, GPUs (whole or a share, a GPU model from what the nodes have), queue, time limit,
//! environment and apps; pre-filled from a workload for "run again with changes". A submission goes
//! through `service::submit` like the API's; every problem it refuses is shown beside the field it
//! names (the typed `errors`), with what was typed kept. A form the page cannot read whole (CPUs that
//! are no number) is still checked by the service for the rest (`service::prepare`), so that every
//! problem shows at once.

use super::{Fields, Viewer, api_error_page, check_form, field, layout, only_navigation};
use crate::error::ApiError;
use crate::service;
use crate::state::AppState;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use gpuhub_api::{CreateWorkloadRequest, ResourceRequest};
use gpuhub_core::parse::{self, GpuAsk};
use gpuhub_core::workload::{Workload, WorkloadKind};
use gpuhub_core::{Bytes, Seconds};
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the form holds: field name → text.
type Values = BTreeMap<&'static str, String>;
/// Errors by form field (`""`: the whole form).
type Errors = BTreeMap<&'static str, String>;

/// The form's fields, in order.
const FIELDS: [&str; 16] = [
    "kind",
    "name",
    "image",
    "image_other",
    "command",
    "cpus",
    "memory",
    "gpus",
    "gpu_memory",
    "gpu_model",
    "members",
    "queue",
    "runtime_limit",
    "env",
    "apps",
    "service_port",
];

/// The form field that shows an error about request field `api` (the problem's `field`).
fn form_field(api: &str) -> &'static str {
    match api {
        "name" => "name",
        "image" => "image",
        "command" => "command",
        "env" => "env",
        "apps" => "apps",
        "resources.cpus" => "cpus",
        "resources.memory" => "memory",
        "resources.gpus" | "resources.gpu_milli" => "gpus",
        "resources.gpu_memory" => "gpu_memory",
        "queue" => "queue",
        "constraint" => "gpu_model",
        "runtime_limit" => "runtime_limit",
        "members" => "members",
        "datasets" => "datasets",
        "teams" => "teams",
        "service" | "service.port" => "service_port",
        _ => "",
    }
}

/// `?from=NAME[&owner=]`: pre-fill from that workload.
#[derive(Debug, Deserialize)]
pub struct FromQuery {
    from: Option<String>,
    owner: Option<String>,
}

/// `GET /new`: the form, empty or from a workload.
pub async fn page(State(st): State<AppState>, viewer: Viewer, Query(q): Query<FromQuery>, req: Request) -> Response {
    if let Some(r) = only_navigation(&req) {
        return r;
    }
    let mut values: Values = [("kind", "job"), ("cpus", "1"), ("memory", "4GiB"), ("gpus", "0"), ("members", "1")]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
    if let Some(from) = &q.from {
        match service::lookup(&st, &viewer.user, from, q.owner.as_deref()).await {
            Ok(w) => values = prefill(&st, &w).await,
            Err(e) => return api_error_page(e.into()),
        }
    }
    render(&st, &viewer, &values, &Errors::new(), StatusCode::OK).await
}

/// The form's values for running `w` again.
async fn prefill(st: &AppState, w: &Workload) -> Values {
    let r = &w.resources;
    let catalog = st.store.list_images().await.unwrap_or_default();
    let entry = catalog.iter().find(|e| e.image == w.image);
    let mine = st.store.list_personal_images(&w.owner).await.unwrap_or_default();
    let mut v = Values::new();
    v.insert("kind", w.kind.as_str().to_owned());
    v.insert("name", format!("{}-again", w.name).chars().take(63).collect());
    match (mine.iter().find(|p| p.reference == w.image), entry) {
        (Some(p), _) => v.insert("image", p.name.clone()),
        (None, Some(e)) => v.insert("image", e.name.clone()),
        (None, None) => v.insert("image_other", w.image.clone()),
    };
    v.insert("command", w.command.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "));
    v.insert("cpus", format!("{}", r.cpu_milli.0 as f64 / 1000.0));
    v.insert("memory", r.memory.to_string());
    v.insert("gpus", if r.gpu_milli > 0 { format!("{}", f64::from(r.gpu_milli) / 1000.0) } else { r.gpus.to_string() });
    if let Some(m) = r.gpu_memory {
        v.insert("gpu_memory", m.to_string());
    }
    if let Some(c) = &w.constraint {
        v.insert("gpu_model", c.clone());
    }
    v.insert("members", w.size.max(1).to_string());
    v.insert("queue", w.queue.clone());
    if let Some(l) = w.runtime_limit {
        v.insert("runtime_limit", l.to_string());
    }
    if let Some(s) = &w.service {
        v.insert("service_port", s.spec.port.to_string());
    }
    v.insert("env", w.env.iter().map(|(k, x)| format!("{k}={x}")).collect::<Vec<_>>().join("\n"));
    let catalog_apps: BTreeSet<&str> =
        entry.map(|e| e.apps.iter().map(|a| a.name.as_str()).collect()).unwrap_or_default();
    let own: Vec<String> = w
        .apps
        .iter()
        .filter(|a| !catalog_apps.contains(a.name.as_str()))
        .map(|a| format!("{}:{}", a.name, a.port))
        .collect();
    v.insert("apps", own.join("\n"));
    v.insert("datasets", w.datasets.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(","));
    v.insert("teams", w.teams.iter().map(|t| t.queue.as_str()).collect::<Vec<_>>().join(","));
    v
}

/// An argument as the command field takes it back ([`parse::words`]).
pub(super) fn quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        a.to_owned()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// `POST /new`: submits; back to the form with the errors beside their fields, or on to the workload.
pub async fn submit(State(st): State<AppState>, viewer: Viewer, headers: HeaderMap, axum::Form(f): Fields) -> Response {
    if let Some(r) = check_form(&viewer, &headers, &f) {
        return r;
    }
    let mut values: Values = FIELDS.iter().map(|k| (*k, field(&f, k).unwrap_or_default().to_owned())).collect();
    let datasets: Vec<&str> = f.iter().filter(|(k, _)| k == "datasets").map(|(_, v)| v.as_str()).collect();
    values.insert("datasets", datasets.join(","));
    let teams: Vec<&str> = f.iter().filter(|(k, _)| k == "teams").map(|(_, v)| v.as_str()).collect();
    values.insert("teams", teams.join(","));
    let (req, mut errors) = read(&values);
    if !errors.is_empty() {
        // what the hub would refuse besides, of what could be read, shows with the rest; a field the
        // form could not read keeps its own message
        if let Err(e) = service::prepare(&st, &viewer.user, &req).await {
            if e.kind == service::Kind::Invalid {
                let theirs = beside_fields(&ApiError::from(e));
                for (k, m) in theirs {
                    errors.entry(k).or_insert(m);
                }
            }
        }
        return render(&st, &viewer, &values, &errors, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    match service::submit(&st, &viewer.user, &req).await {
        Ok(w) => Redirect::to(&format!("/workloads/{}", w.name)).into_response(),
        Err(e) => {
            let e = ApiError::from(e);
            if e.status.is_server_error() {
                return api_error_page(e);
            }
            render(&st, &viewer, &values, &beside_fields(&e), e.status).await
        }
    }
}

/// Every problem of a refusal, by the form field it shows beside (several about one field joined).
fn beside_fields(e: &ApiError) -> Errors {
    let mut errors = Errors::new();
    let one = [(e.field.clone().unwrap_or_default(), e.detail.clone())];
    let all: Vec<(String, String)> = if e.errors.is_empty() {
        one.into()
    } else {
        e.errors.iter().map(|p| (p.field.clone(), p.detail.clone())).collect()
    };
    for (field, detail) in all {
        errors
            .entry(form_field(&field))
            .and_modify(|m| {
                m.push_str("; ");
                m.push_str(&detail);
            })
            .or_insert(detail);
    }
    errors
}

/// The API request the form's values make, or what is wrong with them, by field.
#[cfg(test)]
fn request(v: &Values) -> Result<CreateWorkloadRequest, Errors> {
    let (req, errors) = read(v);
    if errors.is_empty() { Ok(req) } else { Err(errors) }
}

/// The errors in the order of the form's fields (the whole form's first), as the summary lists them.
fn in_form_order(errors: &Errors) -> impl Iterator<Item = (&'static str, &String)> {
    let order = std::iter::once("").chain(FIELDS).chain(["datasets", "teams"]);
    order.filter_map(|k| errors.get(k).map(|e| (k, e)))
}

/// The API request the form's values make, and what is wrong with them, by field; a field that
/// cannot be read is left out of the request (its default).
fn read(v: &Values) -> (CreateWorkloadRequest, Errors) {
    let mut errors = Errors::new();
    let text = |k: &str| v.get(k).map(|s| s.trim()).unwrap_or_default().to_owned();
    let some = |k: &str| Some(text(k)).filter(|s| !s.is_empty());
    let kind = match text("kind").as_str() {
        "workspace" => WorkloadKind::Workspace,
        "service" => WorkloadKind::Service,
        _ => WorkloadKind::Job,
    };
    // a service serves a port (the API checks the rest)
    let service = match (kind, some("service_port").map(|p| p.parse::<u16>())) {
        (WorkloadKind::Service, Some(Ok(port))) => {
            Some(gpuhub_core::service::ServiceSpec { port, ready: None, access: Default::default() })
        }
        (WorkloadKind::Service, _) => {
            errors.insert("service_port", "a service needs the port it serves (1 to 65535)".to_owned());
            None
        }
        _ => None,
    };
    let image = some("image_other").or_else(|| some("image")).unwrap_or_default();
    // what the API would refuse of the name and image, found here too, so that they show with the rest
    if image.is_empty() {
        errors.insert("image", "invalid image: choose one (the catalog, your saved images or a reference)".to_owned());
    }
    if let Some(Err(e)) = some("name").map(|n| gpuhub_core::names::validate("workload", &n)) {
        errors.insert("name", format!("invalid name: {e}"));
    }
    let command = match parse::words(&text("command")) {
        Ok(w) if w.is_empty() => None,
        Ok(w) => Some(w),
        Err(e) => {
            errors.insert("command", format!("invalid command: {e}"));
            None
        }
    };
    let cpus = match text("cpus").parse::<f64>() {
        Ok(c) => Some(c),
        Err(_) => {
            errors.insert("cpus", format!("invalid CPUs: {:?} is not a number", text("cpus")));
            None
        }
    };
    let mut bytes = |k: &'static str, what: &str| match some(k).map(|s| Bytes::parse(&s)) {
        None => None,
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => {
            errors.insert(k, format!("invalid {what}: {e}"));
            None
        }
    };
    let memory = bytes("memory", "memory");
    let gpu_memory = bytes("gpu_memory", "GPU memory");
    let (gpus, gpu_milli) = match parse::gpus(&text("gpus")) {
        Ok(GpuAsk::Whole(0)) => (None, None),
        Ok(GpuAsk::Whole(n)) => (Some(n), None),
        Ok(GpuAsk::Milli(m)) => (None, Some(m)),
        Err(e) => {
            errors.insert("gpus", format!("invalid GPUs: {e}"));
            (None, None)
        }
    };
    let members = match text("members").parse::<u32>() {
        Ok(1) => None,
        Ok(n) => Some(n),
        Err(_) => {
            errors.insert("members", format!("invalid members: {:?} is not a whole number", text("members")));
            None
        }
    };
    let runtime_limit = match some("runtime_limit").map(|s| Seconds::parse(&s)) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            errors.insert("runtime_limit", format!("invalid time limit: {e}"));
            None
        }
    };
    let mut env = BTreeMap::new();
    for line in text("env").lines().map(str::trim).filter(|l| !l.is_empty()) {
        match parse::env(line) {
            Ok((k, x)) => {
                env.insert(k, x);
            }
            Err(e) => {
                errors.insert("env", format!("invalid environment: {e}"));
            }
        }
    }
    let mut apps = Vec::new();
    for line in text("apps").lines().map(str::trim).filter(|l| !l.is_empty()) {
        match parse::app(line) {
            Ok(a) => apps.push(a),
            Err(e) => {
                errors.insert("apps", format!("invalid apps: {e}"));
            }
        }
    }
    let req = CreateWorkloadRequest {
        name: some("name"),
        kind,
        image,
        command,
        env,
        resources: ResourceRequest { cpus, memory, gpus, gpu_milli, gpu_memory },
        priority: None,
        priority_class: None,
        apps,
        queue: some("queue"),
        constraint: some("gpu_model"),
        runtime_limit,
        members,
        datasets: text("datasets").split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect(),
        teams: text("teams").split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect(),
        service,
        disk: None,
    };
    (req, errors)
}

/// The form with `values` and `errors`.
async fn render(st: &AppState, viewer: &Viewer, values: &Values, errors: &Errors, status: StatusCode) -> Response {
    let catalog = st.store.list_images().await.unwrap_or_default();
    // the viewer's saved workspaces, run by name like catalog images (and before them: a catalog
    // image of the same name is not reachable by that name)
    let mine = st.store.list_personal_images(&viewer.user.username).await.unwrap_or_default();
    let shadowed = |name: &str| mine.iter().any(|p| p.name == name);
    // the queues open to the viewer, with what each guarantees and what is in use now
    let queues: Vec<(String, f64, f64, u32)> = crate::service::queues::views(st, &viewer.user)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|q| q.open_to_you)
        .map(|q| (q.name, q.guarantee.gpus, q.used.gpus, q.queued))
        .collect();
    let datasets = st.store.list_datasets().await.unwrap_or_default();
    let chosen: BTreeSet<String> =
        values.get("datasets").map(|d| d.split(',').map(str::to_owned).collect()).unwrap_or_default();
    // the team folders the viewer may mount: queues with one whose members include them
    let me = &viewer.user.username;
    let teams: Vec<String> = st
        .store
        .list_queues()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|q| q.team_gid.is_some() && q.members.as_ref().is_none_or(|m| m.contains(me)))
        .map(|q| q.name)
        .collect();
    let chosen_teams: BTreeSet<String> =
        values.get("teams").map(|d| d.split(',').map(str::to_owned).collect()).unwrap_or_default();
    let models: BTreeSet<String> = st.nodes().iter().flat_map(|n| n.gpus.iter().map(|g| g.model.clone())).collect();
    let val = |k: &str| values.get(k).cloned().unwrap_or_default();
    let err = |k: &'static str| -> Markup {
        html! { @if let Some(e) = errors.get(k) { p.field-error id={(k) "-error"} role="alert" { (e) } } }
    };
    let invalid = |k: &'static str| if errors.contains_key(k) { Some("true") } else { None };
    let model_constraint = |m: &str| format!("gpu.model == \"{m}\"");
    let body = html! {
        h1 { "New workload" }
        @if errors.is_empty() { (super::launch::cards(viewer, &catalog)) }
        @if !errors.is_empty() {
            div.error-summary role="alert" {
                p.error { @if errors.len() == 1 { "One problem" } @else { (errors.len()) " problems" } ", shown beside each field:" }
                ul { @for (k, e) in in_form_order(errors) { li data-field=(k) { (e) } } }
            }
        }
        h2 #form-title { "Or say what to run" }
        form.new.grouped method="post" action="/new" novalidate aria-labelledby="form-title" {
            input type="hidden" name="_csrf" value=(viewer.csrf);
            fieldset.group #what {
            legend { "What to run" }
            fieldset {
                legend { "Kind" }
                label { input type="radio" name="kind" value="job" checked[val("kind") != "workspace"]; " Job (runs its command to the end)" }
                label { input type="radio" name="kind" value="workspace" checked[val("kind") == "workspace"]; " Workspace (stays up: Jupyter, terminal, SSH)" }
                label { input type="radio" name="kind" value="service" checked[val("kind") == "service"]; " Service (kept running, restarted when it exits, served at a URL)" }
                label { "Service port " input name="service_port" value=(val("service_port")) placeholder="e.g. 8080 (services only)" aria-invalid=[invalid("service_port")]; }
                (err("service_port"))
            }
            label { "Name " input name="name" value=(val("name")) placeholder="generated when empty" aria-invalid=[invalid("name")]; }
            (err("name"))
            label { "Image "
                select name="image" aria-invalid=[invalid("image")] {
                    option value="" { "—" }
                    @if !mine.is_empty() {
                        optgroup label="Your saved images" {
                            @for p in &mine {
                                option value=(p.name) selected[val("image") == p.name] {
                                    (p.name) " — saved from " (p.workload) ", " (Bytes(p.size_bytes))
                                }
                            }
                        }
                    }
                    optgroup label="Catalog" {
                        @for e in &catalog {
                            option value=(e.name) selected[val("image") == e.name && !shadowed(&e.name)] disabled[shadowed(&e.name)] {
                                (e.name) @if !e.description.is_empty() { " — " (e.description) }
                                @if !e.apps.is_empty() { " (apps: " (e.apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")) ")" }
                                @if shadowed(&e.name) { " (your saved image of this name is used instead)" }
                            }
                        }
                    }
                }
            }
            @if st.config.allow_any_image {
                label { "or an image reference " input name="image_other" value=(val("image_other")) placeholder="busybox:latest"; }
            }
            (err("image"))
            label { "Command " input name="command" value=(val("command")) placeholder="the image's default when empty" aria-invalid=[invalid("command")]; }
            (err("command"))
            }
            fieldset.group #resources {
            legend { "Resources" }
            label { "CPUs " input name="cpus" value=(val("cpus")) inputmode="decimal" aria-invalid=[invalid("cpus")]; }
            (err("cpus"))
            label { "Memory " input name="memory" value=(val("memory")) aria-invalid=[invalid("memory")]; }
            (err("memory"))
            label { "GPUs " input name="gpus" value=(val("gpus")) inputmode="decimal" aria-invalid=[invalid("gpus")] aria-describedby="gpus-help"; }
            small #gpus-help { "a whole number, or a share of one GPU such as 0.5" }
            (err("gpus"))
            label { "GPU memory for a share " input name="gpu_memory" value=(val("gpu_memory")) placeholder="e.g. 10GiB" aria-invalid=[invalid("gpu_memory")]; }
            (err("gpu_memory"))
            label { "GPU model "
                select name="gpu_model" aria-invalid=[invalid("gpu_model")] {
                    option value="" { "any" }
                    @for m in &models {
                        option value=(model_constraint(m)) selected[val("gpu_model") == model_constraint(m)] { (m) }
                    }
                    @if !val("gpu_model").is_empty() && !models.iter().any(|m| model_constraint(m) == val("gpu_model")) {
                        option value=(val("gpu_model")) selected { (val("gpu_model")) }
                    }
                }
            }
            (err("gpu_model"))
            label { "Members (a gang starts together) " input name="members" value=(val("members")) inputmode="numeric" aria-invalid=[invalid("members")]; }
            (err("members"))
            label { "Queue "
                select name="queue" aria-invalid=[invalid("queue")] {
                    option value="" { "default (your only queue, if you have one)" }
                    @for (q, guaranteed, used, waiting) in &queues {
                        option value=(q) selected[&val("queue") == q] {
                            (q) " — " (used) " of " (guaranteed) " guaranteed GPUs in use, " (waiting) " waiting"
                        }
                    }
                }
            }
            (err("queue"))
            label { "Time limit " input name="runtime_limit" value=(val("runtime_limit")) placeholder="e.g. 2h; none when empty" aria-invalid=[invalid("runtime_limit")]; }
            (err("runtime_limit"))
            }
            fieldset.group #storage {
            legend { "Storage" }
            p.hint { "Your home (/home/" (viewer.user.username) ") is mounted in every workload." }
            @if !datasets.is_empty() {
                fieldset aria-invalid=[invalid("datasets")] {
                    legend { "Datasets (at /datasets/NAME, read-only unless marked read-write)" }
                    @for d in &datasets {
                        label { input type="checkbox" name="datasets" value=(d.name) checked[chosen.contains(&d.name)];
                            " " (d.name) @if !d.read_only { " (read-write)" }
                            @if !d.description.is_empty() { " — " (d.description) } }
                    }
                }
            }
            (err("datasets"))
            @if !teams.is_empty() {
                fieldset aria-invalid=[invalid("teams")] {
                    legend { "Team folders (read-write at /team/NAME)" }
                    @for t in &teams {
                        label { input type="checkbox" name="teams" value=(t) checked[chosen_teams.contains(t)]; " " (t) }
                    }
                }
            }
            (err("teams"))
            }
            details.group #advanced open[errors.contains_key("env") || errors.contains_key("apps") || !val("env").is_empty() || !val("apps").is_empty()] {
            summary { "Advanced: environment and apps" }
            label { "Environment (one NAME=value a line) " textarea name="env" rows="3" aria-invalid=[invalid("env")] { (val("env")) } }
            (err("env"))
            label { "Apps the command serves (one name:port a line) " textarea name="apps" rows="2" aria-invalid=[invalid("apps")] { (val("apps")) } }
            (err("apps"))
            }
            button type="submit" { "Submit" }
        }
    };
    (status, layout(st, viewer, "New workload", body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&'static str, &str)]) -> Values {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn the_form_makes_the_request() {
        let v = values(&[
            ("kind", "workspace"),
            ("image", "jupyter"),
            ("command", "sh -c 'sleep 1; echo \"hi\"'"),
            ("cpus", "0.5"),
            ("memory", "2GiB"),
            ("gpus", "0.5"),
            ("gpu_memory", "10GiB"),
            ("members", "1"),
            ("env", "A=1\n\nB=x=y"),
            ("apps", "web:8000"),
        ]);
        let r = request(&v).unwrap();
        assert_eq!(r.kind, WorkloadKind::Workspace);
        assert_eq!(r.command.unwrap(), ["sh", "-c", "sleep 1; echo \"hi\""]);
        assert_eq!((r.resources.gpus, r.resources.gpu_milli), (None, Some(500)));
        assert_eq!(r.env.get("B").map(String::as_str), Some("x=y"));
        assert_eq!(r.apps[0].port, 8000);
        assert_eq!(r.name, None);
        let base = [("image", "x"), ("cpus", "1"), ("gpus", "0"), ("members", "1")];
        let with = |extra: &[(&'static str, &'static str)]| values(&[&base[..], extra].concat());
        let s = request(&with(&[("kind", "service"), ("service_port", "8080")])).unwrap();
        assert_eq!((s.kind, s.service.map(|s| s.port)), (WorkloadKind::Service, Some(8080)));
        let e = request(&with(&[("kind", "service")])).unwrap_err();
        assert!(e.get("service_port").is_some_and(|m| m.contains("port")), "{e:?}");
    }

    #[test]
    fn what_the_form_refuses_is_named_by_field() {
        let v = values(&[("cpus", "x"), ("gpus", "1.5"), ("memory", "lots"), ("env", "NOEQUALS"), ("members", "1")]);
        let e = request(&v).unwrap_err();
        assert_eq!(e.keys().copied().collect::<Vec<_>>(), ["cpus", "env", "gpus", "image", "memory"]);
        let named =
            request(&values(&[("name", "Bad Name"), ("image", "x"), ("cpus", "1"), ("gpus", "0"), ("members", "1")]));
        assert!(named.unwrap_err().get("name").is_some_and(|m| m.contains("invalid name")));
        assert_eq!(form_field("resources.gpus"), "gpus");
        assert_eq!(form_field("resources"), "");
    }

    #[test]
    fn every_problem_of_a_refusal_shows_beside_its_field() {
        use gpuhub_api::FieldProblem;
        let at = |field: &str, detail: &str| FieldProblem { field: field.into(), detail: detail.into() };
        let mut e = ApiError::unprocessable("invalid name: x").at("name");
        e.errors = vec![
            at("name", "invalid name: x"),
            at("resources.gpus", "too many"),
            at("resources.gpu_milli", "no shares here"),
            at("resources", "can never start"),
        ];
        let shown = beside_fields(&e);
        assert_eq!(shown.keys().copied().collect::<Vec<_>>(), ["", "gpus", "name"]);
        assert_eq!(shown["gpus"], "too many; no shares here");
        let order: Vec<&str> = in_form_order(&shown).map(|(k, _)| k).collect();
        assert_eq!(order, ["", "name", "gpus"]);
        // one problem without a list is shown beside its field too
        let one = beside_fields(&ApiError::unprocessable("invalid queue: none").at("queue"));
        assert_eq!(one.get("queue").map(String::as_str), Some("invalid queue: none"));
    }

    #[test]
    fn commands_come_back_as_typed() {
        let args = ["python", "a b.py", "it's", "--x=1"];
        let line = args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
        assert_eq!(parse::words(&line).unwrap(), args);
    }
}
