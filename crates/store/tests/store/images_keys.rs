//! The image catalog, SSH keys and settings.

use crate::common::t;
use gpuhub_core::catalog::ImageEntry;
use gpuhub_core::user::Role;
use gpuhub_store::{SshKeyRecord, Store, StoreError};

both!(images, personal_images, ssh_keys, settings, reservations);

async fn personal_images(s: Store) {
    use gpuhub_core::image::{PersonalImage, personal_reference};
    let mine = |owner: &str, name: &str| PersonalImage {
        owner: owner.into(),
        name: name.into(),
        reference: personal_reference("0123456789abcdef", owner, name),
        size_bytes: 5 << 30,
        workload: "w1".into(),
        created_at: t(3),
    };
    assert!(s.list_personal_images("alice").await.unwrap().is_empty());
    s.insert_personal_image(&mine("alice", "env")).await.unwrap();
    s.insert_personal_image(&mine("alice", "base")).await.unwrap();
    s.insert_personal_image(&mine("bob", "env")).await.unwrap();
    let again = s.insert_personal_image(&mine("alice", "env")).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict(_)), "{again:?}");
    assert_eq!(s.list_personal_images("alice").await.unwrap(), vec![mine("alice", "base"), mine("alice", "env")]);
    assert_eq!(s.get_personal_image("bob", "env").await.unwrap().reference, "gpuhub-user/0123456789ab/bob/env:latest");
    s.delete_personal_image("alice", "env").await.unwrap();
    assert!(matches!(s.get_personal_image("alice", "env").await.unwrap_err(), StoreError::NotFound { .. }));
    assert!(matches!(s.delete_personal_image("alice", "env").await.unwrap_err(), StoreError::NotFound { .. }));
    assert_eq!(s.list_personal_images("bob").await.unwrap().len(), 1, "bob's stays");
}

fn image(name: &str, reference: &str, description: &str) -> ImageEntry {
    let apps = vec![gpuhub_core::workload::AppSpec {
        name: "lab".into(),
        port: 8888,
        command: vec!["jupyter".into(), "lab".into(), "--ServerApp.base_url={base_url}".into()],
    }];
    ImageEntry { name: name.into(), image: reference.into(), description: description.into(), apps }
}

async fn images(s: Store) {
    assert!(s.list_images().await.unwrap().is_empty());
    let torch = image("pytorch", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", "PyTorch 2.4 – CUDA 12.1");
    let base = image("cuda", "nvidia/cuda:12.4.1-base-ubuntu22.04", "");
    s.upsert_image(&torch).await.unwrap();
    s.upsert_image(&base).await.unwrap();
    assert_eq!(s.get_image("pytorch").await.unwrap(), torch);
    assert_eq!(s.list_images().await.unwrap(), vec![base.clone(), torch]);

    let newer = image("pytorch", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "PyTorch 2.5");
    s.upsert_image(&newer).await.unwrap();
    assert_eq!(s.get_image("pytorch").await.unwrap(), newer);
    assert_eq!(s.list_images().await.unwrap().len(), 2);

    s.delete_image("pytorch").await.unwrap();
    for e in [s.get_image("pytorch").await.unwrap_err(), s.delete_image("pytorch").await.unwrap_err()] {
        assert!(matches!(&e, StoreError::NotFound { what: "image", key } if key == "pytorch"), "{e:?}");
    }
    assert_eq!(s.list_images().await.unwrap(), vec![base]);
}

async fn reservations(s: Store) {
    use gpuhub_core::reservation::ReservationView;
    let r = |id: &str, start: i64, end: i64, model: Option<&str>| ReservationView {
        id: id.into(),
        queue: "vision".into(),
        gpus: 2,
        model: model.map(str::to_owned),
        start: t(start),
        end: t(end),
        created_by: "admin".into(),
    };
    let (a, b, old) = (r("b-deadline", 100, 200, Some("H200")), r("a-later", 150, 300, None), r("old", 0, 50, None));
    for x in [&a, &b, &old] {
        s.insert_reservation(x, t(1)).await.unwrap();
    }
    // ordered by start; those ended by `after` are left out
    assert_eq!(s.list_reservations(t(60)).await.unwrap(), vec![a.clone(), b.clone()]);
    assert_eq!(s.list_reservations(t(250)).await.unwrap(), vec![b.clone()]);
    let e = s.insert_reservation(&a, t(2)).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("b-deadline")), "{e:?}");
    s.delete_reservation("b-deadline").await.unwrap();
    let e = s.delete_reservation("b-deadline").await.unwrap_err();
    assert!(matches!(&e, StoreError::NotFound { what: "reservation", .. }), "{e:?}");
    assert_eq!(s.list_reservations(t(0)).await.unwrap(), vec![old, b]);
}

