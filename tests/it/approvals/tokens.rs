//! Who may do what: a session's token may submit plans for its own
//! session and never decide; the approver token may list and decide and
//! never act on a session; the operator's token may do both.

use sandboxd::pb;

use super::{ADMIN, APPROVER, As, files_server, open, plan};
use crate::common::{read_req, reason};

#[tokio::test]
async fn approver_and_session_tokens_cannot_stand_in_for_each_other() {
    let srv = files_server(|_| {}).await;
    let admin = As::new(&srv, ADMIN).await;
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
    let (other, _) = open(&admin, pb::CreateSessionRequest::default()).await;
    let agent = As::new(&srv, &token).await;
    let approver = As::new(&srv, APPROVER).await;

    // The session's token cannot list or decide.
    let list = agent.pending(0).await.unwrap_err();
    assert_eq!(reason(&list), "NOT_PERMITTED", "{list:?}");
    let decide = agent.decide("x-1", true, "").await.unwrap_err();
    assert_eq!(reason(&decide), "NOT_PERMITTED", "{decide:?}");
    // Nor submit for another session (which it cannot even see).
    let foreign = agent
        .submit(&other, plan(&["a"], "true"))
        .await
        .unwrap_err();
    assert_eq!(reason(&foreign), "SESSION_NOT_FOUND", "{foreign:?}");

    // The approver token acts on no session, its own files or any other.
    let read = approver
        .c()
        .read_file(read_req(&id, "a.txt"))
        .await
        .unwrap_err();
    assert_eq!(reason(&read), "NOT_PERMITTED", "{read:?}");
    assert!(
        read.message().contains("approver token"),
        "{}",
        read.message()
    );
    let submit = approver
        .submit(&id, plan(&["a"], "true"))
        .await
        .unwrap_err();
    assert_eq!(reason(&submit), "NOT_PERMITTED", "{submit:?}");
    let create = approver
        .c()
        .create_session(pb::CreateSessionRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&create), "NOT_PERMITTED", "{create:?}");
    let listed = approver
        .c()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "{listed:?}");

    // Both approvers may list and decide; an unknown id is told so.
    assert!(approver.pending(0).await.unwrap().is_empty());
    assert!(admin.pending(0).await.unwrap().is_empty());
    let unknown = approver.decide("nothing-1", true, "").await.unwrap_err();
    assert_eq!(reason(&unknown), "APPROVAL_NOT_FOUND", "{unknown:?}");
    let unspecified = approver
        .c()
        .decide(pb::DecideRequest {
            approval_id: "nothing-1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&unspecified), "INVALID_ARGUMENT", "{unspecified:?}");
    // A wrong token is no approver.
    let stranger = As::new(&srv, "not-a-token").await;
    let refused = stranger.pending(0).await.unwrap_err();
    assert_eq!(reason(&refused), "UNAUTHENTICATED", "{refused:?}");
    srv.stop().await;
}
