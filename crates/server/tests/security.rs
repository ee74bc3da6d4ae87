//! Regression tests for the security review (`shared/reviews/security.md`): each fails on the code
//! before its fix. The SSH half of finding 1 is in `crates/ssh/tests/gateway.rs`, finding 9 in
//! `crates/docker/tests/engine/network.rs`.

use gpuhub_testkit as common;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

/// A login from `xff` (as `X-Forwarded-For`): status and body.
async fn login_from(hub: &Hub, user: &str, password: &str, xff: Option<&str>) -> (StatusCode, Value) {
    let mut req =
        hub.http.post(format!("{}/api/v1/login", hub.url)).json(&json!({"username": user, "password": password}));
    if let Some(x) = xff {
        req = req.header("x-forwarded-for", x);
    }
    let resp = req.send().await.unwrap();
    (resp.status(), resp.json().await.unwrap_or(Value::Null))
}

fn workload(name: &str, gpus: u32) -> Value {
    let mut j = job(name, gpus);
    j["command"] = json!(["sleep", "1000"]);
    j
}

/// Finding 1: disabling a user revokes their tokens, closes their connections, stops their running work
/// and holds their queued work until they are enabled again.
#[tokio::test]
async fn disabling_a_user_offboards_them() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    hub.submit(&alice, workload("big", 2)).await;
    hub.wait_state(&alice, "big", "running").await;
    hub.submit(&alice, workload("later", 1)).await;
    assert_eq!(hub.get(&alice, "later").await["state"], "queued");
    let mut revoked = hub.server.as_ref().unwrap().state.revocations.subscribe();

    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(json!({"disabled": true}))).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(revoked.try_recv().unwrap(), "alice", "open SSH connections and terminals are told");
    let (s, _) = hub.call(Method::GET, "/api/v1/me", Some(&alice), None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "the token is revoked");
    let big = hub.wait_state(&admin, "big?owner=alice", "stopped").await;
    assert_eq!(big["gpus"].as_array().map(Vec::len), Some(2), "it shows what it held: {big}");
    let (_, nodes) = hub.call(Method::GET, "/api/v1/nodes", Some(&admin), None).await;
    assert!(nodes[0]["gpus"].as_array().unwrap().iter().all(|g| g.get("holder").is_none()), "freed: {nodes}");
    // the freed GPUs do not go to the disabled user's queued work: it is held, saying why (waiting on
    // the controller's change feed for the pass that says so)
    let server = hub.server.as_ref().unwrap();
    let mut changes = server.state.controller.changes();
    server.state.controller.kick();
    let later = loop {
        let later = hub.get(&admin, "later?owner=alice").await;
        if later["message"].as_str().is_some_and(|m| m.contains("disabled")) || later["state"] != "queued" {
            break later;
        }
        tokio::time::timeout(std::time::Duration::from_secs(10), changes.recv())
            .await
            .expect("a scheduling pass")
            .unwrap();
    };
    assert_eq!(later["state"], "queued", "{later}");
    assert!(later["message"].as_str().unwrap().contains("disabled"), "{later}");
    assert!(hub.runtime.running().is_empty());

    // enabled again, the queued work starts
    let (s, _) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(json!({"disabled": false}))).await;
    assert_eq!(s, StatusCode::OK);
    hub.wait_state(&admin, "later?owner=alice", "running").await;
    // keep_workloads only goes with disabling
    let body = json!({"keep_workloads": true});
    let (s, v) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    // by the admin's choice, running work keeps running
    let body = json!({"disabled": true, "keep_workloads": true});
    let (s, _) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(hub.get(&admin, "later?owner=alice").await["state"], "running");
}

