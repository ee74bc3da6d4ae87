//! Regression tests for the smaller findings of the second security review
//! (`shared/reviews/security-2.md`, N7–N14): each fails on the code before its fix.

use gpuhub_testkit as common;

use gpuhub_testkit::oidc_provider as provider_support;

use common::*;
use reqwest::{Method, StatusCode, Url, redirect};
use serde_json::json;

/// A client that reads redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

/// Signs in as `subject` through `/login/oidc?<query>` and returns the callback's answer: its status
/// and `Location`.
async fn oidc_sign_in(hub: &Hub, query: &str, subject: &str) -> (StatusCode, String) {
    let browser = no_redirects();
    let begin = browser.get(format!("{}/login/oidc?{query}", hub.url)).send().await.unwrap();
    assert!(begin.status().is_redirection(), "{query}: {}", begin.status());
    let authorize = begin.headers()["location"].to_str().unwrap().to_owned();
    let form = browser.get(&authorize).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK, "the provider's form");
    let answer = browser.post(&authorize).form(&[("sub", subject)]).send().await.unwrap();
    assert!(answer.status().is_redirection(), "the provider answered {}", answer.status());
    let back = Url::parse(answer.headers()["location"].to_str().unwrap()).unwrap();
    let callback = format!("{}/login/oidc/callback?{}", hub.url, back.query().unwrap());
    let done = browser.get(callback).send().await.unwrap();
    let status = done.status();
    let location = done.headers().get("location").map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
    match location {
        Some(l) => (status, l),
        None => (status, format!("no Location: {}", done.text().await.unwrap_or_default())),
    }
}

/// N7: after signing in through the OpenID provider, the browser goes on only to a path of the hub's own
/// origin; anything else (a tab or newline the browser drops, a backslash, another origin) goes to `/`,
/// and never answers a 5xx.
#[tokio::test]
async fn n7_oidc_next_is_only_a_local_path() {
    let Some(provider) = provider_support::provider().await else { return };
    let issuer = provider.issuer.clone();
    let hub = Hub::start_with(|c| {
        c.oidc = Some(gpuhub_identity::OidcConfig::new(
            issuer,
            "gpuhub",
            "gpuhub-client-secret",
            provider_support::REDIRECT_URL,
        ))
    })
    .await;
    let (s, to) = oidc_sign_in(&hub, "next=/workloads/nb%3Fx%3D1", "alice-subject").await;
    assert_eq!((s.is_redirection(), to.as_str()), (true, "/workloads/nb?x=1"), "{s}");
    for bad in [
        "next=/%09/evil.example",
        "next=/%0a/evil.example",
        "next=/x%0d%0aSet-Cookie:%20a=b",
        "next=%2F%2Fevil.example",
        "next=/%5Cevil.example",
        "next=/%2509/evil.example",
        "next=/%252F/evil.example",
        "next=https://evil.example/",
        "next=/%20/evil.example",
        "next=/%C3%A9",
        "next=evil.example",
    ] {
        let (s, to) = oidc_sign_in(&hub, bad, "alice-subject").await;
        assert_eq!((s.is_redirection(), to.as_str()), (true, "/"), "{bad}: {s}");
    }
}

