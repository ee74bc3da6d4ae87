//! The output of a workspace's apps through the logs endpoint (`?app=NAME`): captured by the
//! controller (the fake runtime's exec echoes the app's command line), followed while it runs, read
//! from the file after, and a 404 naming the apps for an unknown one.

use gpuhub_testkit as common;

use common::{Hub, job};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn app_output_is_reachable() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    let alice = hub.user(&admin, "alice").await;
    let mut body = job("nb", 0);
    body["kind"] = json!("workspace");
    body["command"] = json!(["sleep", "infinity"]);
    body["apps"] = json!([{"name": "lab", "port": 8888, "command": ["serve", "--port={port}"]}]);
    hub.submit(&alice, body).await;
    hub.wait_state(&alice, "nb", "running").await;

    // followed: the first output comes as soon as the app writes it (the test waits on the stream)
    let mut resp = hub
        .http
        .get(format!("{}/api/v1/workloads/nb/logs?app=lab&follow=true", hub.url))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk()).await.unwrap().unwrap();
    let first = String::from_utf8(chunk.unwrap().to_vec()).unwrap();
    assert!(first.contains("serve --port=8888"), "{first:?}");
    drop(resp);

    // not followed, with tail and limit_bytes as for the main log
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads/nb/logs?app=lab", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v.as_str().unwrap().contains("serve --port=8888"), "{v}");
    let (_, v) = hub.call(Method::GET, "/api/v1/workloads/nb/logs?app=lab&limit_bytes=5", Some(&alice), None).await;
    assert_eq!(v.as_str().unwrap().len(), 5, "{v}");

    // an app it does not have: 404 naming the ones it has; another user sees nothing of it
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads/nb/logs?app=tensorboard", Some(&alice), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("no app named \"tensorboard\" (apps: lab)"), "{v}");
    let bob = hub.user(&admin, "bob").await;
    let (s, _) = hub.call(Method::GET, "/api/v1/workloads/nb/logs?app=lab", Some(&bob), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // after the workspace stopped, the app's output is still there
    let (s, _) = hub.call(Method::POST, "/api/v1/workloads/nb/stop", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = hub.call(Method::GET, "/api/v1/workloads/nb/logs?app=lab&follow=true", Some(&alice), None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v.as_str().unwrap().contains("serve --port=8888"), "a followed log of a stopped workspace ends: {v}");
}
