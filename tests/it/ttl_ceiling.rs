//! A requested idle timeout above the operator's ceiling is refused like
//! every other value above its ceiling, never lowered to it.

use std::time::Duration;

use crate::common::{TestServer, assert_refused};
use sandboxd::pb;
use tonic_types::StatusExt;

#[tokio::test]
async fn a_ttl_above_the_ceiling_is_refused_and_no_session_opens() {
    let srv = TestServer::start_with(|c| c.max_ttl = Duration::from_secs(60)).await;
    let mut c = srv.client.clone();
    let past = pb::CreateSessionRequest {
        ttl_seconds: 61,
        ..Default::default()
    };
    let err = assert_refused(c.create_session(past), "LIMIT_EXCEEDED").await;
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    let info = err.get_details_error_info().expect("an ErrorInfo");
    assert_eq!(
        info.metadata.get("field").map(String::as_str),
        Some("ttl_seconds")
    );
    assert_eq!(info.metadata.get("asked").map(String::as_str), Some("61"));
    assert_eq!(info.metadata.get("max").map(String::as_str), Some("60"));
    assert!(err.message().contains("ceiling of 60"), "{}", err.message());
    let listed = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "{:?}", listed.sessions);

    // The ceiling itself is granted as asked.
    let s = c
        .create_session(pb::CreateSessionRequest {
            ttl_seconds: 60,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.ttl_seconds, 60);
    srv.stop().await;
}
