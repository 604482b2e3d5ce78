//! The whole loop: plan mode refuses a write, an uncheckable plan is
//! returned, a plan smuggling a denied test file is approved with that
//! file withheld, writes keep to the plan, the verification runs, and the
//! report reconciles against the approved plan without being told it.

use std::time::{Duration, Instant};

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{ADMIN, APPROVER, As, checkout, docker_server, meta, next, open, plan};
use crate::common::{edit, edit_req, reason};

#[tokio::test]
async fn an_approved_plan_grants_exactly_its_files_and_the_report_checks_it() {
    let srv = docker_server(|c| c.rules.deny_writes = vec!["tests/**".into()]).await;
    let dir = checkout(srv.allowed_root.path());
    let admin = As::new(&srv, ADMIN).await;
    let (id, token) = open(
        &admin,
        pb::CreateSessionRequest {
            workspace_path: dir.display().to_string(),
            policy: Some(pb::Policy {
                plan_mode: true,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let approver = As::new(&srv, APPROVER).await;
    let before = std::fs::read(dir.join("src/calc.py")).unwrap();

    // Plan mode: reading works, writing does not.
    let write = agent
        .c()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap_err();
    assert_eq!(reason(&write), "POLICY_DENIED", "{write:?}");
    assert!(
        write.message().contains("SubmitPlan"),
        "{}",
        write.message()
    );

    // The approver is around (a console listing what waits).
    assert!(approver.pending(0).await.unwrap().is_empty());

    // A plan without its verification is returned whole, naming it.
    let missing = agent
        .submit(&id, plan(&["src/calc.py"], ""))
        .await
        .unwrap_err();
    assert_eq!(reason(&missing), "INVALID_PLAN", "{missing:?}");
    assert!(
        missing.message().contains("verification"),
        "{}",
        missing.message()
    );
    let no_files = agent
        .submit(&id, plan(&[], "python3 tests/test_calc.py"))
        .await
        .unwrap_err();
    assert_eq!(reason(&no_files), "INVALID_PLAN");
    assert!(
        no_files.message().contains("files"),
        "{}",
        no_files.message()
    );
    assert!(
        approver.pending(0).await.unwrap().is_empty(),
        "nothing of them waits"
    );

    // A good plan that smuggles the test file in.
    let verify = "python3 tests/test_calc.py";
    let mut events = agent
        .submit(&id, plan(&["src/calc.py", "tests/test_calc.py"], verify))
        .await
        .unwrap();
    let Event::Pending(pending) = next(&mut events).await else {
        panic!("the plan waits first");
    };
    assert_eq!(pending.withheld.len(), 1, "{pending:?}");
    assert_eq!(pending.withheld[0].path, "tests/test_calc.py");
    assert_eq!(pending.withheld[0].rule, "deny_writes \"tests/**\"");

    // The approver sees the plan, with the file withheld and its rule.
    let waiting = approver.one_pending().await;
    assert_eq!(waiting.approval_id, pending.approval_id);
    assert_eq!(waiting.session_id, id);
    let Some(pb::pending_approval::What::Plan(shown)) = &waiting.what else {
        panic!("a plan waits: {waiting:?}");
    };
    assert_eq!(shown.verification, verify);
    assert_eq!(waiting.withheld[0].path, "tests/test_calc.py");
    let decided = approver
        .decide(&waiting.approval_id, true, "fix the code, not the test")
        .await
        .unwrap();
    assert_eq!(decided.outcome, "approved");
    assert_eq!(decided.session_id, id);

    let Event::Approved(approved) = next(&mut events).await else {
        panic!("approved");
    };
    assert_eq!(approved.granted, vec!["src/calc.py".to_string()]);
    assert_eq!(approved.withheld[0].path, "tests/test_calc.py");
    let decision = approved.decision.clone().unwrap();
    assert_eq!(decision.decided_by, "approver (alice)");
    assert_eq!(decision.note, "fix the code, not the test");
    assert!(events.message().await.unwrap().is_none(), "the stream ends");
    assert_eq!(std::fs::read(dir.join("src/calc.py")).unwrap(), before);

    // Inside the plan: written. Outside it, or withheld: refused.
    let edited = agent
        .c()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap()
        .into_inner();
    assert!(edited.rejected.is_none());
    assert_eq!(edited.replacements, 1);
    let outside = agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "src/extra.py".into(),
            content: "x = 1\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&outside), "POLICY_DENIED");
    assert!(
        outside.message().contains("approved plan"),
        "{}",
        outside.message()
    );
    assert!(!dir.join("src/extra.py").exists());
    let withheld = agent
        .c()
        .edit_file(edit_req(
            &id,
            "tests/test_calc.py",
            vec![edit("== 5", "== -1")],
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&withheld), "POLICY_DENIED");

    // A command can still change a withheld file (the file tools are what
    // a plan grants); the report shows it.
    let sneaky =
        crate::common::run(&agent.c(), &id, "echo '# ok' >> tests/test_calc.py", 60_000).await;
    assert_eq!(sneaky.exit.exit_code, 0);

    // The verification runs (plan mode is lifted for commands too).
    let ran = crate::common::try_run(&agent.c(), crate::common::run_req(&id, verify, 60_000))
        .await
        .unwrap();
    assert_eq!(ran.exit.exit_code, 0, "{:?}", ran.exit);

    // The report reconciles against the approved plan, untold.
    let report = agent
        .c()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.planned_touched, vec!["src/calc.py".to_string()]);
    assert!(report.unplanned.is_empty(), "{:?}", report.unplanned);
    assert!(report.untouched.is_empty(), "{:?}", report.untouched);
    assert_eq!(
        report.changed_unplanned,
        vec!["tests/test_calc.py".to_string()]
    );
    assert!(
        report.changes_unchecked.is_empty(),
        "{}",
        report.changes_unchecked
    );
    let v = report.verification.clone().unwrap();
    assert_eq!(v.command, verify);
    assert!(v.ran_after_last_write && v.passed, "{v:?}");
    let shown = report.plan.clone().unwrap();
    assert_eq!(shown.approval_id, pending.approval_id);
    assert_eq!(shown.decision.unwrap().decided_by, "approver (alice)");
    // The journal says who approved what, and when.
    let decide = report
        .journal
        .iter()
        .find(|e| e.tool == "Decide")
        .expect("the decision is journaled");
    assert!(decide.summary.contains(&pending.approval_id), "{decide:?}");
    assert!(
        decide.detail.contains("approved by approver (alice)"),
        "{decide:?}"
    );
    assert!(decide.at_ms > 0);
    srv.stop().await;
}

#[tokio::test]
async fn a_rejected_plan_leaves_plan_mode_in_force() {
    let srv = super::files_server(|_| {}).await;
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
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let mut events = agent.submit(&id, plan(&["a.py"], "true")).await.unwrap();
    let Event::Pending(_) = next(&mut events).await else {
        panic!("pending first");
    };
    let waiting = approver.one_pending().await;
    approver
        .decide(&waiting.approval_id, false, "too broad")
        .await
        .unwrap();
    let t0 = Instant::now();
    let Event::Rejected(r) = next(&mut events).await else {
        panic!("rejected");
    };
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(r.reason, "too broad");
    assert!(!r.timed_out);
    assert!(r.message.contains("Not executed"), "{}", r.message);
    let still = agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "a.py".into(),
            content: "x\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&still), "POLICY_DENIED");
    // Deciding it again finds nothing.
    let again = approver
        .decide(&waiting.approval_id, true, "")
        .await
        .unwrap_err();
    assert_eq!(reason(&again), "APPROVAL_NOT_FOUND");
    srv.stop().await;
}

/// `read_only` never writes, whatever is approved: a plan is refused at
/// once (no approval is even asked for), and the session stays read-only;
/// `plan_mode` on the same request does not loosen it. Plan mode alone
/// takes the plan (the tests above).
#[tokio::test]
async fn a_read_only_session_takes_no_plan_and_stays_read_only() {
    let srv = super::files_server(|_| {}).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    for policy in [
        None,
        Some(pb::Policy {
            plan_mode: true,
            ..Default::default()
        }),
    ] {
        let (id, token) = open(
            &admin,
            pb::CreateSessionRequest {
                read_only: true,
                policy: policy.clone(),
                ..Default::default()
            },
        )
        .await;
        let agent = As::new(&srv, &token).await;
        let refused = agent
            .submit(&id, plan(&["a.py"], "true"))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(reason(&refused), "POLICY_DENIED", "{policy:?}: {refused:?}");
        assert_eq!(meta(&refused, "rule"), "read_only");
        assert!(
            refused
                .message()
                .contains("no plan or approval changes that"),
            "{}",
            refused.message()
        );
        assert!(
            approver.pending(0).await.unwrap().is_empty(),
            "nothing asked"
        );
        let still = agent
            .c()
            .create_file(pb::CreateFileRequest {
                session_id: id.clone(),
                path: "a.py".into(),
                content: "x\n".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(meta(&still, "rule"), "read_only");
    }
    srv.stop().await;
}
