//! The person's side on the command line: `sandboxd approvals --once`
//! shows a plan with its withheld files and their rules, `reject` and
//! `approve` decide by id, and a rejected `apply` says nothing ran and
//! exits 1.

use std::process::Output;

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{ADMIN, APPROVER, As, files_server, next, open, plan};
use crate::common::{SANDBOXD, TestServer};

/// Runs the CLI against `srv` with `token`.
async fn cli(srv: &TestServer, token: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(SANDBOXD)
        .args(["--addr", &format!("http://{}", srv.addr), "--token", token])
        .args(args)
        .env("USER", "carol")
        .output()
        .await
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn the_cli_shows_decides_and_reports_rejections() {
    let srv = files_server(|c| {
        c.rules.deny_writes = vec!["tests/**".into()];
        c.rules.ask_tools = vec!["ApplyPatch".into()];
    })
    .await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(
        &admin,
        pb::CreateSessionRequest {
            policy: Some(pb::Policy {
                plan_mode: true,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let mut plan = plan(
        &["src/calc.py", "tests/test_calc.py"],
        "python3 -m pytest -q",
    );
    plan.goal = "fix add\n  withheld: nothing (a forged line)".into();
    let mut events = agent.submit(&id, plan).await.unwrap();
    let Event::Pending(p) = next(&mut events).await else {
        panic!("pending");
    };

    // The listing, piped: the plan, its files, what is withheld and why.
    let listed = cli(&srv, APPROVER, &["approvals", "--once"]).await;
    assert!(listed.status.success(), "{}", text(&listed));
    let shown = text(&listed);
    for expected in [
        p.approval_id.as_str(),
        "src/calc.py",
        "tests/test_calc.py",
        "deny_writes \"tests/**\"",
        "python3 -m pytest -q",
    ] {
        assert!(
            shown.contains(expected),
            "{expected:?} missing from:\n{shown}"
        );
    }
    // A newline in the model's text cannot make a line of the listing.
    assert!(
        !shown
            .lines()
            .any(|l| l.trim_start().starts_with("withheld: nothing")),
        "{shown}"
    );

    // A session's token is no approver.
    let refused = cli(&srv, &token, &["approve", &p.approval_id]).await;
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("NOT_PERMITTED"),
        "{}",
        text(&refused)
    );

    // Rejected by id, with a note the agent sees and the name of who.
    let rejected = cli(
        &srv,
        APPROVER,
        &["reject", &p.approval_id, "--note", "smaller, please"],
    )
    .await;
    assert!(rejected.status.success(), "{}", text(&rejected));
    let Event::Rejected(r) = next(&mut events).await else {
        panic!("rejected");
    };
    assert_eq!(r.reason, "smaller, please");
    assert_eq!(r.decision.unwrap().decided_by, "approver (carol)");

    // A held patch, rejected: `apply` says nothing ran, and exits 1.
    let (rw, _) = open(&admin, pb::CreateSessionRequest::default()).await;
    let patch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        patch.path(),
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n",
    )
    .unwrap();
    let path = patch.path().display().to_string();
    let applying = tokio::spawn({
        let srv_addr = srv.addr;
        let rw = rw.clone();
        async move {
            tokio::process::Command::new(SANDBOXD)
                .args(["--addr", &format!("http://{srv_addr}"), "--token", ADMIN])
                .args(["--session", &rw, "apply", &path])
                .output()
                .await
                .unwrap()
        }
    });
    let waiting = approver.one_pending().await;
    let decided = cli(&srv, APPROVER, &["reject", &waiting.approval_id]).await;
    assert!(decided.status.success(), "{}", text(&decided));
    let applied = applying.await.unwrap();
    assert_eq!(applied.status.code(), Some(1), "{}", text(&applied));
    assert!(
        text(&applied).contains("not executed"),
        "{}",
        text(&applied)
    );

    // Deciding it again: not found, exit non-zero.
    let again = cli(&srv, APPROVER, &["approve", &waiting.approval_id]).await;
    assert!(!again.status.success());
    assert!(
        text(&again).contains("APPROVAL_NOT_FOUND"),
        "{}",
        text(&again)
    );
    srv.stop().await;
}

/// Type-ahead: in the interactive `sandboxd approvals`, a double `y` typed
/// while the first item is on screen approves that item only. The second
/// key was typed before the next item was shown, so it decides nothing,
/// and that item waits for a key pressed once it is on screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_typed_before_an_item_is_shown_decide_nothing() {
    use std::io::{Read, Write};
    let srv = files_server(|_| {}).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(
        &admin,
        pb::CreateSessionRequest {
            policy: Some(pb::Policy {
                ask_writes: vec!["src/**".into()],
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let calls: Vec<_> = ["src/a.py", "src/b.py"]
        .into_iter()
        .map(|path| {
            let mut c = agent.c();
            let req = pb::CreateFileRequest {
                session_id: id.clone(),
                path: path.into(),
                content: "x = 1\n".into(),
            };
            tokio::spawn(async move { c.create_file(req).await })
        })
        .collect();
    while approver.pending(0).await.unwrap().len() < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let line = format!(
        "'{SANDBOXD}' --addr 'http://{}' --token '{APPROVER}' approvals",
        srv.addr
    );
    let mut terminal = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("USER", "carol")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux `script` for a pseudo-terminal");
    let mut keys = terminal.stdin.take().unwrap();
    let mut screen = terminal.stdout.take().unwrap();
    let shown = tokio::task::spawn_blocking(move || {
        // Until the first prompt is on screen.
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("[q] quit") {
            let n = screen.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "the terminal closed: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        keys.write_all(b"yy").unwrap();
        keys.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_secs(3));
        keys.write_all(b"q").unwrap();
        keys.flush().unwrap();
        let mut rest = Vec::new();
        let _ = screen.read_to_end(&mut rest);
        seen.extend_from_slice(&rest);
        String::from_utf8_lossy(&seen).into_owned()
    })
    .await
    .unwrap();
    let status = tokio::task::block_in_place(|| terminal.wait()).unwrap();
    assert!(status.success(), "{shown}");
    let waiting = approver.pending(0).await.unwrap();
    assert_eq!(
        waiting.len(),
        1,
        "one approved, one still waiting:\n{shown}"
    );
    assert_eq!(shown.matches("approve\r\n").count(), 1, "{shown}");
    // The other call is still held; the approved one wrote its file.
    let done: Vec<_> = calls.into_iter().filter(|c| c.is_finished()).collect();
    assert_eq!(done.len(), 1, "{shown}");
    approver
        .decide(&waiting[0].approval_id, false, "")
        .await
        .unwrap();
}