/// N13: no dataset is a system directory of the host, inside one or holding one (after `..`, `.` and
/// symlinks), nor the hub's own data directory: a 422 naming the path and why.
#[tokio::test]
async fn n13_system_paths_are_no_datasets() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let scratch = tempfile::tempdir().unwrap();
    let to_etc = scratch.path().join("innocent");
    std::os::unix::fs::symlink("/etc", &to_etc).unwrap();
    let data = hub.dir.path().join("data");
    for path in [
        "/etc".to_owned(),
        "/etc/ssl".to_owned(),
        "/proc".to_owned(),
        "/proc/self".to_owned(),
        "/sys/".to_owned(),
        "/dev".to_owned(),
        "/usr/lib".to_owned(),
        "/var".to_owned(),
        "/lib".to_owned(),
        "/root".to_owned(),
        "//etc/./".to_owned(),
        to_etc.display().to_string(),
        data.display().to_string(),
        hub.dir.path().display().to_string(),
    ] {
        let body = json!({"name": "sys", "path": path});
        let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {v}");
        assert_eq!(v["field"], "path", "{path}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("{path:?}")), "names the path: {detail}");
        assert!(detail.contains("system directory") || detail.contains("data directory"), "{path}: says why: {detail}");
    }
    let (s, v) = hub.call(Method::GET, "/api/v1/datasets", Some(&admin), None).await;
    assert_eq!((s, v), (StatusCode::OK, json!([])), "none registered");
    let fine = scratch.path().join("corpus");
    std::fs::create_dir(&fine).unwrap();
    let body = json!({"name": "corpus", "path": fine.display().to_string()});
    let (s, v) = hub.call(Method::POST, "/api/v1/datasets", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// N12: a team's group is never an account's group: a `team_gid` that is an account's GID (a local
/// account's is its UID; a directory account's its own) is refused naming the account, a new local
/// account's UID/GID passes over every team's group, and a directory account whose group is a team's
/// is refused naming the queue.
#[tokio::test]
async fn n12_team_gids_are_no_account_gids() {
    let dir = std::sync::Arc::new(gpuhub_identity::FakeDirectory::new());
    let person = |name: &str, uid: u32, gid: u32| gpuhub_identity::DirectoryUser {
        username: name.into(),
        dn: format!("uid={name},ou=people,dc=example,dc=org"),
        uid_number: uid,
        gid_number: gid,
        groups: vec![],
        is_admin: false,
        display_name: None,
    };
    dir.add_user(person("dora", 30_001, 40_001), "dora-ldap");
    dir.add_user(person("emil", 30_002, 40_002), "emil-ldap");
    let seams = gpuhub_server::Seams { directory: Some(dir), ..Default::default() };
    let hub = Hub::start_seams(seams, |_| {}).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    let alice_gid = me["gid"].as_u64().unwrap();
    let dora = hub.login("dora", "dora-ldap").await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&dora), None).await;
    assert_eq!(me["gid"], 40_001, "{me}");

    for (gid, who) in [(alice_gid, "alice"), (40_001, "dora")] {
        let body = json!({"name": format!("t{gid}"), "team_gid": gid});
        let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(body)).await;
        assert_eq!(s, StatusCode::CONFLICT, "team_gid {gid}: {v}");
        assert_eq!(v["field"], "team_gid", "{v}");
        assert!(v["detail"].as_str().unwrap().contains(who), "names {who}: {v}");
    }
    // a queue whose group is the next UID to be handed out: the next account passes over it
    let next = alice_gid + 1;
    let (s, v) =
        hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": "vision", "team_gid": next}))).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let bob = hub.user(&admin, "bob").await;
    let (_, me) = hub.call(Method::GET, "/api/v1/me", Some(&bob), None).await;
    assert_ne!(me["uid"].as_u64(), Some(next), "{me}");
    assert_ne!(me["gid"].as_u64(), Some(next), "{me}");
    // a directory account whose group is a team's is refused, naming the queue
    let (s, v) =
        hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": "nlp", "team_gid": 40_002}))).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let body = json!({"username": "emil", "password": "emil-ldap"});
    let (s, v) = hub.call(Method::POST, "/api/v1/login", None, Some(body)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("nlp"), "{v}");
}

/// A browser session's cookie for `user`.
async fn session_cookie(hub: &Hub, user: &str) -> String {
    let body = json!({"username": user, "password": format!("{user}-password")});
    let r = hub.http.post(format!("{}/api/v1/login", hub.url)).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned()
}