/// Finding 4: a deleted account's workloads, logs and home are gone (the home archived), so a new account
/// of the same name starts with nothing of the old one's.
#[tokio::test]
async fn a_recreated_username_inherits_nothing() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let dave = hub.user(&admin, "dave").await;
    let mut secret = workload("secret", 1);
    secret["env"] = json!({"API_KEY": "hunter2"});
    hub.submit(&dave, secret).await;
    hub.wait_state(&dave, "secret", "running").await;
    let data = hub.dir.path().join("data");
    std::fs::write(data.join("homes/dave/notes.txt"), "old dave's notes").unwrap();

    let (s, v) = hub.call(Method::DELETE, "/api/v1/users/dave", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    assert!(hub.runtime.running().is_empty(), "the running job was removed");
    assert!(!data.join("homes/dave").exists());
    let archived: Vec<_> = std::fs::read_dir(data.join("archive")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(archived.len(), 1);
    assert_eq!(std::fs::read_to_string(archived[0].join("notes.txt")).unwrap(), "old dave's notes");

    let dave = hub.user(&admin, "dave").await;
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads", Some(&dave), None).await;
    assert_eq!((s, v), (StatusCode::OK, json!([])));
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/secret", Some(&dave), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // ?home=delete removes the home instead; a bad choice is refused
    std::fs::create_dir_all(data.join("homes/dave")).unwrap();
    let (s, _) = hub.call(Method::DELETE, "/api/v1/users/dave?home=shred", Some(&admin), None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = hub.call(Method::DELETE, "/api/v1/users/dave?home=delete", Some(&admin), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(!data.join("homes/dave").exists());
    assert_eq!(std::fs::read_dir(data.join("archive")).unwrap().count(), 1);
}

/// Finding 5: password changes revoke older credentials, logout works with a cookie alone, tokens carry
/// gpuhub's prefix and an expiry and can be listed and revoked.
#[tokio::test]
async fn credentials_are_revoked_and_expire() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let old = hub.user(&admin, "alice").await;
    let other = hub.login("alice", "alice-password").await;
    assert!(old.starts_with("gpuhub_pat_") && !old.starts_with("ghp_"), "{old}");
    let (_, login) = login_from(&hub, "alice", "alice-password", None).await;
    let expires = chrono::DateTime::parse_from_rfc3339(login["expires_at"].as_str().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_days();
    assert!((29..=30).contains(&days), "{login}");

    // an admin's reset revokes every token of the account
    let body = json!({"password": "a-new-password"});
    let (s, _) = hub.call(Method::PATCH, "/api/v1/users/alice", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::OK);
    for t in [&old, &other] {
        assert_eq!(hub.call(Method::GET, "/api/v1/me", Some(t), None).await.0, StatusCode::UNAUTHORIZED);
    }

    // the user's own change keeps only the token it came with
    let (mine, elsewhere) = (hub.login("alice", "a-new-password").await, hub.login("alice", "a-new-password").await);
    let body = json!({"current_password": "wrong-password", "new_password": "third-password"});
    let (s, _) = hub.call(Method::POST, "/api/v1/me/password", Some(&mine), Some(body)).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let body = json!({"current_password": "a-new-password", "new_password": "third-password"});
    let (s, v) = hub.call(Method::POST, "/api/v1/me/password", Some(&mine), Some(body)).await;
    assert_eq!(s, StatusCode::NO_CONTENT, "{v}");
    assert_eq!(hub.call(Method::GET, "/api/v1/me", Some(&mine), None).await.0, StatusCode::OK);
    assert_eq!(hub.call(Method::GET, "/api/v1/me", Some(&elsewhere), None).await.0, StatusCode::UNAUTHORIZED);

    // list and revoke by id
    let second = hub.login("alice", "third-password").await;
    let (s, list) = hub.call(Method::GET, "/api/v1/me/tokens", Some(&mine), None).await;
    assert_eq!(s, StatusCode::OK);
    let list = list.as_array().unwrap();
    assert_eq!(list.iter().filter(|t| t["current"] == true).count(), 1, "{list:?}");
    assert!(list.iter().all(|t| t["expires_at"].is_string()), "{list:?}");
    let text = serde_json::to_string(list).unwrap();
    assert!(!text.contains(&second) && !text.contains(&mine), "no secrets in the list");
    let others: Vec<&str> = list.iter().filter(|t| t["current"] == false).map(|t| t["id"].as_str().unwrap()).collect();
    for id in &others {
        let (s, _) = hub.call(Method::DELETE, &format!("/api/v1/me/tokens/{id}"), Some(&mine), None).await;
        assert_eq!(s, StatusCode::NO_CONTENT);
    }
    assert_eq!(hub.call(Method::GET, "/api/v1/me", Some(&second), None).await.0, StatusCode::UNAUTHORIZED);
    let (s, _) = hub.call(Method::DELETE, "/api/v1/me/tokens/0000000000000000", Some(&mine), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // another user cannot revoke alice's tokens by id
    let bob = hub.user(&admin, "bob").await;
    let (_, list) = hub.call(Method::GET, "/api/v1/me/tokens", Some(&mine), None).await;
    let id = list[0]["id"].as_str().unwrap().to_owned();
    let (s, _) = hub.call(Method::DELETE, &format!("/api/v1/me/tokens/{id}"), Some(&bob), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // a browser logs out with its cookie alone, and the cookie then opens nothing
    let resp = hub
        .http
        .post(format!("{}/api/v1/login", hub.url))
        .json(&json!({"username": "alice", "password": "third-password"}))
        .send()
        .await
        .unwrap();
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let logout = || hub.http.post(format!("{}/api/v1/logout", hub.url)).header("cookie", cookie.clone()).send();
    assert_eq!(logout().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(logout().await.unwrap().status(), StatusCode::UNAUTHORIZED, "the session is gone");
    // a bearer logout revokes the token
    assert_eq!(hub.call(Method::POST, "/api/v1/logout", Some(&mine), None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(hub.call(Method::GET, "/api/v1/me", Some(&mine), None).await.0, StatusCode::UNAUTHORIZED);
}

/// Finding 6: wrong passwords from one address do not lock the real user out elsewhere, and
/// `X-Forwarded-For` counts only from a trusted proxy.
#[tokio::test]
async fn failed_logins_do_not_lock_out_the_real_user() {
    let hub = Hub::start_with(|c| {
        c.login_failures = 3;
        c.trusted_proxies = vec!["127.0.0.0/8".into()];
    })
    .await;
    let attacker = Some("203.0.113.9");
    for _ in 0..3 {
        assert_eq!(login_from(&hub, "admin", "guess", attacker).await.0, StatusCode::UNAUTHORIZED);
    }
    let (s, v) = login_from(&hub, "admin", ADMIN_PASSWORD, attacker).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    let (s, v) = login_from(&hub, "admin", ADMIN_PASSWORD, Some("198.51.100.7")).await;
    assert_eq!(s, StatusCode::OK, "the real admin from elsewhere: {v}");

    // without a trusted proxy the header is ignored: the peer is the address
    let hub = Hub::start_with(|c| c.login_failures = 3).await;
    for _ in 0..3 {
        assert_eq!(login_from(&hub, "admin", "guess", Some("203.0.113.9")).await.0, StatusCode::UNAUTHORIZED);
    }
    let (s, _) = login_from(&hub, "admin", ADMIN_PASSWORD, Some("198.51.100.7")).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "a forged X-Forwarded-For must not reset the limit");
}

/// Finding 10: variables the platform enforces limits with cannot be set by users.
#[tokio::test]
async fn platform_variables_cannot_be_set() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    for name in ["CUDA_DEVICE_MEMORY_LIMIT_0", "GPU_CORE_UTILIZATION_POLICY", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES"] {
        let mut body = job("share", 0);
        body["resources"] = json!({"gpu_milli": 250});
        body["env"] = json!({ name: "999g" });
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(body)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{name}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(name), "{v}");
    }
    let (_, list) = hub.call(Method::GET, "/api/v1/workloads", Some(&alice), None).await;
    assert_eq!(list, json!([]), "nothing stored");
}

/// Finding 11: a CPU amount below the engine's minimum is refused at submit; the data directory and the
/// database are private.
#[tokio::test]
async fn tiny_cpus_are_refused_and_files_are_private() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let mut body = job("tiny", 0);
    body["resources"]["cpus"] = json!(0.001);
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&admin), Some(body)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(v["detail"].as_str().unwrap().contains("resources.cpus") && v["detail"].as_str().unwrap().contains("0.01"));

    let data = hub.dir.path().join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("logs")), 0o700);
    assert_eq!(mode(&data.join("homes")), 0o700);
    assert_eq!(mode(&data.join("gpuhub.db")), 0o600);
    for f in ["gpuhub.db-wal", "gpuhub.db-shm"] {
        if data.join(f).exists() {
            assert_eq!(mode(&data.join(f)), 0o600, "{f}");
        }
    }
}

/// An ed25519 key made by `ssh-keygen` in `dir`, and a signature of `message` with it.
fn keygen_and_sign(dir: &std::path::Path, name: &str, message: &str) -> (String, String) {
    let private = dir.join(name);
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&private)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    (std::fs::read_to_string(private.with_extension("pub")).unwrap(), sign(&private, message))
}

