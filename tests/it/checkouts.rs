//! Real checkouts as CI has them: a repository owned by root (or any uid
//! other than the one commands run as) still works with git inside the
//! sandbox.

use std::process::Command;

use crate::common::{TestServer, run};
use sandboxd::pb;

/// git refuses a repository whose owner differs from the caller ("dubious
/// ownership"); in the sandbox every repository is the one being worked on,
/// so git must just work there.
#[tokio::test]
async fn git_works_in_a_checkout_owned_by_another_user() {
    let srv = TestServer::with_docker().await;
    let repo = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.email=ci@example.com", "-c", "user.name=ci"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "calc.py"]);
    git(&["commit", "-q", "-m", "calc"]);
    std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            workspace_path: repo.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ran = run(
        &srv.client,
        &s.session_id,
        "id -u; git status --short && git diff --stat && git log --oneline | wc -l",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}{}", ran.stdout(), ran.stderr());
    assert!(!ran.stderr().contains("dubious"), "{}", ran.stderr());
    let out = ran.stdout();
    assert!(
        !out.starts_with("0\n"),
        "the checkout is root's, commands are not: {out}"
    );
    assert!(out.contains(" M calc.py"), "{out}");
    assert!(out.contains("calc.py | 2 +-"), "{out}");
    assert!(out.ends_with("1\n"), "{out}");
    srv.stop().await;
}
