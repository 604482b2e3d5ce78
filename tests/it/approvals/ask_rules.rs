//! `ask` rules: a write or command they match waits for a person and runs
//! only once approved; a rejection is a result that says it was not
//! executed, and changes nothing; a deny still wins over an ask.

use sandboxd::pb;

use super::{ADMIN, APPROVER, As, docker_server, files_server, open};
use crate::common::{edit, edit_req, reason, run_req};

#[tokio::test]
async fn an_asked_write_runs_only_once_approved() {
    let srv = files_server(|c| c.rules.deny_writes = vec!["secrets/**".into()]).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(
        &admin,
        pb::CreateSessionRequest {
            policy: Some(pb::Policy {
                ask_writes: vec!["src/**".into(), "secrets/**".into()],
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await;
    let agent = As::new(&srv, &token).await;
    let info = agent
        .c()
        .get_session(pb::GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let ws = std::path::PathBuf::from(info.workspace_path);
    // Not asked: written at once.
    agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "README.md".into(),
            content: "hi\n".into(),
        })
        .await
        .unwrap();
    let create = |content: &str| pb::CreateFileRequest {
        session_id: id.clone(),
        path: "src/a.py".into(),
        content: content.into(),
    };

    // Rejected: a result, not an error; nothing written.
    let call = tokio::spawn({
        let c = agent.c();
        let req = create("x = 1\n");
        async move { c.clone().create_file(req).await }
    });
    let waiting = approver.one_pending().await;
    let Some(pb::pending_approval::What::Call(held)) = &waiting.what else {
        panic!("a call waits: {waiting:?}");
    };
    assert_eq!(held.tool, "CreateFile");
    assert_eq!(held.path, "src/a.py");
    assert_eq!(held.rule, "ask_writes \"src/**\"");
    assert_eq!(
        held.change, "x = 1\n",
        "the person sees what would be written"
    );
    approver
        .decide(&waiting.approval_id, false, "no new modules")
        .await
        .unwrap();
    let rejected = call.await.unwrap().unwrap().into_inner();
    let r = rejected.rejected.expect("rejected");
    assert_eq!(r.reason, "no new modules");
    assert_eq!(r.decision.unwrap().decided_by, "approver (alice)");
    assert!(
        rejected.message.contains("Not executed"),
        "{}",
        rejected.message
    );
    assert!(rejected.sha256.is_empty());
    assert!(!ws.join("src/a.py").exists());

    // Approved: written.
    let call = tokio::spawn({
        let c = agent.c();
        let req = create("x = 2\n");
        async move { c.clone().create_file(req).await }
    });
    let waiting = approver.one_pending().await;
    approver
        .decide(&waiting.approval_id, true, "")
        .await
        .unwrap();
    let done = call.await.unwrap().unwrap().into_inner();
    assert!(done.rejected.is_none());
    assert_eq!(
        std::fs::read_to_string(ws.join("src/a.py")).unwrap(),
        "x = 2\n"
    );

    // An approval covers that call only: the next edit asks again.
    let call = tokio::spawn({
        let c = agent.c();
        let req = edit_req(&id, "src/a.py", vec![edit("2", "3")]);
        async move { c.clone().edit_file(req).await }
    });
    let waiting = approver.one_pending().await;
    let Some(pb::pending_approval::What::Call(held)) = &waiting.what else {
        panic!("an edit waits: {waiting:?}");
    };
    assert_eq!(
        held.change, "@@ edit 1\n-2\n+3\n",
        "the edit's old and new text"
    );
    approver
        .decide(&waiting.approval_id, false, "")
        .await
        .unwrap();
    let edited = call.await.unwrap().unwrap().into_inner();
    assert!(edited.rejected.is_some());
    assert_eq!(
        std::fs::read_to_string(ws.join("src/a.py")).unwrap(),
        "x = 2\n"
    );

    // A deny wins over an ask: refused, nobody asked.
    let denied = agent
        .c()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "secrets/key".into(),
            content: "k\n".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&denied), "POLICY_DENIED");
    assert!(approver.pending(0).await.unwrap().is_empty());

    // The report lists the rejected calls as refused, and the decisions.
    let report = agent
        .c()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let rejected: Vec<_> = report
        .denied
        .iter()
        .filter(|d| d.reason == "REJECTED")
        .collect();
    assert_eq!(rejected.len(), 2, "{:?}", report.denied);
    let decisions = report.journal.iter().filter(|e| e.tool == "Decide").count();
    assert_eq!(decisions, 3);
    srv.stop().await;
}

#[tokio::test]
async fn an_asked_command_runs_only_once_approved() {
    let srv = docker_server(|c| c.rules.ask_commands = vec![r"^make\s+deploy\b".into()]).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(&admin, pb::CreateSessionRequest::default()).await;
    let agent = As::new(&srv, &token).await;
    let events = |command: &str| {
        let c = agent.c();
        let req = run_req(&id, command, 30_000);
        tokio::spawn(async move {
            let mut stream = c.clone().run_command(req).await?.into_inner();
            let mut all = Vec::new();
            while let Some(e) = stream.message().await? {
                all.push(e.event.expect("event"));
            }
            Ok::<_, tonic::Status>(all)
        })
    };
    use pb::run_command_event::Event;
    // Not matched: runs.
    let plain = crate::common::run(&agent.c(), &id, "echo fine", 30_000).await;
    assert_eq!(plain.exit.exit_code, 0);

    // Rejected: one event saying so; it never ran.
    let call = events("make deploy; touch /workspace/deployed");
    let waiting = approver.one_pending().await;
    let Some(pb::pending_approval::What::Call(held)) = &waiting.what else {
        panic!("a command waits");
    };
    assert!(held.command.starts_with("make deploy"), "{held:?}");
    approver
        .decide(&waiting.approval_id, false, "not today")
        .await
        .unwrap();
    let all = call.await.unwrap().unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    let Event::Rejected(r) = &all[0] else {
        panic!("rejected: {all:?}");
    };
    assert_eq!(r.reason, "not today");

    // Approved: it runs (the slip guard would still refuse a slip).
    let call = events("echo deploying; true make deploy");
    let none = approver.pending(0).await.unwrap();
    assert!(none.is_empty(), "not matched: runs at once");
    call.await.unwrap().unwrap();
    let call = events("make deploy 2>/dev/null; touch deployed; echo done");
    let waiting = approver.one_pending().await;
    approver
        .decide(&waiting.approval_id, true, "")
        .await
        .unwrap();
    let all = call.await.unwrap().unwrap();
    let Some(Event::Exit(exit)) = all.last() else {
        panic!("ran to its exit: {all:?}");
    };
    assert_eq!(exit.stdout.as_ref().unwrap().text, "done\n");
    let slip = agent
        .c()
        .run_command(run_req(&id, "make deploy && git push", 30_000))
        .await
        .unwrap_err();
    assert_eq!(
        reason(&slip),
        "COMMAND_REFUSED",
        "refused before anyone is asked"
    );
    assert!(approver.pending(0).await.unwrap().is_empty());
    srv.stop().await;
}

/// Input to a process skips the ask rules, by design: an approved
/// interactive start is the approval of what is typed into it. The person
/// is told so when asked, and the journal keeps what was typed (bounded,
/// on one line), not only its size.
#[tokio::test]
async fn approving_an_interactive_start_is_said_to_approve_its_input() {
    let srv = docker_server(|c| c.rules.ask_commands = vec![r"^sh\b".into()]).await;
    let admin = As::new(&srv, ADMIN).await;
    let approver = As::new(&srv, APPROVER).await;
    approver.pending(0).await.unwrap();
    let (id, token) = open(&admin, pb::CreateSessionRequest::default()).await;
    let agent = As::new(&srv, &token).await;
    let start = |stdin: bool| {
        let c = agent.c();
        let req = pb::StartProcessRequest {
            session_id: id.clone(),
            command: "sh".into(),
            stdin,
            ..Default::default()
        };
        tokio::spawn(async move { c.clone().start_process(req).await })
    };
    let call = start(true);
    let waiting = approver.one_pending().await;
    let Some(pb::pending_approval::What::Call(held)) = &waiting.what else {
        panic!("a start waits: {waiting:?}");
    };
    assert!(
        held.summary
            .contains("approving this start approves that input"),
        "{held:?}"
    );
    approver
        .decide(&waiting.approval_id, true, "")
        .await
        .unwrap();
    let started = call.await.unwrap().unwrap().into_inner();
    let p = started.process.unwrap();
    agent
        .c()
        .write_process_input(pb::WriteProcessInputRequest {
            session_id: id.clone(),
            process_id: p.process_id.clone(),
            data: b"touch typed\x1b[2J\nexit\n".to_vec(),
            close: true,
        })
        .await
        .unwrap();
    let report = agent
        .c()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let input = report
        .journal
        .iter()
        .find(|e| e.tool == "WriteProcessInput")
        .expect("the input is journaled");
    assert!(
        input.summary.contains("touch typed^[[2J\\nexit\\n"),
        "what was typed, on one line: {input:?}"
    );
    // A start without input says nothing of the kind.
    let call = start(false);
    let waiting = approver.one_pending().await;
    let Some(pb::pending_approval::What::Call(held)) = &waiting.what else {
        panic!("a start waits");
    };
    assert!(!held.summary.contains("interactive"), "{held:?}");
    approver
        .decide(&waiting.approval_id, false, "")
        .await
        .unwrap();
    call.await.unwrap().unwrap();
    srv.stop().await;
}