fn sign(private: &std::path::Path, message: &str) -> String {
    let file = private.with_extension("msg");
    std::fs::write(&file, message).unwrap();
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-n", "gpuhub-ssh-key", "-f"])
        .arg(private)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(file.with_extension("msg.sig")).unwrap()
}

/// Finding 7: a key is registered only with proof of holding its private half, so nobody can squat
/// another person's public key; a signature made for one account serves no other.
#[tokio::test]
async fn ssh_keys_need_proof_of_possession() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let (alice, mallory) = (hub.user(&admin, "alice").await, hub.user(&admin, "mallory").await);
    let challenge = |t: String| {
        let hub = &hub;
        async move {
            let (s, v) = hub.call(Method::GET, "/api/v1/me/ssh-keys/challenge", Some(&t), None).await;
            assert_eq!(s, StatusCode::OK);
            assert_eq!(v["namespace"], "gpuhub-ssh-key");
            (v["message"].as_str().unwrap().to_owned(), v["nonce"].as_str().unwrap().to_owned())
        }
    };
    let ((for_alice, alice_nonce), (for_mallory, mallory_nonce)) =
        (challenge(alice.clone()).await, challenge(mallory.clone()).await);
    assert_ne!(for_alice, for_mallory);
    let dir = tempfile::tempdir().unwrap();
    let (alice_pub, alice_sig) = keygen_and_sign(dir.path(), "alice", &for_alice);

    // the squatter has alice's public key and even a signature alice made for her own account
    let add = |token: String, body: Value| {
        let hub = &hub;
        async move { hub.call(Method::POST, "/api/v1/me/ssh-keys", Some(&token), Some(body)).await }
    };
    let (s, v) = add(mallory.clone(), json!({"key": alice_pub})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("signature"), "{v}");
    for nonce in [&alice_nonce, &mallory_nonce] {
        let (s, v) = add(mallory.clone(), json!({"key": alice_pub, "signature": alice_sig, "nonce": nonce})).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "a signature for another account: {v}");
    }
    let (_, mallory_sig) = keygen_and_sign(dir.path(), "mallory", &for_mallory);
    let (s, _) =
        add(mallory.clone(), json!({"key": alice_pub, "signature": mallory_sig, "nonce": mallory_nonce})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "another key's signature");
    let forged = "-----BEGIN SSH SIGNATURE-----\nxx";
    let (s, _) = add(mallory.clone(), json!({"key": alice_pub, "signature": forged, "nonce": mallory_nonce})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);

    // the real owner registers it
    let (s, v) = add(alice.clone(), json!({"key": alice_pub, "signature": alice_sig, "nonce": alice_nonce})).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// Passwords are hashed with argon2id at 7 MiB and five passes (what keeps the server small while
/// logins run); a hash stored with older parameters still logs in, and the login replaces it.
#[tokio::test]
async fn older_password_hashes_log_in_and_are_renewed() {
    use argon2::PasswordHasher;
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "olga").await;
    let store = gpuhub_store::Store::open(&common::config(hub.dir.path()).effective_database_url()).await.unwrap();
    let (_, fresh) = store.user_with_password_hash("olga").await.unwrap();
    assert!(fresh.contains("m=7168,t=5,p=1"), "{fresh}");
    let salt = argon2::password_hash::SaltString::generate(&mut rand::rngs::OsRng);
    let old = argon2::Argon2::default().hash_password(b"olga-password", &salt).unwrap().to_string();
    assert!(old.contains("m=19456,t=2,p=1"), "{old}");
    store.set_password_hash("olga", &old).await.unwrap();
    let (status, _) = login_from(&hub, "olga", "olga-password", None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, renewed) = store.user_with_password_hash("olga").await.unwrap();
    assert!(renewed.contains("m=7168,t=5,p=1") && renewed != fresh, "{renewed}");
    let (status, _) = login_from(&hub, "olga", "olga-password", None).await;
    assert_eq!(status, StatusCode::OK, "the renewed hash logs in");
}
