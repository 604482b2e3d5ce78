//! Long test suites: a session sets its commands' default timeout once,
//! under the operator's ceiling on command timeouts.

use std::time::Duration;

use crate::common::{TestServer, assert_refused, run};
use sandboxd::pb;
use tonic_types::StatusExt;

#[tokio::test]
async fn a_session_sets_its_commands_default_timeout_once() {
    let srv = TestServer::with_docker_mode_and(crate::common::Mode::Supervisor, |c| {
        c.sandbox.default_timeout = Duration::from_secs(2);
        c.sandbox.max_timeout = Duration::from_secs(60);
    })
    .await;
    let mut c = srv.client.clone();

    // Above the ceiling: refused, and no session opens.
    let err = assert_refused(
        c.create_session(pb::CreateSessionRequest {
            default_timeout_ms: 60_001,
            ..Default::default()
        }),
        "LIMIT_EXCEEDED",
    )
    .await;
    let info = err.get_details_error_info().expect("an ErrorInfo");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("default_timeout_ms")
    );
    let listed = c.list_sessions(pb::ListSessionsRequest {}).await.unwrap();
    assert!(listed.into_inner().sessions.is_empty());

    // A session asking for 6 s: its commands that give no timeout outlive
    // the operator's 2 s default, and are stopped at their session's.
    let long = c
        .create_session(pb::CreateSessionRequest {
            default_timeout_ms: 6_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(long.default_timeout_ms, 6_000);
    let ran = run(&srv.client, &long.session_id, "sleep 3; echo done", 0).await;
    assert!(!ran.exit.timed_out, "{:?}", ran.exit);
    assert_eq!(ran.stdout(), "done\n");
    let ran = run(&srv.client, &long.session_id, "sleep 60", 0).await;
    assert!(ran.exit.timed_out, "{:?}", ran.exit);
    assert!(
        ran.elapsed >= Duration::from_secs(6) && ran.elapsed < Duration::from_secs(30),
        "{:?}",
        ran.elapsed
    );
    // A command's own timeout still wins.
    let ran = run(&srv.client, &long.session_id, "sleep 60", 1_000).await;
    assert!(
        ran.exit.timed_out && ran.elapsed < Duration::from_secs(5),
        "{:?}",
        ran.elapsed
    );

    // A session asking for nothing keeps the operator's default.
    let plain = c
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(plain.default_timeout_ms, 2_000);
    let ran = run(&srv.client, &plain.session_id, "sleep 3; echo done", 0).await;
    assert!(ran.exit.timed_out, "{:?}", ran.exit);
    srv.stop().await;
}

/// A result cut short says how to get the rest: a timeout names the limit,
/// how to raise it and up to what (or that it is already the ceiling); a
/// truncated stream names its cap, how the kept text is split, and how to
/// raise the cap.
#[tokio::test]
async fn a_limited_result_says_how_to_raise_the_limit_and_up_to_what() {
    let srv = TestServer::with_docker_mode_and(crate::common::Mode::Supervisor, |c| {
        c.sandbox.default_timeout = Duration::from_secs(1);
        c.sandbox.max_timeout = Duration::from_secs(4);
        c.sandbox.default_cap = 100;
        c.sandbox.max_cap = 5_000;
    })
    .await;
    let (id, _) = srv.session().await;

    let ran = run(&srv.client, &id, "sleep 30", 0).await;
    assert!(ran.exit.timed_out);
    let note = ran.exit.notes.join("\n");
    assert!(note.contains("timeout of 1 s"), "{note}");
    assert!(
        note.contains("timeout_ms") && note.contains("default_timeout_ms"),
        "{note}"
    );
    assert!(note.contains("ceiling of 4 s (4000 ms)"), "{note}");

    let ran = run(&srv.client, &id, "sleep 30", 4_000).await;
    assert!(ran.exit.timed_out);
    let note = ran.exit.notes.join("\n");
    assert!(
        note.contains("the operator's ceiling: it cannot be given longer"),
        "{note}"
    );

    let ran = run(&srv.client, &id, "seq 1 1000; seq 1 1000 >&2", 0).await;
    assert!(!ran.exit.timed_out);
    let out = ran.exit.stdout.as_ref().unwrap();
    assert!(out.truncated && out.tail.ends_with("1000\n"), "{out:?}");
    let note = ran.exit.notes.join("\n");
    assert!(note.contains("100 characters of stdout, 100 of"), "{note}");
    assert!(note.contains("`tail` the last quarter"), "{note}");
    assert!(
        note.contains("stdout_cap") && note.contains("ceiling of 5000"),
        "{note}"
    );
    assert!(
        !note.contains("timeout"),
        "only what happened is said: {note}"
    );

    let ran = run(&srv.client, &id, "echo short", 0).await;
    assert!(ran.exit.notes.is_empty(), "{:?}", ran.exit.notes);
    srv.stop().await;
}
