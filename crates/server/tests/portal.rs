//! The portal over HTTP, as a browser sends it (session cookie, form posts), on the fake engine: the
//! authorisation matrix of its routes (admin / owner / other user / anonymous; a refused call leaves
//! the owner's workload as it was), its guards (CSRF token, same-origin, page loads only for pages
//! with a token, security headers), the form's errors beside the field the API's problem names, and
//! live changes (server-sent events, then the page's live fragment).

use gpuhub_testkit as common;

use common::{ADMIN_PASSWORD, Hub};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode, redirect::Policy};
use serde_json::json;

/// A browser's session: its cookie and the CSRF token its pages carry.
struct Session {
    cookie: String,
    csrf: String,
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().unwrap()
}

async fn session(hub: &Hub, user: &str, password: &str) -> Session {
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_owned();
    let page = get(hub, Some(&cookie), "/new").await.1;
    let csrf = page.split("name=\"_csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    Session { cookie, csrf }
}

/// A page load: status, body, `Location`.
async fn get(hub: &Hub, cookie: Option<&str>, path: &str) -> (StatusCode, String, String) {
    let mut req = browser().get(format!("{}{path}", hub.url)).header("sec-fetch-mode", "navigate");
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let location = r.headers().get(LOCATION).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, r.text().await.unwrap(), location)
}

/// A form post from the portal's own page.
async fn post(hub: &Hub, s: Option<&Session>, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String, String) {
    let mut form: Vec<(&str, &str)> = fields.to_vec();
    let mut req = browser().post(format!("{}{path}", hub.url)).header("origin", hub.url.clone());
    if let Some(s) = s {
        form.push(("_csrf", &s.csrf));
        req = req.header(COOKIE, &s.cookie);
    }
    let r = req.form(&form).send().await.unwrap();
    let status = r.status();
    let location = r.headers().get(LOCATION).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, r.text().await.unwrap(), location)
}