fn key(fp: &str, created_ms: i64) -> SshKeyRecord {
    SshKeyRecord {
        fingerprint: fp.into(),
        public_key: format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{fp} comment"),
        comment: format!("{fp}@host"),
        created_at: t(created_ms),
    }
}

async fn ssh_keys(s: Store) {
    let alice = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    let bob = s.create_user("bob", "h", Role::User, t(0)).await.unwrap();
    let (k1, k2, k3) = (key("SHA256:one", 20), key("SHA256:two", 10), key("SHA256:three", 5));
    s.add_ssh_key(alice.id, &k1).await.unwrap();
    s.add_ssh_key(alice.id, &k2).await.unwrap();
    s.add_ssh_key(bob.id, &k3).await.unwrap();
    assert_eq!(s.list_ssh_keys(alice.id).await.unwrap(), vec![k2.clone(), k1.clone()]);
    assert_eq!(s.list_ssh_keys(bob.id).await.unwrap(), vec![k3.clone()]);
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:one").await.unwrap(), Some(alice.clone()));
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:three").await.unwrap(), Some(bob.clone()));
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:none").await.unwrap(), None);

    // a fingerprint belongs to one account only
    for owner in [&alice, &bob] {
        let e = s.add_ssh_key(owner.id, &key("SHA256:one", 30)).await.unwrap_err();
        assert!(matches!(&e, StoreError::Conflict(m) if m.contains("SHA256:one")), "{e:?}");
    }
    let e = s.add_ssh_key(bob.id + 1000, &key("SHA256:four", 0)).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { what: "user", .. }), "{e:?}");

    // a user cannot delete someone else's key
    let e = s.delete_ssh_key(bob.id, "SHA256:one").await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { what: "ssh key", .. }), "{e:?}");
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:one").await.unwrap(), Some(alice.clone()));
    s.delete_ssh_key(alice.id, "SHA256:one").await.unwrap();
    assert_eq!(s.user_by_ssh_fingerprint("SHA256:one").await.unwrap(), None);
    assert_eq!(s.list_ssh_keys(alice.id).await.unwrap(), vec![k2]);
    assert!(s.delete_ssh_key(alice.id, "SHA256:one").await.is_err());
}

async fn settings(s: Store) {
    assert_eq!(s.get_setting("jwt-secret").await.unwrap(), None);
    s.set_setting("jwt-secret", "abc").await.unwrap();
    s.set_setting("other", "").await.unwrap();
    assert_eq!(s.get_setting("jwt-secret").await.unwrap().as_deref(), Some("abc"));
    s.set_setting("jwt-secret", "def\nmulti-line ünïcode").await.unwrap();
    assert_eq!(s.get_setting("jwt-secret").await.unwrap().as_deref(), Some("def\nmulti-line ünïcode"));
    assert_eq!(s.get_setting("other").await.unwrap().as_deref(), Some(""));
    // by prefix (LIKE's wildcards and case taken literally), and taken once
    for k in ["ch_1.a", "ch_1.b", "ch_10.a", "chx1.a", "CH_1.c"] {
        s.set_setting(k, k).await.unwrap();
    }
    let under: Vec<String> = s.settings_with_prefix("ch_1.").await.unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(under, ["ch_1.a", "ch_1.b"]);
    assert_eq!(s.take_setting("ch_1.a").await.unwrap().as_deref(), Some("ch_1.a"));
    assert_eq!(s.take_setting("ch_1.a").await.unwrap(), None);
    assert_eq!(s.get_setting("ch_1.a").await.unwrap(), None);
}