/// Reads server-sent events from `stream` until one holds `until`; returns everything read.
async fn read_events(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    until: &str,
) -> String {
    use futures::StreamExt as _;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains(until) {
        let chunk = tokio::time::timeout_at(deadline, stream.next()).await;
        let chunk = chunk.unwrap_or_else(|_| panic!("no event with {until} in: {seen}")).unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

/// N14: `/events` tells a viewer only of changes to workloads they may see: another user's workload
/// deleted is no event at all (it was an empty `change`), while the viewer's own deleted is one.
#[tokio::test]
async fn n14_events_only_of_ones_own_workloads() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    hub.submit(&alice, job("before", 0)).await;
    let cookie = session_cookie(&hub, "alice").await;
    let events = no_redirects().get(format!("{}/events", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let mut stream = events.bytes_stream();
    hub.submit(&bob, job("theirs", 0)).await;
    hub.wait_state(&bob, "theirs", "running").await;
    let (s, v) = hub.call(Method::DELETE, "/api/v1/workloads/theirs", Some(&bob), None).await;
    assert!(s.is_success(), "{s} {v}");
    hub.submit(&alice, job("mine", 0)).await;
    let seen = read_events(&mut stream, "\"name\":\"mine\"").await;
    assert!(!seen.contains("data: {}") && !seen.contains("theirs"), "bob's changes reached alice: {seen}");
    // her own deleted, made before she looked: she is told (to look again)
    let (s, v) = hub.call(Method::DELETE, "/api/v1/workloads/before", Some(&alice), None).await;
    assert!(s.is_success(), "{s} {v}");
    read_events(&mut stream, "data: {}").await;
}

/// N8: an image reference must follow the distribution spec's grammar wherever it enters (a catalog
/// entry, a submission, a pull): `..` and other path tricks, uppercase repositories, empty or bad tags
/// and digests are a 422 on `image` before the engine is asked anything, even one it has by that name.
#[tokio::test]
async fn n8_image_references_follow_the_grammar() {
    let hub = Hub::start_with(|c| {
        c.allow_any_image = true;
        c.image_allow = vec!["*".into()];
    })
    .await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bad = [
        "",
        "busybox/../../containers/x/json?",
        "../x",
        "x/..",
        "a//b",
        "Busybox",
        "busybox:",
        "busybox:-x",
        "busybox@sha256:zz",
        "busybox@",
        "-x",
        "a/b_",
        "a..b",
        "localhost:x/a",
    ];
    for (i, image) in bad.iter().enumerate() {
        hub.runtime.add_image(image);
        let body = json!({"name": format!("bad{i}"), "image": image});
        let (s, v) = hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "catalog {image:?}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("not an image reference"), "catalog {image:?}: {v}");
        let mut w = job(&format!("w{i}"), 0);
        w["image"] = json!(image);
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(w)).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("image")), "{image:?}: {v}");
    }
    let pulled = hub.runtime.calls();
    assert!(!pulled.iter().any(|c| matches!(c, gpuhub_driver::fake::Call::Pull(..))), "{pulled:?}");
    // references of the grammar's every part pass
    let digest = format!("sha256:{}", "a1".repeat(32));
    for (i, image) in [
        "busybox:latest".to_owned(),
        "localhost:5000/team/img-a__b.c:V1.0_x".to_owned(),
        format!("registry.example.org/a/b@{digest}"),
        format!("ghcr.io/o/r:t@{digest}"),
    ]
    .iter()
    .enumerate()
    {
        hub.runtime.add_image(image);
        let body = json!({"name": format!("good{i}"), "image": image});
        let (s, v) = hub.call(Method::POST, "/api/v1/images", Some(&admin), Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{image}: {v}");
        let mut w = job(&format!("g{i}"), 0);
        w["image"] = json!(image);
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(w)).await;
        assert_eq!(s, StatusCode::CREATED, "{image}: {v}");
    }
}

/// An ed25519 key made by `ssh-keygen` in `dir`: its private file and public line.
fn keygen(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, String) {
    let private = dir.join(name);
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&private)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let public = std::fs::read_to_string(private.with_extension("pub")).unwrap();
    (private, public)
}

/// `message` signed with `private` for key registration.
fn ssh_sign(private: &std::path::Path, message: &str) -> String {
    let file = private.with_extension("msg");
    std::fs::write(&file, message).unwrap();
    let _ = std::fs::remove_file(file.with_extension("msg.sig"));
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "gpuhub-ssh-key", "-f"])
        .arg(private)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(file.with_extension("msg.sig")).unwrap()
}

/// N9: the proof of holding an SSH key is a signature over a challenge the hub issued, with a nonce
/// and an expiry, good once: a captured registration cannot register the key again (after it is
/// removed, or for an account re-created under the same name), nor can a challenge that has expired.
#[tokio::test]
async fn n9_ssh_key_proofs_cannot_be_replayed() {
    let t0 = chrono::Utc::now();
    let clock = std::sync::Arc::new(gpuhub_controller::clock::ManualClock::new(t0));
    let seams = gpuhub_server::Seams { clock: clock.clone(), ..Default::default() };
    let hub = Hub::start_seams(seams, |_| {}).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "alice");
    // what the challenge gives, signed, as a client sends it back
    let registration = |token: String| {
        let (hub, private, public) = (&hub, private.clone(), public.clone());
        async move {
            let (s, ch) = hub.call(Method::GET, "/api/v1/me/ssh-keys/challenge", Some(&token), None).await;
            assert_eq!(s, StatusCode::OK, "{ch}");
            let mut body = json!({"key": public, "signature": ssh_sign(&private, ch["message"].as_str().unwrap())});
            if let Some(nonce) = ch.get("nonce") {
                body["nonce"] = nonce.clone();
            }
            body
        }
    };
    let add = |token: String, body: serde_json::Value| {
        let hub = &hub;
        async move { hub.call(Method::POST, "/api/v1/me/ssh-keys", Some(&token), Some(body)).await }
    };
    let captured = registration(alice.clone()).await;
    let (s, v) = add(alice.clone(), captured.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let fp = v["fingerprint"].as_str().unwrap().replace(':', "%3A").replace('/', "%2F").replace('+', "%2B");
    let (s, v) = hub.call(Method::DELETE, &format!("/api/v1/me/ssh-keys/{fp}"), Some(&alice), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let (s, v) = add(alice.clone(), captured.clone()).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "the same proof registered the key again: {v}");
    // alice is deleted and someone named alice again: the old proof serves them no better
    let (s, v) = hub.call(Method::DELETE, "/api/v1/users/alice", Some(&admin), None).await;
    assert!(s.is_success(), "{s} {v}");
    let alice = hub.user(&admin, "alice").await;
    let (s, v) = add(alice.clone(), captured).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "a proof made for the former alice: {v}");
    // a challenge past its expiry is refused, saying so; a fresh one registers
    let late = registration(alice.clone()).await;
    clock.advance(chrono::TimeDelta::minutes(11));
    let (s, v) = add(alice.clone(), late).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("expired"), "{v}");
    let fresh = registration(alice.clone()).await;
    let (s, v) = add(alice, fresh).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// N5: all containers' PID limits together stay within the host's `pid_max` (a quarter of it kept for
