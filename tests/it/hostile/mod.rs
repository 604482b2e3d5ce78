//! A table of hostile inputs over gRPC against a real Docker-backed session:
//! path tricks, NUL bytes, strings past the message limit, invalid UTF-8,
//! empty and absurd caps and timeouts, unknown and closed sessions. Each row
//! names the status code and ErrorInfo reason it must get; afterwards the
//! workspace and the directory beside it are byte-for-byte unchanged
//! (`table`; `calls` makes the calls a hostile client would). A close
//! racing a running command, and the session ceiling, follow here.

mod calls;
mod table;

use std::time::Duration;

use crate::common::{TestServer, assert_refused, read_req, run_req, try_run};
use sandboxd::pb;
use tonic_types::StatusExt;

#[tokio::test]
async fn closing_a_session_during_a_command_ends_both_cleanly() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let client = server.client.clone();
    let sid = id.clone();
    let running = tokio::spawn(async move {
        try_run(&client, run_req(&sid, "echo started; sleep 60", 120_000)).await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let closed = server
        .client
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.workspace_removed);
    // The command ends promptly: with a final result (its container is
    // gone) or, if the close won the race to the stream, a clear status.
    let outcome = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the command did not end after its session closed")
        .unwrap();
    match outcome {
        Ok(ran) => assert_ne!(ran.exit.exit_code, 0, "{:?}", ran.exit),
        Err(status) => assert!(
            status.get_details_error_info().is_some(),
            "a status without a reason: {status:?}"
        ),
    }
    assert!(
        server.containers_gone_soon().await,
        "the container outlived its session"
    );
    assert!(crate::common::gone_soon(&ws).await);
    let mut c = server.client.clone();
    assert_refused(c.read_file(read_req(&id, "x")), "SESSION_NOT_FOUND").await;
    server.stop().await;
}

#[tokio::test]
async fn sessions_past_the_operator_ceiling_are_refused() {
    let server = TestServer::start_with(|c| c.max_sessions = 2).await;
    server.session().await;
    server.session().await;
    let mut c = server.client.clone();
    let third = c.create_session(pb::CreateSessionRequest::default());
    let err = assert_refused(third, "TOO_MANY_SESSIONS").await;
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    server.stop().await;
}
