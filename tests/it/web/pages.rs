//! What the pages show: refusals highlighted with their reason, what a
//! command printed or a client named shown as text, and a session that is
//! only looked at is left as it was.

use super::{ADMIN, Served};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_shows_calls_as_text_and_refusals_with_their_reason() {
    let served = Served::start(true).await;
    let (id, _) = served.session();
    let hostile = r#"echo '<script>alert(1)</script>'; printf '\033[2J'"#;
    let (code, out) = served.cli(None, &["run", "-s", &id, "--", hostile]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = served.cli(
        None,
        &["create", "-s", &id, "<b>bold</b>.txt", "--content", "x"],
    );
    assert_eq!(code, 0, "{out}");
    let (code, _) = served.cli(
        None,
        &["edit", "-s", &id, "missing.txt", "--old", "a", "--new", "b"],
    );
    assert_ne!(code, 0);

    let admin = served.login(ADMIN);
    let page = served.get(&format!("/sessions/{id}"), Some(&admin));
    assert_eq!(page.status, 200);
    let body = &page.body;
    // Shown as text: escaped, never markup.
    assert!(!body.contains("<script>alert"), "{body}");
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{body}"
    );
    assert!(!body.contains("<b>bold"), "{body}");
    assert!(body.contains("&lt;b&gt;bold&lt;/b&gt;.txt"), "{body}");
    assert!(!body.contains('\u{1b}'), "a raw escape reached the page");
    // The only script is the service's own.
    assert_eq!(body.matches("<script").count(), 1, "{body}");
    // The refusal, highlighted with its reason.
    let refused = body
        .split("<tr")
        .find(|row| row.contains("EditFile"))
        .expect("the refused edit is on the timeline");
    assert!(refused.contains("class=\"refused\""), "{refused}");
    assert!(refused.contains("FILE_NOT_FOUND"), "{refused}");
    // The live part answers the same rows.
    let part = served.get(&format!("/parts/sessions/{id}/timeline"), Some(&admin));
    assert!(part.body.contains("FILE_NOT_FOUND"), "{}", part.body);
    let list = served.get("/", Some(&admin)).body;
    assert!(list.contains("status-idle"), "{list}");
    let health = served.get("/health", Some(&admin)).body;
    assert!(
        health.contains("Container engine</dt><dd><span class=\"status-idle\">answers"),
        "{health}"
    );
    let environments = served.get("/environments", Some(&admin));
    assert_eq!(environments.status, 200);
}

/// Watching a session is not using it: its last activity stays where its
/// last call left it, and no call is journaled for a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looking_at_a_session_changes_nothing() {
    let served = Served::start(false).await;
    let (id, _) = served.session();
    let admin = served.login(ADMIN);
    let before = served.listing();
    let calls = |body: &str| body.matches("<tr").count();
    let first = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for _ in 0..5 {
        for path in [
            "/".to_string(),
            format!("/sessions/{id}"),
            "/parts/sessions".into(),
            format!("/parts/sessions/{id}/timeline"),
            format!("/sessions/{id}/changes"),
            format!("/sessions/{id}/plan"),
            "/health".into(),
        ] {
            assert_eq!(served.get(&path, Some(&admin)).status, 200, "{path}");
        }
    }
    let after = served.listing();
    assert_eq!(before, after, "watching touched the session");
    let last = served.get(&format!("/sessions/{id}"), Some(&admin)).body;
    assert_eq!(calls(&first), calls(&last), "a page view was journaled");
}

/// A build shows on the environments page with its step, its output as
/// text and how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_shows_its_steps_and_output_on_the_environments_page() {
    let served = Served::start(true).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("setup.sh"),
        "echo 'building <em>it</em>'\nexit 3\n",
    )
    .unwrap();
    let name = format!(
        "webfail-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let out = std::process::Command::new(crate::common::SANDBOXD)
        .args(["--addr", &format!("http://{}", served.grpc)])
        .args(["env", "build", &name, "--setup"])
        .arg(dir.path().join("setup.sh"))
        .env("SANDBOXD_TOKEN", ADMIN)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let admin = served.login(ADMIN);
    let page = served.get("/environments", Some(&admin)).body;
    let build = page
        .split("<div class=\"build\">")
        .find(|b| b.contains(&name))
        .unwrap_or_else(|| panic!("the build is listed: {page}"));
    assert!(build.contains("failed: BUILD_FAILED"), "{build}");
    assert!(
        build.contains("building &lt;em&gt;it&lt;/em&gt;"),
        "{build}"
    );
    assert!(!build.contains("<em>"), "{build}");
    let part = served.get("/parts/builds", Some(&admin)).body;
    assert!(part.contains(&name), "{part}");
}