/// the host, one user's work at most half the rest): work beyond that is refused at submission (429)
/// saying why, and accepted again once some has ended. Here `pid_max` 32768 and `pids_limit` 4096: six
/// containers in all, three of one user's.
#[tokio::test]
async fn n5_pid_limits_stay_within_pid_max() {
    let hub = Hub::start_with(|c| {
        c.pid_max = Some(32_768);
        c.pids_limit = 4096;
    })
    .await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let carol = hub.user(&admin, "carol").await;
    let submit = |token: String, body: serde_json::Value| {
        let hub = &hub;
        async move { hub.call(Method::POST, "/api/v1/workloads", Some(&token), Some(body)).await }
    };
    for i in 0..3 {
        let (s, v) = submit(alice.clone(), job(&format!("a{i}"), 0)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    let (s, v) = submit(alice.clone(), job("a3", 0)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "a fourth container of alice's: {v}");
    let detail = v["detail"].as_str().unwrap();
    assert!(detail.contains("pid_max 32768") && detail.contains("pids_limit 4096"), "{detail}");
    // a gang counts each member
    let mut gang = job("g", 0);
    gang["members"] = json!(3);
    hub.submit(&bob, job("b0", 0)).await;
    let (s, v) = submit(bob.clone(), gang).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "a gang of three beside one: {v}");
    hub.submit(&bob, job("b1", 0)).await;
    hub.submit(&bob, job("b2", 0)).await;
    let (s, v) = submit(carol.clone(), job("c0", 0)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "a seventh container on the host: {v}");
    assert!(v["detail"].as_str().unwrap().contains("6 containers"), "{v}");
    // once one has ended, there is room again
    hub.wait_state(&alice, "a0", "running").await;
    let run = hub.run(&alice, "a0").await;
    hub.runtime.exit(&run, 0);
    hub.wait_state(&alice, "a0", "succeeded").await;
    let (s, v) = submit(carol, job("c0", 0)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// This hub's installation id.
async fn instance(hub: &Hub) -> String {
    hub.server.as_ref().unwrap().state.store.get_setting("instance_id").await.unwrap().expect("an installation id")
}

/// `token`'s user's running workspace `name` saved as their personal image `as_`: its reference.
async fn saved(hub: &Hub, token: &str, name: &str, as_: &str) -> String {
    let mut w = job(name, 0);
    w["kind"] = json!("workspace");
    hub.submit(token, w).await;
    hub.wait_state(token, name, "running").await;
    let path = format!("/api/v1/workloads/{name}/save");
    let (s, v) = hub.call(Method::POST, &path, Some(token), Some(json!({"as": as_}))).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v["reference"].as_str().unwrap().to_owned()
}

/// A job of `token`'s user running `image`: the answer's status and body.
async fn run_image(hub: &Hub, token: &str, name: &str, image: &str) -> (StatusCode, serde_json::Value) {
    let mut w = job(name, 0);
    w["image"] = json!(image);
    hub.call(Method::POST, "/api/v1/workloads", Some(token), Some(w)).await
}

/// N6: personal images are namespaced by installation (`gpuhub-user/<instance12>/<user>/<name>`), so two
/// installations on one engine never share one, and run only for their owner whatever `allow_any_image`
/// and `image_allow` say: another user (an admin too, another installation's user of the same name too)
/// naming one by reference, by another spelling of it or by its image ID is refused with a 422 saying
/// so. An image saved before the namespace (`gpuhub-user/<user>/<name>`) still runs for its owner.
#[tokio::test]
async fn n6_personal_images_are_their_owners_alone() {
    use gpuhub_driver::fake::image_id;
    let hub = Hub::start_with(|c| c.allow_any_image = true).await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let first = instance(&hub).await;
    let reference = saved(&hub, &alice, "lab", "env").await;
    assert_eq!(reference, format!("gpuhub-user/{}/alice/env:latest", &first[..12]), "namespaced by installation");
    let legacy = "gpuhub-user/alice/old:latest";
    hub.runtime.add_image(legacy);
    let old = gpuhub_core::image::PersonalImage {
        owner: "alice".into(),
        name: "old".into(),
        reference: legacy.into(),
        size_bytes: 1,
        workload: "lab".into(),
        created_at: chrono::Utc::now(),
    };
    hub.server.as_ref().unwrap().state.store.insert_personal_image(&old).await.unwrap();
    let theirs = [
        reference.clone(),
        image_id(&reference),
        format!("docker.io/{reference}"),
        reference.trim_end_matches(":latest").to_owned(),
        legacy.to_owned(),
        image_id(legacy),
    ];
    let refused = |who: &str, image: &str, s: StatusCode, v: &serde_json::Value| {
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("image")), "{who}, {image}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("another user's personal image"), "{who}, {image}: says why: {detail}");
    };
    for (who, token) in [("bob", &bob), ("admin", &admin)] {
        for (i, image) in theirs.iter().enumerate() {
            let (s, v) = run_image(&hub, token, &format!("{who}{i}"), image).await;
            refused(who, image, s, &v);
        }
    }
    // hers, by name, reference and ID, the old one too
    for (i, image) in ["env", reference.as_str(), &image_id(&reference), "old", legacy].iter().enumerate() {
        let (s, v) = run_image(&hub, &alice, &format!("mine{i}"), image).await;
        assert_eq!(s, StatusCode::CREATED, "{image}: {v}");
    }

    // a second installation on the same engine, pulling any image but running only what it allows
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.allow_any_image = false;
    cfg.image_allow = vec!["*".into()];
    let other = Hub::start_on(dir, cfg, hub.runtime.clone()).await;
    let other_admin = other.admin().await;
    let other_alice = other.user(&other_admin, "alice").await;
    let second = instance(&other).await;
    let hers = saved(&other, &other_alice, "lab", "env").await;
    assert_eq!(hers, format!("gpuhub-user/{}/alice/env:latest", &second[..12]));
    assert_ne!(hers, reference, "the two installations' alices have images of their own");
    for (i, image) in theirs.iter().enumerate() {
        let (s, v) = run_image(&other, &other_alice, &format!("x{i}"), image).await;
        refused("the other alice", image, s, &v);
    }
    let (s, v) = run_image(&hub, &alice, "across", &hers).await;
    refused("alice", &hers, s, &v);
    let (s, v) = run_image(&other, &other_alice, "own", "env").await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// N11: a deleted user's bridge network goes with them, once their runs are removed (Docker has ~31
/// address pools; leftovers use them up): the engine is asked to remove exactly this installation's
/// network of the user, with its labels, after the user's run.
#[tokio::test]
async fn n11_a_deleted_users_network_goes_with_them() {
    use gpuhub_driver::fake::Call;
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.user(&admin, "bob").await;
    hub.submit(&alice, job("train", 0)).await;
    hub.wait_state(&alice, "train", "running").await;
    let run = hub.run(&alice, "train").await;
    let id = instance(&hub).await;
    let (s, v) = hub.call(Method::DELETE, "/api/v1/users/alice", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    let calls = hub.runtime.calls();
    let removed = calls.iter().position(|c| matches!(c, Call::Remove(r) if *r == run)).expect("her run is removed");
    let networks: Vec<(usize, &Call)> =
        calls.iter().enumerate().filter(|(_, c)| matches!(c, Call::RemoveUserNetwork(..))).collect();
    let labels = std::collections::BTreeMap::from([
        (gpuhub_driver::LABEL_OWNER.to_owned(), "alice".to_owned()),
        (gpuhub_driver::LABEL_INSTANCE.to_owned(), id.clone()),
    ]);
    let expected = Call::RemoveUserNetwork(format!("gpuhub-{}-u-alice", &id[..12]), labels);
    assert_eq!(networks.iter().map(|(_, c)| *c).collect::<Vec<_>>(), [&expected], "her network alone: {calls:?}");
    assert!(networks[0].0 > removed, "after her run is removed: {calls:?}");
}
