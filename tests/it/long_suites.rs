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
