//! The newcomer's review (`shared/reviews/newcomer-2.md`): each bug with a test that fails on the code
//! before its fix.

mod common;

use common::*;
use reqwest::{Method, StatusCode, redirect};

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

/// Bug 9: the login form needed JavaScript; without it the browser sent it with GET and the password
/// landed in the URL. The form posts to `/login` itself, which signs in (a session only) and returns
/// to `next` on this site; a wrong password shows the page again with the reason; another site's form
/// is refused.
#[tokio::test]
async fn the_login_form_works_without_javascript() {
    let hub = Hub::start().await;
    let admin = hub.admin().await;
    hub.user(&admin, "alice").await;
    let page = hub.http.get(format!("{}/login?next=/usage", hub.url)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<form id="f" method="post" action="/login">"#), "{page}");
    assert!(page.contains(r#"<input type="hidden" name="next" value="/usage">"#), "{page}");

    let http = no_redirects();
    let post = |body: &'static str| {
        http.post(format!("{}/login", hub.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", hub.url.as_str())
            .body(body)
    };
    let r = post("username=alice&password=alice-password&next=%2Fusage").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/usage");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("gpuhub_session="), "{cookie}");
    // the session opens the portal
    let r = http.get(format!("{}/usage", hub.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // only this site's paths
    let r = post("username=alice&password=alice-password&next=%2F%2Fevil.example%2F").send().await.unwrap();
    assert_eq!(r.headers()["location"], "/");

    // a wrong password: the page again, with the reason, and no session
    let r = post("username=alice&password=wrong&next=%2Fusage").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get("set-cookie").is_none());
    let page = r.text().await.unwrap();
    assert!(page.contains("invalid username or password"), "{page}");
    assert!(page.contains(r#"name="next" value="/usage""#), "{page}");

    // another site's form
    let r = http
        .post(format!("{}/login", hub.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", "https://evil.example")
        .body("username=alice&password=alice-password")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get("set-cookie").is_none());
    let _ = Method::GET;
}
