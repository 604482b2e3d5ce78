//! Nothing waits where nobody can answer, and nothing is approved by
//! waiting: an unattended session, or no approver seen lately, is refused
//! at once; a wait nobody answers is a rejection; a caller that leaves
//! withdraws its wait, and so does a closing session.

use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{ADMIN, APPROVER, As, files_server, next, open, plan};
use crate::common::reason;

#[tokio::test]
async fn an_unattended_session_never_waits() {
    let srv = files_server(|_| {}).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(
        &admin,
        pb::CreateSessionRequest {
            unattended: true,
            policy: Some(pb::Policy {
                plan_mode: true,
                ask_writes: vec!["**".into()],
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let t0 = Instant::now();
    let refused = agent
        .submit(&id, plan(&["a.py"], "true"))
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(reason(&refused), "APPROVAL_UNAVAILABLE", "{refused:?}");
    let message = refused.message();
    assert!(message.contains("unattended"), "{message}");
    assert!(message.contains("safest option"), "{message}");
    assert!(message.contains("assumption"), "{message}");
    assert!(approver.pending(0).await.unwrap().is_empty());
    let info = agent
        .c()
        .get_session(pb::GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(info.unattended);
    assert!(info.policy.unwrap().plan_mode, "still in plan mode");
    srv.stop().await;
}

#[tokio::test]
async fn without_an_approver_seen_nothing_waits() {
    let srv = files_server(|c| c.approvals.absent_after = Duration::from_secs(2)).await;
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
    let agent = As::new(&srv, &token).await;
    // Never seen.
    let refused = agent
        .submit(&id, plan(&["a.py"], "true"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "APPROVAL_UNAVAILABLE", "{refused:?}");
    assert!(
        refused.message().contains("no approver"),
        "{}",
        refused.message()
    );
    // Seen now: the plan waits.
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let mut events = agent.submit(&id, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(p) = next(&mut events).await else {
        panic!("pending");
    };
    drop(events);
    // Seen too long ago: refused again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused = agent
        .submit(&id, plan(&["a.py"], "true"))
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "APPROVAL_UNAVAILABLE");
    // The plan whose caller left was withdrawn: no longer listed.
    assert!(approver.pending(0).await.unwrap().is_empty());
    let gone = approver.decide(&p.approval_id, true, "").await.unwrap_err();
    assert_eq!(reason(&gone), "APPROVAL_NOT_FOUND");
    srv.stop().await;
}

#[tokio::test]
async fn an_approval_nobody_answers_is_a_rejection() {
    let srv = files_server(|c| c.approvals.timeout = Duration::from_secs(1)).await;
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
    let mut events = agent.submit(&id, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(p) = next(&mut events).await else {
        panic!("pending");
    };
    let Event::Rejected(r) = next(&mut events).await else {
        panic!("rejected, never approved");
    };
    assert!(r.timed_out);
    assert_eq!(r.reason, "nobody answered");
    assert_eq!(r.approval_id, p.approval_id);
    assert!(approver.pending(0).await.unwrap().is_empty());
    let late = approver.decide(&p.approval_id, true, "").await.unwrap_err();
    assert_eq!(reason(&late), "APPROVAL_NOT_FOUND");
    let still = agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "a.py".into(),
            content: "x\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&still), "POLICY_DENIED", "plan mode stays");
    srv.stop().await;
}

#[tokio::test]
async fn closing_a_session_withdraws_what_it_waits_for() {
    let srv = files_server(|_| {}).await;
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
    let mut events = agent.submit(&id, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(_) = next(&mut events).await else {
        panic!("pending");
    };
    approver.one_pending().await;
    admin
        .c()
        .close_session(pb::CloseSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap();
    let Event::Rejected(r) = next(&mut events).await else {
        panic!("withdrawn");
    };
    assert!(r.reason.contains("closed"), "{r:?}");
    assert!(approver.pending(0).await.unwrap().is_empty());
    srv.stop().await;
}

#[tokio::test]
async fn a_session_waiting_for_a_person_is_not_idle() {
    let srv = files_server(|_| {}).await;
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
            ttl_seconds: 1,
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let mut events = agent.submit(&id, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(p) = next(&mut events).await else {
        panic!("pending");
    };
    // Three idle timeouts pass while the plan waits.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(approver.pending(0).await.unwrap().len(), 1);
    approver.decide(&p.approval_id, true, "").await.unwrap();
    let Event::Approved(_) = next(&mut events).await else {
        panic!("approved");
    };
    agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "a.py".into(),
            content: "x\n".into(),
        })
        .await
        .expect("the session is still open, its plan in force");
    srv.stop().await;
}

#[tokio::test]
async fn an_approver_of_one_session_holds_no_other_sessions_calls() {
    let srv = files_server(|c| c.approvals.absent_after = Duration::from_secs(2)).await;
    let admin = As::new(&srv, ADMIN).await;
    let plan_mode = || pb::CreateSessionRequest {
        policy: Some(pb::Policy {
            plan_mode: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let (mine, mine_token) = open(&admin, plan_mode()).await;
    let (other, other_token) = open(&admin, plan_mode()).await;
    // The approver of `mine` long-polls its own session's waits only (as
    // the MCP bridge does).
    let listener = {
        let mut c = admin.c();
        let mine = mine.clone();
        tokio::spawn(async move {
            let req = pb::ListPendingApprovalsRequest {
                wait_ms: 20_000,
                session_id: mine,
            };
            c.list_pending_approvals(req)
                .await
                .unwrap()
                .into_inner()
                .pending
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The other session's plan finds nobody who answers for it: refused at
    // once, not held for the approval timeout.
    let t0 = Instant::now();
    let refused = As::new(&srv, &other_token)
        .await
        .submit(&other, plan(&["a.py"], "true"))
        .await
        .unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(reason(&refused), "APPROVAL_UNAVAILABLE", "{refused:?}");
    // Its own session's plan is held and reaches that approver alone.
    let agent = As::new(&srv, &mine_token).await;
    let mut events = agent.submit(&mine, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(_) = next(&mut events).await else {
        panic!("held for the approver of its session");
    };
    let seen = tokio::time::timeout(Duration::from_secs(10), listener)
        .await
        .expect("woken by its own session's wait")
        .unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].session_id, mine);
    srv.stop().await;
}