/// A workload that takes little of the fake node (its runs never end by themselves).
fn small(name: &str, kind: &str) -> serde_json::Value {
    json!({"name": name, "kind": kind, "image": "busybox:latest", "command": ["sleep", "infinity"],
        "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}})
}

#[tokio::test]
async fn every_portal_route_by_every_caller() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.user(&admin, "bob").await;
    let sessions = [
        Some(session(&hub, "admin", ADMIN_PASSWORD).await),
        Some(session(&hub, "alice", "alice-password").await),
        Some(session(&hub, "bob", "bob-password").await),
        None,
    ];
    let who = ["admin", "owner", "other", "anonymous"];
    let mut n = 0;
    // pages: admin sees alice's with ?owner=, others' ?owner= is ignored (their own: none by that name)
    let pages: [(&str, [u16; 4]); 29] = [
        ("/", [303, 303, 303, 303]),
        ("/nodes", [200, 200, 200, 303]),
        ("/nodes/test-node?range=hour", [200, 200, 200, 303]),
        ("/nodes?fragment=live", [200, 200, 200, 303]),
        ("/usage", [200, 200, 200, 303]),
        ("/usage?range=month&by=queue&format=csv", [200, 200, 200, 303]),
        ("/usage?user=alice", [200, 200, 403, 303]),
        ("/workloads/{w}/chart?owner=alice", [200, 200, 404, 303]),
        ("/queues", [200, 200, 200, 303]),
        ("/account", [200, 200, 200, 303]),
        ("/admin/users", [200, 403, 403, 303]),
        ("/admin/images", [200, 403, 403, 303]),
        ("/admin/queues", [303, 403, 403, 303]),
        ("/admin/dashboard", [200, 403, 403, 303]),
        ("/admin/dashboard?range=week", [200, 403, 403, 303]),
        ("/admin/dashboard?range=year", [400, 403, 403, 303]),
        ("/images", [200, 200, 200, 303]),
        ("/favicon.ico", [200, 200, 200, 200]),
        ("/static/favicon.svg", [200, 200, 200, 200]),
        ("/workloads", [200, 200, 200, 303]),
        ("/workloads?owner=alice", [200, 200, 403, 303]),
        ("/workloads?all=true", [200, 403, 403, 303]),
        ("/workloads/{w}?owner=alice", [200, 200, 404, 303]),
        ("/workloads/{w}/logs?owner=alice", [200, 200, 404, 303]),
        ("/workloads/{w}/stop?owner=alice", [200, 200, 404, 303]),
        ("/new?from={w}&owner=alice", [200, 200, 404, 303]),
        ("/static/portal.js", [200, 200, 200, 200]),
        // no OpenID provider here: nothing to sign in through, for anyone
        ("/login/oidc", [404, 404, 404, 404]),
        ("/login/oidc/callback?code=x&state=y", [403, 403, 403, 403]),
    ];
    for (path, expect) in pages {
        n += 1;
        let w = format!("w{n}");
        hub.submit(&alice, small(&w, "job")).await;
        let path = path.replace("{w}", &w);
        for (i, s) in sessions.iter().enumerate() {
            let (status, body, location) = get(&hub, s.as_ref().map(|s| s.cookie.as_str()), &path).await;
            assert_eq!(status.as_u16(), expect[i], "GET {path} as {}: {body}", who[i]);
            if s.is_none() && status == StatusCode::SEE_OTHER {
                assert!(location.starts_with("/login?next="), "GET {path}: to {location}");
            }
        }
    }
    // forms: each caller acts on a fresh workload of alice's; a refusal leaves it as it was
    let forms: [(&str, &str, [u16; 4]); 3] = [
        ("/workloads/{w}/stop", "running", [303, 303, 404, 303]),
        ("/workloads/{w}/start", "stopped", [303, 303, 404, 303]),
        ("/workloads/{w}/delete", "running", [303, 303, 404, 303]),
    ];
    for (path, before, expect) in forms {
        for (i, s) in sessions.iter().enumerate() {
            n += 1;
            let w = format!("w{n}");
            hub.submit(
                &alice,
                json!({"name": w, "kind": "workspace", "image": "busybox:latest",
                "command": ["sleep", "infinity"], "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}}),
            )
            .await;
            hub.wait_state(&alice, &w, "running").await;
            if before == "stopped" {
                let (st, v) = hub.call(Method::POST, &format!("/api/v1/workloads/{w}/stop"), Some(&alice), None).await;
                assert_eq!(st, StatusCode::OK, "{v}");
            }
            let path = path.replace("{w}", &w);
            let (status, body, _) = post(&hub, s.as_ref(), &path, &[("owner", "alice")]).await;
            assert_eq!(status.as_u16(), expect[i], "POST {path} as {}: {body}", who[i]);
            if status != StatusCode::SEE_OTHER || s.is_none() {
                let v = hub.get(&alice, &w).await;
                assert_eq!(v["state"], before, "{} refused, yet {w} changed: {v}", who[i]);
            }
        }
    }
    // a new workload from the form, for each signed-in caller; the anonymous one is sent to log in
    for (i, s) in sessions.iter().enumerate() {
        let name = format!("form{i}");
        let fields = [
            ("kind", "job"),
            ("name", &name),
            ("image_other", "busybox:latest"),
            ("command", "true"),
            ("cpus", "0.1"),
            ("memory", "64MiB"),
            ("gpus", "0"),
            ("members", "1"),
        ];
        let (status, body, location) = post(&hub, s.as_ref(), "/new", &fields).await;
        match s {
            Some(_) => {
                assert_eq!(status, StatusCode::SEE_OTHER, "POST /new as {}: {body}", who[i]);
                assert_eq!(location, format!("/workloads/{name}"));
            }
            None => assert!(status == StatusCode::SEE_OTHER && location.starts_with("/login"), "{status} {location}"),
        }
    }
    // a launch card: a workspace of the image with the defaults, on to its page
    for (i, s) in sessions.iter().enumerate() {
        let (status, body, location) = post(&hub, s.as_ref(), "/new/launch", &[("image", "busybox:latest")]).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "POST /new/launch as {}: {body}", who[i]);
        match s {
            Some(_) => assert!(location.starts_with("/workloads/"), "launched as {}: to {location}", who[i]),
            None => assert!(location.starts_with("/login"), "{location}"),
        }
    }
    // a saved image is deleted only by its owner: nobody has one named so, so each caller is told so
    for (i, s) in sessions.iter().enumerate() {
        let (status, body, location) = post(&hub, s.as_ref(), "/images/nosuch/delete", &[]).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "POST /images/nosuch/delete as {}: {body}", who[i]);
        let want = if s.is_some() { "/images?error=" } else { "/login" };
        assert!(location.starts_with(want), "as {}: to {location}", who[i]);
    }
    // admin forms: only admins; a refused one adds or changes nothing
    hub.user(&admin, "erin").await;
    for (i, s) in sessions.iter().enumerate() {
        let user = format!("dave{i}");
        let (status, body, loc) =
            post(&hub, s.as_ref(), "/admin/users", &[("username", &user), ("password", "dave-password")]).await;
        let want = [303, 403, 403, 303][i];
        assert_eq!(status.as_u16(), want, "POST /admin/users as {}: {body} to {loc}", who[i]);
        let (st, _) = hub.call(Method::GET, &format!("/api/v1/users/{user}"), Some(&admin), None).await;
        assert_eq!(st == StatusCode::OK, i == 0, "{user} after {}'s form", who[i]);
        let (status, body, _) = post(&hub, s.as_ref(), "/admin/users/erin/disable", &[]).await;
        assert_eq!(status.as_u16(), want, "POST /admin/users/erin/disable as {}: {body}", who[i]);
        let (_, v) = hub.call(Method::GET, "/api/v1/users/erin", Some(&admin), None).await;
        assert_eq!(v["disabled"] == true, i == 0, "erin after {}'s form: {v}", who[i]);
        if i == 0 {
            let (st, v) =
                hub.call(Method::PATCH, "/api/v1/users/erin", Some(&admin), Some(json!({"disabled": false}))).await;
            assert_eq!(st, StatusCode::OK, "{v}");
        }
        let image = format!("img{i}");
        let fields = [("name", image.as_str()), ("image", "busybox:latest"), ("apps", "web:8000=httpd -f")];
        let (status, body, _) = post(&hub, s.as_ref(), "/admin/images", &fields).await;
        assert_eq!(status.as_u16(), want, "POST /admin/images as {}: {body}", who[i]);
        let listed = hub.call(Method::GET, "/api/v1/images", Some(&admin), None).await.1.to_string();
        assert_eq!(listed.contains(&format!("\"{image}\"")), i == 0, "{image} after {}'s form: {listed}", who[i]);
    }
    // queues, reservations and the catalog's removals: only admins
    let keep = json!({"name": "keep", "image": "busybox:latest"});
    assert_eq!(hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(keep)).await.0, StatusCode::CREATED);
    for (i, s) in sessions.iter().enumerate() {
        let want = [303, 403, 403, 303][i];
        let q = format!("q{i}");
        let (status, body, _) = post(&hub, s.as_ref(), "/admin/queues", &[("name", &q), ("guarantee_gpus", "1")]).await;
        assert_eq!(status.as_u16(), want, "POST /admin/queues as {}: {body}", who[i]);
        let queues = hub.call(Method::GET, "/api/v1/queues", Some(&admin), None).await.1;
        let named = |n: &str| queues.as_array().unwrap().iter().find(|v| v["name"] == n).cloned();
        assert_eq!(named(&q).is_some(), i == 0, "{q} after {}'s form: {queues}", who[i]);
        let weight = format!("{}", i + 2);
        let (status, body, _) =
            post(&hub, s.as_ref(), "/admin/queues/q0", &[("weight", &weight), ("guarantee_gpus", "1")]).await;
        assert_eq!(status.as_u16(), want, "POST /admin/queues/q0 as {}: {body}", who[i]);
        let queues = hub.call(Method::GET, "/api/v1/queues", Some(&admin), None).await.1;
        let q0 = queues.as_array().unwrap().iter().find(|v| v["name"] == "q0").cloned().unwrap();
        assert_eq!(q0["weight"], 2.0, "q0's weight after {}'s form: {q0}", who[i]);
        let booking =
            [("queue", "q0"), ("gpus", "1"), ("start", "2031-01-01T00:00:00Z"), ("end", "2031-01-01T01:00:00Z")];
        let (status, body, _) = post(&hub, s.as_ref(), "/admin/reservations", &booking).await;
        assert_eq!(status.as_u16(), want, "POST /admin/reservations as {}: {body}", who[i]);
        let booked = hub.call(Method::GET, "/api/v1/reservations", Some(&admin), None).await.1;
        assert_eq!(booked.as_array().unwrap().len(), 1, "reservations after {}'s form: {booked}", who[i]);
        let (status, body, _) = post(&hub, s.as_ref(), "/admin/images/keep/remove", &[]).await;
        let removed = i == 0;
        if !removed {
            assert_eq!(status.as_u16(), want, "POST /admin/images/keep/remove as {}: {body}", who[i]);
        }
        let listed = hub.call(Method::GET, "/api/v1/images", Some(&admin), None).await.1.to_string();
        assert_eq!(listed.contains("\"keep\""), !removed, "keep after {}'s form", who[i]);
        if removed {
            let keep = json!({"name": "keep", "image": "busybox:latest"});
            assert_eq!(hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(keep)).await.0, StatusCode::CREATED);
        }
    }
    // logging out ends the session
    let (status, _, location) = post(&hub, sessions[2].as_ref(), "/logout", &[]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/login"));
    let (status, _, _) = get(&hub, Some(&sessions[2].as_ref().unwrap().cookie), "/workloads").await;
    assert_eq!(status, StatusCode::SEE_OTHER, "after logging out");
}

