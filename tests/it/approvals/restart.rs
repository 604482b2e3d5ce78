//! An approved plan outlives the service: after a kill -9 and a new start
//! the session comes back with its plan and exactly its grant, never in a
//! looser mode.

use std::os::unix::fs::PermissionsExt;

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{checkout, next, plan};
use crate::common::{edit, edit_req, reason};
use crate::restart_deep::{client, serve};
use crate::served::Unmount;

#[tokio::test]
async fn an_approved_plan_comes_back_after_a_kill() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let dir = checkout(&roots);
    // Without a token every caller is the operator, who may approve.
    let (mut first, port) = serve(&roots, &state);
    let mut c = client(port).await;
    let id = c
        .create_session(pb::CreateSessionRequest {
            workspace_path: dir.display().to_string(),
            policy: Some(pb::Policy {
                plan_mode: true,
                deny_writes: vec!["tests/**".into()],
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;
    c.list_pending_approvals(pb::ListPendingApprovalsRequest {
        wait_ms: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut events = c
        .submit_plan(pb::SubmitPlanRequest {
            session_id: id.clone(),
            plan: Some(plan(
                &["src/calc.py", "tests/test_calc.py"],
                "python3 tests/test_calc.py",
            )),
        })
        .await
        .unwrap()
        .into_inner();
    let Event::Pending(p) = next(&mut events).await else {
        panic!("pending");
    };
    c.decide(pb::DecideRequest {
        approval_id: p.approval_id.clone(),
        verdict: pb::Verdict::Approve.into(),
        note: "go".into(),
        decided_by: "bob".into(),
    })
    .await
    .unwrap();
    let Event::Approved(_) = next(&mut events).await else {
        panic!("approved");
    };
    first.kill().unwrap();
    first.wait().unwrap();

    let (mut second, port) = serve(&roots, &state);
    c = client(port).await;
    let back = c
        .get_session(pb::GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .map(|r| r.into_inner());
    let inside = c
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await;
    let outside = c
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "src/extra.py".into(),
            content: "x\n".into(),
        })
        .await;
    let _ = second.kill();
    let _ = second.wait();
    let back = back.expect("the session came back");
    let policy = back.policy.unwrap();
    assert!(!policy.plan_mode);
    assert_eq!(policy.plan_files, vec!["src/calc.py".to_string()]);
    let plan = back.plan.expect("its plan came back");
    assert_eq!(plan.approval_id, p.approval_id);
    assert_eq!(plan.decision.unwrap().decided_by, "operator (bob)");
    assert_eq!(plan.withheld[0].path, "tests/test_calc.py");
    assert!(inside.is_ok(), "{inside:?}");
    assert_eq!(reason(&outside.unwrap_err()), "POLICY_DENIED");
    crate::common::unmount_under(&state);
}
