//! A session's changes tab (the diff since it began, additions and
//! deletions marked, as text) and its plan tab (the approved plan beside
//! the reconciliation).

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{ADMIN, Served};

/// A gRPC client of `served` carrying `token`.
async fn client(served: &Served, token: &str) -> crate::common::Client {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", served.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    sandboxd::local::client(channel, sandboxd::local::Bearer::new(Some(token)).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changes_tab_shows_the_diff_since_the_start_as_text() {
    let served = Served::start(false).await;
    let (id, _) = served.session();
    let admin = served.login(ADMIN);
    let empty = served.get(&format!("/sessions/{id}/changes"), Some(&admin));
    assert_eq!(empty.status, 200);
    assert!(empty.body.contains("Nothing has changed"), "{}", empty.body);

    let (code, out) = served.cli(
        None,
        &[
            "create",
            "-s",
            &id,
            "calc.py",
            "--content",
            "def add(a, b):\n    return a - b\n",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = served.cli(None, &["checkpoint", "create", "-s", &id, "<i>first</i>"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = served.cli(
        None,
        &[
            "edit",
            "-s",
            &id,
            "calc.py",
            "--old",
            "a - b",
            "--new",
            "a + b  # <script>",
        ],
    );
    assert_eq!(code, 0, "{out}");

    let page = served.get(&format!("/sessions/{id}/changes"), Some(&admin));
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(
        body.contains("Changed since the session began: 1"),
        "{body}"
    );
    assert!(
        body.contains("<span class=\"add\">+    return a + b  # &lt;script&gt;"),
        "{body}"
    );
    assert!(
        body.contains("<span class=\"meta\">+++ b/calc.py"),
        "{body}"
    );
    assert!(!body.contains("<script>"), "{body}");
    // The checkpoint, its label as text.
    assert!(body.contains("&lt;i&gt;first&lt;/i&gt;"), "{body}");
    // A session's viewer may not see another's changes.
    let (other, other_token) = served.session();
    let theirs = served.login(&other_token);
    let refused = served.get(&format!("/sessions/{id}/changes"), Some(&theirs));
    assert_eq!(refused.status, 404);
    assert!(!refused.body.contains("calc.py"));
    let _ = other;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_tab_shows_the_approved_plan_and_its_reconciliation() {
    let served = Served::start(false).await;
    let admin_rpc = client(&served, ADMIN).await;
    let created = admin_rpc
        .clone()
        .create_session(pb::CreateSessionRequest {
            policy: Some(pb::Policy {
                plan_mode: true,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let id = created.session_id;
    let agent = client(&served, &created.session_token).await;
    let admin = served.login(ADMIN);
    let none = served.get(&format!("/sessions/{id}/plan"), Some(&admin));
    assert!(none.body.contains("No plan was approved"), "{}", none.body);

    // The operator is around to approve.
    admin_rpc
        .clone()
        .list_pending_approvals(pb::ListPendingApprovalsRequest {
            wait_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut plan = crate::approvals::plan(&["calc.py", "notes.md"], "python3 -m unittest");
    plan.goal = "make add() <b>add</b>".into();
    let mut events = agent
        .clone()
        .submit_plan(pb::SubmitPlanRequest {
            session_id: id.clone(),
            plan: Some(plan),
        })
        .await
        .unwrap()
        .into_inner();
    let Event::Pending(pending) = crate::approvals::next(&mut events).await else {
        panic!("the plan waits first");
    };
    admin_rpc
        .clone()
        .decide(pb::DecideRequest {
            approval_id: pending.approval_id,
            verdict: pb::Verdict::Approve.into(),
            note: "go ahead".into(),
            decided_by: "alice".into(),
        })
        .await
        .unwrap();
    let Event::Approved(_) = crate::approvals::next(&mut events).await else {
        panic!("approved");
    };
    agent
        .clone()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "calc.py".into(),
            content: "def add(a, b):\n    return a + b\n".into(),
        })
        .await
        .unwrap();

    let page = served.get(&format!("/sessions/{id}/plan"), Some(&admin));
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(body.contains("make add() &lt;b&gt;add&lt;/b&gt;"), "{body}");
    assert!(body.contains("python3 -m unittest"), "{body}");
    assert!(
        body.contains("alice") && body.contains("go ahead"),
        "{body}"
    );
    let after = |label: &str| {
        body.split(label)
            .last()
            .and_then(|s| s.split("</dd>").next())
            .unwrap_or_default()
            .to_string()
    };
    assert!(after("Planned and written").contains("calc.py"), "{body}");
    assert!(after("Planned, not written").contains("notes.md"), "{body}");
    assert!(after("Verification</dt>").contains("not run"), "{body}");
}
