//! Team folders through the API, on the fake engine: an admin gives a queue a team group; its folder
//! is made root-owned with that group, mode 2770; a member's workload asking for it gets it read-write
//! at `/team/<queue>` and carries the group; a non-member, an unknown queue and a queue without a folder
//! are refused with a 422 on `teams` naming the teams the caller may mount; a group another queue has,
//! or a system group, is refused.

use gpuhub_testkit as common;

use common::Hub;
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[tokio::test]
async fn members_mount_their_team_folder_and_others_cannot() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let bob = hub.user(&admin, "bob").await;
    let queue = json!({"name": "vision", "members": ["alice"], "team_gid": 60001});
    let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(&alice), Some(queue.clone())).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(queue)).await;
    assert_eq!((s, v["team_gid"].as_u64()), (StatusCode::CREATED, Some(60001)), "{v}");
    let folder = hub.dir.path().join("data/teams/vision");
    let m = std::fs::metadata(&folder).expect("the team folder is made");
    assert_eq!((m.uid(), m.gid(), m.permissions().mode() & 0o7777), (0, 60001, 0o2770));
    // another queue cannot take the same group, nor a system group
    let (s, v) =
        hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": "nlp", "team_gid": 60001}))).await;
    assert_eq!((s, v["field"].as_str()), (StatusCode::CONFLICT, Some("team_gid")), "{v}");
    assert!(v["detail"].as_str().unwrap().contains("queue vision"), "{v}");
    let (s, v) =
        hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": "nlp", "team_gid": 0}))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (s, _) = hub.call(Method::POST, "/api/v1/queues", Some(&admin), Some(json!({"name": "plain"}))).await;
    assert_eq!(s, StatusCode::CREATED);

    let ask = |name: &str, teams: serde_json::Value| {
        json!({"name": name, "kind": "job", "image": "busybox:latest", "command": ["sleep", "100"],
            "resources": {"cpus": 0.1, "memory": "64MiB", "gpus": 0}, "teams": teams})
    };
    for (who, teams, says) in [
        (&bob, json!(["vision"]), "bob is not a member of team vision (your teams: none)"),
        (&alice, json!(["nope"]), "no queue named \"nope\" (your teams: vision)"),
        (&alice, json!(["plain"]), "queue plain has no team folder (your teams: vision)"),
        (&alice, json!(["vision", "vision"]), "vision is named twice"),
    ] {
        let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(who), Some(ask("t", teams.clone()))).await;
        assert_eq!((s, v["field"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("teams")), "{teams}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{teams}: {v}");
    }

    let w = hub.submit(&alice, ask("train", json!(["vision"]))).await;
    assert_eq!(w["teams"], json!([{"queue": "vision", "path": folder.display().to_string(), "gid": 60001}]), "{w}");
    hub.wait_state(&alice, "train", "running").await;
    let run = hub.run(&alice, "train").await;
    let spec = hub.runtime.spec(&run).unwrap();
    let m = spec.mounts.iter().find(|m| m.target == "/team/vision").expect("the team folder is mounted");
    assert_eq!((m.source.as_str(), m.read_only), (folder.to_str().unwrap(), false));
    assert_eq!(spec.identity.groups, vec![60001]);
    // work without a team carries no group
    hub.submit(&alice, ask("solo", json!([]))).await;
    hub.wait_state(&alice, "solo", "running").await;
    let solo = hub.runtime.spec(&hub.run(&alice, "solo").await).unwrap();
    assert!(solo.identity.groups.is_empty() && !solo.mounts.iter().any(|m| m.target.starts_with("/team")));

    // the group can be changed and removed; the listing shows it to everyone
    let (s, v) = hub.call(Method::PATCH, "/api/v1/queues/vision", Some(&admin), Some(json!({"team_gid": null}))).await;
    assert_eq!((s, v.get("team_gid")), (StatusCode::OK, None), "{v}");
    let (s, v) = hub.call(Method::POST, "/api/v1/workloads", Some(&alice), Some(ask("late", json!(["vision"])))).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
}