#[tokio::test]
async fn the_portal_guards_its_forms_and_shows_errors_beside_their_field() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let s = session(&hub, "alice", "alice-password").await;
    let url = |p: &str| format!("{}{p}", hub.url);

    // headers of every page
    let r = browser().get(url("/workloads")).header(COOKIE, &s.cookie).send().await.unwrap();
    let h = r.headers();
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "same-origin");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-store");

    // a page with a token opens only as a page: a script's fetch of it is refused
    let r = browser().get(url("/new")).header(COOKIE, &s.cookie).header("sec-fetch-mode", "cors").send().await;
    assert_eq!(r.unwrap().status(), StatusCode::FORBIDDEN);

    // a form without the token, with another's, from another site: refused, nothing made
    let fields = [
        ("kind", "job"),
        ("name", "sneaky"),
        ("image_other", "busybox:latest"),
        ("cpus", "1"),
        ("memory", "64MiB"),
        ("gpus", "0"),
        ("members", "1"),
    ];
    let no_token = browser().post(url("/new")).header(COOKIE, &s.cookie).form(&fields).send().await.unwrap();
    assert_eq!(no_token.status(), StatusCode::FORBIDDEN);
    let mut with = fields.to_vec();
    with.push(("_csrf", &s.csrf));
    for (header, value) in [("origin", "http://evil.example"), ("sec-fetch-site", "cross-site")] {
        let r = browser().post(url("/new")).header(COOKIE, &s.cookie).header(header, value).form(&with);
        assert_eq!(r.send().await.unwrap().status(), StatusCode::FORBIDDEN, "{header}: {value}");
    }
    hub.user(&admin, "bob").await;
    let other = session(&hub, "bob", "bob-password").await;
    let mut stolen = fields.to_vec();
    stolen.push(("_csrf", &other.csrf));
    let r = browser().post(url("/new")).header(COOKIE, &s.cookie).form(&stolen).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "another session's token");
    let (status, v) = hub.call(Method::GET, "/api/v1/workloads/sneaky", Some(&alice), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");

    // 99 GPUs: the API's problem names resources.gpus, and the form shows it beside the GPUs field,
    // keeping what was typed
    let (status, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(common::job("big", 99))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(v["field"], "resources.gpus", "{v}");
    let big = [
        ("kind", "job"),
        ("name", "big"),
        ("image_other", "busybox:latest"),
        ("command", "python train.py"),
        ("cpus", "1"),
        ("memory", "1GiB"),
        ("gpus", "99"),
        ("members", "1"),
    ];
    let (status, body, _) = post(&hub, Some(&s), "/new", &big).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let beside = body.split("id=\"gpus-error\"").nth(1).expect("an error beside the GPUs field");
    assert!(beside.split("</p>").next().unwrap().contains("99 GPUs"), "{beside}");
    assert!(body.contains("name=\"gpus\" value=\"99\"") && body.contains("value=\"python train.py\""), "kept");
    // what the form itself cannot read is named by field too
    let bad = [
        ("kind", "job"),
        ("image_other", "busybox:latest"),
        ("cpus", "lots"),
        ("memory", "1GiB"),
        ("gpus", "1.5"),
        ("members", "1"),
    ];
    let (status, body, _) = post(&hub, Some(&s), "/new", &bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("id=\"cpus-error\"") && body.contains("id=\"gpus-error\""), "{body}");
    // every problem at once: a summary above the form names both, the cards give way to it
    let summary = body.split("class=\"error-summary\"").nth(1).expect("a summary of the problems");
    let summary = summary.split("</div>").next().unwrap();
    assert!(summary.contains("2 problems") && summary.contains("CPUs") && summary.contains("GPUs"), "{summary}");
    assert!(!body.contains("class=\"cards\""), "no cards over a form with errors");

    // the form in groups, and a card per catalog image (one click: a workspace of it)
    let entry = json!({"name": "lab", "image": "busybox:latest", "description": "JupyterLab",
        "apps": [{"name": "lab", "port": 8888, "command": ["httpd", "-f"]}]});
    assert_eq!(hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(entry)).await.0, StatusCode::CREATED);
    let (status, page, _) = get(&hub, Some(&s.cookie), "/new").await;
    assert_eq!(status, StatusCode::OK);
    for group in ["id=\"what\"", "id=\"resources\"", "id=\"storage\"", "id=\"advanced\""] {
        assert!(page.contains(group), "the form's group {group}");
    }
    let card = page.split("data-image=\"lab\"").nth(1).expect("a card for the catalog's lab");
    let card = card.split("</li>").next().unwrap();
    assert!(card.contains("JupyterLab") && card.contains("action=\"/new/launch\""), "{card}");
    let (status, _, location) = post(&hub, Some(&s), "/new/launch", &[("image", "lab")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let launched = location.strip_prefix("/workloads/").expect("on to the workspace's page");
    let v = hub.get(&alice, launched).await;
    assert_eq!((v["kind"].as_str(), v["image"].as_str()), (Some("workspace"), Some("busybox:latest")), "{v}");
    assert!(v["apps"].to_string().contains("8888"), "the catalog's app: {v}");

    // no PyTorch image in the catalog (its build is about 3 GiB): its card says so and how an admin adds
    // it, and starts nothing; once the catalog has it, the card starts it
    let card = page.split("data-image=\"pytorch\"").nth(1).expect("the PyTorch card").split("</li>").next().unwrap();
    assert!(card.contains("Not installed") && card.contains("scripts/build-pytorch-image.sh"), "{card}");
    assert!(card.contains("disabled") && !card.contains("/new/launch"), "{card}");
    let entry = json!({"name": "pytorch", "image": "busybox:latest", "description": "PyTorch job"});
    assert_eq!(hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(entry)).await.0, StatusCode::CREATED);
    let page = get(&hub, Some(&s.cookie), "/new").await.1;
    let card = page.split("data-image=\"pytorch\"").nth(1).expect("the PyTorch card").split("</li>").next().unwrap();
    assert!(card.contains("PyTorch job") && card.contains("action=\"/new/launch\""), "{card}");
    assert!(!card.contains("Not installed") && !card.contains("disabled"), "{card}");
    let (status, _, location) = post(&hub, Some(&s), "/new/launch", &[("image", "pytorch")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let v = hub.get(&alice, location.strip_prefix("/workloads/").expect("on to the workspace's page")).await;
    assert_eq!((v["kind"].as_str(), v["image"].as_str()), (Some("workspace"), Some("busybox:latest")), "{v}");

    // the login page has the portal's headers too (its script is a file of the portal's)
    let r = browser().get(url("/login")).send().await.unwrap();
    assert!(r.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));
    assert!(!r.text().await.unwrap().contains("<script>"), "no inline script");

    // an API token from the account page: shown once, works, and a bad expiry is refused
    let (status, body, _) = post(&hub, Some(&s), "/account/tokens", &[("days", "2")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let token = body.split("id=\"token\">").nth(1).unwrap().split('<').next().unwrap().to_owned();
    let (st, v) = hub.call(Method::GET, "/api/v1/me", Some(&token), None).await;
    assert_eq!((st, v["username"].as_str()), (StatusCode::OK, Some("alice")), "{v}");
    let (status, _, location) = post(&hub, Some(&s), "/account/tokens", &[("days", "0")]).await;
    assert!(status == StatusCode::SEE_OTHER && location.contains("error=invalid%20days"), "{location}");
    let (st, v) = hub.call(Method::POST, "/api/v1/me/tokens", Some(&alice), Some(json!({"days": 99999}))).await;
    assert_eq!((st, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("days")), "{v}");

    // an SSH key from the account page: the page's command writes exactly the challenge, and a key
    // signed over it is added; a key without its proof is not
    let (_, page, _) = get(&hub, Some(&s.cookie), "/account").await;
    let command = page.split("id=\"challenge-command\">").nth(1).unwrap().split("</pre>").next().unwrap();
    let printf = command.lines().next().unwrap().replace("&#39;", "'").replace(" > challenge.txt", "");
    let keydir = tempfile::tempdir().unwrap();
    let made = std::process::Command::new("sh").arg("-c").arg(&printf).output().unwrap();
    let message = String::from_utf8(made.stdout).unwrap();
    let nonce = page.split("name=\"nonce\" value=\"").nth(1).unwrap().split('"').next().unwrap();
    assert!(message.starts_with("gpuhub ssh key registration\nuser: alice\n"), "{printf}");
    assert!(
        message.contains(&format!("\nnonce: {nonce}\n")),
        "the form sends the printed challenge's nonce: {message}"
    );
    let private = keydir.path().join("id");
    let ok =
        std::process::Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&private).status();
    assert!(ok.unwrap().success());
    std::fs::write(keydir.path().join("challenge.txt"), &message).unwrap();
    let signed = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "gpuhub-ssh-key", "-f"])
        .arg(&private)
        .arg(keydir.path().join("challenge.txt"))
        .status();
    assert!(signed.unwrap().success());
    let public = std::fs::read_to_string(private.with_extension("pub")).unwrap();
    let signature = std::fs::read_to_string(keydir.path().join("challenge.txt.sig")).unwrap();
    let (status, _, location) = post(&hub, Some(&s), "/account/keys", &[("key", &public), ("signature", "")]).await;
    assert!(status == StatusCode::SEE_OTHER && location.contains("error="), "{location}");
    let (status, _, location) =
        post(&hub, Some(&s), "/account/keys", &[("key", &public), ("signature", &signature), ("nonce", nonce)]).await;
    assert!(status == StatusCode::SEE_OTHER && location.contains("done=key%20added"), "{location}");
    let (_, keys) = hub.call(Method::GET, "/api/v1/me/ssh-keys", Some(&alice), None).await;
    assert_eq!(keys.as_array().unwrap().len(), 1, "{keys}");

    // an error page is a page, not a problem document
    let (status, body, _) = get(&hub, Some(&s.cookie), "/workloads/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("<!DOCTYPE html>") && body.contains("no workload named"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_the_page_without_a_reload() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let s = session(&hub, "alice", "alice-password").await;
    let events = browser().get(format!("{}/events", hub.url)).header(COOKIE, &s.cookie).send().await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert!(events.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut stream = events.bytes_stream();
    // bob's change is not alice's to see; hers is, and her list's live part shows it
    hub.submit(&bob, common::job("theirs", 0)).await;
    hub.submit(&alice, common::job("mine", 0)).await;
    use futures::StreamExt as _;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains("\"name\":\"mine\"") {
        let chunk =
            tokio::time::timeout_at(deadline, stream.next()).await.expect("an event for mine").unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: change") && !seen.contains("theirs"), "{seen}");
    hub.wait_state(&alice, "mine", "running").await;
    let run = hub.run(&alice, "mine").await;
    hub.runtime.exit(&run, 0);
    hub.wait_state(&alice, "mine", "succeeded").await;
    // its history, in the API and on its page
    let v = hub.get(&alice, "mine").await;
    let states: Vec<&str> = v["history"].as_array().unwrap().iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert!(states.first() == Some(&"queued") && states.last() == Some(&"succeeded"), "{states:?}");
    assert!(states.contains(&"running"), "{states:?}");
    let (status, page, _) = get(&hub, Some(&s.cookie), "/workloads/mine").await;
    assert_eq!(status, StatusCode::OK);
    for state in &states {
        assert!(page.contains(&format!("<li data-state=\"{state}\">")), "{state} on the page");
    }
    let fragment = browser()
        .get(format!("{}/workloads?fragment=live", hub.url))
        .header(COOKIE, &s.cookie)
        .header("sec-fetch-mode", "cors")
        .send()
        .await
        .unwrap();
    assert_eq!(fragment.status(), StatusCode::OK, "the live part is for the page's script");
    let html = fragment.text().await.unwrap();
    assert!(html.contains("data-name=\"mine\" data-state=\"succeeded\"") && !html.contains("theirs"), "{html}");
}

#[tokio::test]
async fn saved_images_are_offered_and_a_pull_shows_its_progress() {
    let hub = Hub::start_with(|c| c.image_allow = vec!["registry.test/*".into()]).await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    hub.user(&admin, "bob").await;
    hub.submit(&alice, small("ws", "workspace")).await;
    hub.wait_state(&alice, "ws", "running").await;
    let (status, saved) =
        hub.call(Method::POST, "/api/v1/workloads/ws/save", Some(&alice), Some(json!({"as": "env"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    // a catalog image of the same name: her own is what the name runs, so the catalog's is shown unusable
    let entry = json!({"name": "env", "image": "busybox:latest", "description": "the lab's"});
    assert_eq!(hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(entry)).await.0, StatusCode::CREATED);

    let s = session(&hub, "alice", "alice-password").await;
    let form = get(&hub, Some(&s.cookie), "/new").await.1;
    let group = form.split("<optgroup label=\"Your saved images\">").nth(1).expect("her saved images offered");
    assert!(
        group.split("</optgroup>").next().unwrap().contains("<option value=\"env\">env — saved from ws"),
        "{group}"
    );
    assert!(form.contains("<option value=\"env\" disabled>env — the lab's"), "the shadowed catalog entry: {form}");
    let b = session(&hub, "bob", "bob-password").await;
    let other = get(&hub, Some(&b.cookie), "/new").await.1;
    assert!(!other.contains("Your saved images") && other.contains("<option value=\"env\">env — the lab's"));

    // chosen in the form, it runs her saved image; "run again" chooses it again
    let fields = [("kind", "job"), ("name", "from-env"), ("image", "env"), ("command", "true")];
    let more = [("cpus", "0.1"), ("memory", "64MiB"), ("gpus", "0"), ("members", "1")];
    let (status, body, _) = post(&hub, Some(&s), "/new", &[&fields[..], &more[..]].concat()).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(hub.get(&alice, "from-env").await["image"], saved["reference"]);
    let again = get(&hub, Some(&s.cookie), "/new?from=from-env").await.1;
    assert!(again.contains("<option value=\"env\" selected>"), "run again: {again}");

    // the Images page: hers, with a delete button; bob sees none and cannot delete hers; she can
    let images = get(&hub, Some(&s.cookie), "/images").await.1;
    let row = images.split("<tr data-image=\"env\">").nth(1).expect("her saved image listed");
    assert!(row.split("</tr>").next().unwrap().contains("action=\"/images/env/delete\""), "{row}");
    assert!(!get(&hub, Some(&b.cookie), "/images").await.1.contains("<tr data-image=\"env\">"), "not bob's");
    let (status, _, location) = post(&hub, Some(&b), "/images/env/delete", &[]).await;
    assert!(status == StatusCode::SEE_OTHER && location.starts_with("/images?error="), "{location}");
    let mine = || hub.call(Method::GET, "/api/v1/me/images", Some(&alice), None);
    assert_eq!(mine().await.1.as_array().unwrap().len(), 1, "still hers");
    let (status, _, location) = post(&hub, Some(&s), "/images/env/delete", &[]).await;
    assert!(status == StatusCode::SEE_OTHER && location.starts_with("/images?done="), "{location}");
    assert_eq!(mine().await.1.as_array().unwrap().len(), 0, "deleted");

    // a pull part-way: the page's live part shows it, and asks to be fetched again
    hub.runtime.set_registry("registry.test/ok:1", Ok(()));
    hub.runtime.hold_pulls(true);
    let mut job = small("p", "job");
    job["image"] = json!("registry.test/ok:1");
    hub.submit(&alice, job).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while hub.get(&alice, "p").await["pull"]["current_bytes"] != 500 {
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let page = get(&hub, Some(&s.cookie), "/workloads/p").await.1;
    let part = page.split("<p class=\"pull\" data-poll=\"1000\">").nth(1).expect("the pull on the page");
    let part = part.split("</p>").next().unwrap();
    assert!(part.contains("<progress value=\"500\" max=\"1000\">"), "{part}");
    assert!(part.contains("Pulling registry.test/ok:1: 50% of 1000B (0 of 1 layers)"), "{part}");
    hub.runtime.hold_pulls(false);
    hub.wait_state(&alice, "p", "running").await;
    let page = get(&hub, Some(&s.cookie), "/workloads/p").await.1;
    assert!(!page.contains("data-poll") && page.contains("pulled 1000B (1 layer); queued"), "after: {page}");
}

#[tokio::test]
async fn a_time_limit_is_extended_from_the_workloads_page_and_a_service_shows_its_restarts() {
    let hub = Hub::start().await;
    let admin = hub.login("admin", ADMIN_PASSWORD).await;
    let alice = hub.user(&admin, "alice").await;
    let mut t = small("t", "job");
    t["runtime_limit"] = json!("1h");
    hub.submit(&alice, t).await;
    hub.wait_state(&alice, "t", "running").await;
    let s = session(&hub, "alice", "alice-password").await;
    let (status, page, _) = get(&hub, Some(&s.cookie), "/workloads/t").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("href=\"/workloads/t/extend\""), "{page}");
    let (status, page, _) = get(&hub, Some(&s.cookie), "/workloads/t/extend").await;
    assert!(status == StatusCode::OK && page.contains("name=\"by\"") && page.contains("(now 1h)"), "{page}");
    let (status, _, location) = post(&hub, Some(&s), "/workloads/t/extend", &[("by", "2h")]).await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/workloads/t"));
    assert_eq!(hub.get(&alice, "t").await["runtime_limit"], "3h");
    let (status, page, _) = post(&hub, Some(&s), "/workloads/t/extend", &[("by", "soon")]).await;
    assert!(status.is_client_error() && page.contains("invalid time"), "{status} {page}");
    // a service's page: its URL, port, access and restarts
    let svc = json!({"name": "web", "kind": "service", "image": "busybox:latest", "command": ["httpd", "-f"],
        "resources": {"cpus": 0.1, "memory": "64MiB"}, "service": {"port": 8080}});
    hub.submit(&alice, svc).await;
    let (_, page, _) = get(&hub, Some(&s.cookie), "/workloads/web").await;
    assert!(page.contains("href=\"/w/alice/web/service/\"") && page.contains("restarts: 0"), "{page}");
}

/// The newcomer found two pages, "Queues" and "Admin queues": there is one, `/queues`, where everyone sees
/// the queues and an admin also changes them and books reservations; `/admin/queues` leads there with its
/// notice, and a change comes back to it.
#[tokio::test]
async fn one_queues_page_with_the_admins_forms() {
    let hub = Hub::start().await;
    let admin_token = hub.admin().await;
    hub.user(&admin_token, "alice").await;
    let admin = session(&hub, "admin", ADMIN_PASSWORD).await;
    let alice = session(&hub, "alice", "alice-password").await;
    let (status, page, _) = get(&hub, Some(&admin.cookie), "/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("action=\"/admin/queues\"") && page.contains("action=\"/admin/reservations\""), "{page}");
    assert!(!page.contains("Admin queues"), "no second page in the menu: {page}");
    let (status, page, _) = get(&hub, Some(&alice.cookie), "/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("action=\"/admin/queues\"") && !page.contains("Admin queues"), "{page}");
    let (status, _, location) = get(&hub, Some(&admin.cookie), "/admin/queues?done=x").await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/queues?done=x"));
    let (status, _, location) =
        post(&hub, Some(&admin), "/admin/queues", &[("name", "vision"), ("guarantee_gpus", "1")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.starts_with("/queues?done=queue%20vision%20added"), "{location}");
    let (_, page, _) = get(&hub, Some(&admin.cookie), &location).await;
    assert!(page.contains("queue vision added") && page.contains("data-queue=\"vision\""), "{page}");
}
