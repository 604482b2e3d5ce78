//! The audit journal over gRPC and real Docker: the same plan run twice,
//! once faithfully and once touching an extra file and skipping the
//! verification, and GetSessionReport tells them apart. The journal is also
//! appended as JSON lines, and CloseSession returns it.

use std::path::Path;

use crate::common::{Mode, TestServer, edit, edit_req, read_req, run};
use sandboxd::pb;
use sha2::{Digest, Sha256};

const CALC: &str = "def add(a, b):\n    return a - b\n";
const TEST: &str = "from calc import add\nassert add(2, 3) == 5, 'add is wrong'\nprint('ok')\n";
const VERIFY: &str = "python3 test_calc.py";

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn project(server: &TestServer) -> (String, std::path::PathBuf) {
    let (id, ws) = server.session().await;
    std::fs::write(ws.join("calc.py"), CALC).unwrap();
    std::fs::write(ws.join("test_calc.py"), TEST).unwrap();
    (id, ws)
}

async fn report(server: &TestServer, id: &str) -> pb::SessionReport {
    server
        .client
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.into(),
            planned_files: vec!["calc.py".into(), "./README.md".into()],
            verification_command: VERIFY.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

fn journal_lines(dir: &Path, id: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{id}.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn report_tells_a_faithful_run_from_a_drifting_one() {
    let journal_base = tempfile::tempdir().unwrap();
    // The journal directory is checked like the state directory: made 0700.
    let journal_dir = journal_base.path().join("journal");
    let dir = journal_dir.clone();
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, move |c| {
        c.journal_dir = Some(dir);
    })
    .await;
    let c = server.client.clone();

    // Faithful: red, read, edit the planned files, green.
    let (faithful, ws) = project(&server).await;
    assert_eq!(run(&c, &faithful, VERIFY, 30_000).await.exit.exit_code, 1);
    c.clone()
        .read_file(read_req(&faithful, "calc.py"))
        .await
        .unwrap();
    c.clone()
        .edit_file(edit_req(&faithful, "calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    c.clone()
        .create_file(pb::CreateFileRequest {
            session_id: faithful.clone(),
            path: "README.md".into(),
            content: "add adds\n".into(),
        })
        .await
        .unwrap();
    assert_eq!(run(&c, &faithful, VERIFY, 30_000).await.exit.exit_code, 0);

    let r = report(&server, &faithful).await;
    assert_eq!(r.touched, vec!["README.md", "calc.py"]);
    assert_eq!(r.planned_touched, vec!["README.md", "calc.py"]);
    assert!(r.unplanned.is_empty(), "{:?}", r.unplanned);
    assert!(r.untouched.is_empty(), "{:?}", r.untouched);
    let v = r.verification.clone().unwrap();
    assert!(v.ran && v.ran_after_last_write && v.passed, "{v:?}");
    assert_eq!(v.exit_code, 0);
    // Writes carry the hashes before and after.
    let calc = r
        .files_written
        .iter()
        .find(|w| w.path == "calc.py")
        .unwrap();
    assert_eq!(calc.tool, "EditFile");
    assert_eq!(calc.sha256_before, sha(CALC.as_bytes()));
    assert_eq!(
        calc.sha256_after,
        sha(&std::fs::read(ws.join("calc.py")).unwrap())
    );
    let readme = r
        .files_written
        .iter()
        .find(|w| w.path == "README.md")
        .unwrap();
    assert_eq!(readme.sha256_before, "");
    // Commands with their results, in order.
    let codes: Vec<i64> = r.commands.iter().map(|c| c.exit_code).collect();
    assert_eq!(codes, vec![1, 0]);
    assert!(r.commands.iter().all(|c| c.command == VERIFY));
    assert!(r.denied.is_empty());
    let tools: Vec<&str> = r.journal.iter().map(|e| e.tool.as_str()).collect();
    assert_eq!(
        tools,
        vec![
            "CreateSession",
            "RunCommand",
            "ReadFile",
            "EditFile",
            "CreateFile",
            "RunCommand"
        ]
    );

    // Drifting: edits the plan's file, also an unplanned one, creates
    // nothing planned, and never verifies after the last write.
    let (drifting, _) = project(&server).await;
    assert_eq!(run(&c, &drifting, VERIFY, 30_000).await.exit.exit_code, 1);
    c.clone()
        .edit_file(edit_req(&drifting, "calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    c.clone()
        .edit_file(edit_req(
            &drifting,
            "test_calc.py",
            vec![edit("print('ok')", "print('fine')")],
        ))
        .await
        .unwrap();
    // A refused call shows up too.
    c.clone()
        .edit_file(edit_req(&drifting, "calc.py", vec![edit("not there", "x")]))
        .await
        .unwrap_err();

    let r = report(&server, &drifting).await;
    assert_eq!(r.planned_touched, vec!["calc.py"]);
    assert_eq!(r.unplanned, vec!["test_calc.py"]);
    assert_eq!(r.untouched, vec!["README.md"]);
    let v = r.verification.clone().unwrap();
    assert!(v.ran, "the red run matched");
    assert!(!v.ran_after_last_write && !v.passed, "{v:?}");
    assert_eq!(r.denied.len(), 1);
    assert_eq!(r.denied[0].reason, "OLD_STRING_NOT_FOUND");
    assert_eq!(r.denied[0].tool, "EditFile");

    // The JSON lines hold the same story for external audit.
    let lines = journal_lines(&journal_dir, &drifting);
    assert!(lines.iter().all(|l| l["session_id"] == drifting.as_str()));
    let writes: Vec<&serde_json::Value> = lines.iter().filter(|l| l["write"].is_object()).collect();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0]["write"]["sha256_before"], sha(CALC.as_bytes()));
    let commands: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["command"].is_object()).collect();
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command"]["exit_code"], 1);
    assert_eq!(commands[0]["command"]["killed_by"], "none");
    assert!(
        lines
            .iter()
            .any(|l| l["outcome"]["reason"] == "OLD_STRING_NOT_FOUND")
    );

    // CloseSession returns the journal as it stood at the end.
    let closed = c
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: faithful.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let last = closed.report.unwrap();
    assert_eq!(last.files_written.len(), 2);
    assert_eq!(last.journal.last().unwrap().tool, "CloseSession");
    let lines = journal_lines(&journal_dir, &faithful);
    assert_eq!(lines.last().unwrap()["tool"], "CloseSession");
    server.stop().await;
}

/// A link a command plants cannot relabel the report: planned files are
/// taken by name, never through links, so an edit through
/// `src/a.py -> ../tests/test_x.py` shows as the unplanned test file it
/// changed and the planned name as left alone; a link out of the workspace
/// does not fail the report. And a command that changes code after the
/// verification leaves it unverified until it runs again.
#[tokio::test]
async fn a_planted_link_cannot_relabel_the_report_and_a_later_command_unverifies_it() {
    let server = TestServer::with_docker_mode_and(Mode::Supervisor, |_| {}).await;
    let c = server.client.clone();
    let (id, _ws) = project(&server).await;
    let planted = run(
        &c,
        &id,
        "mkdir -p src tests && echo 't = 1' > tests/test_x.py \
         && ln -s ../tests/test_x.py src/a.py && ln -s /etc/passwd src/out.py",
        30_000,
    )
    .await;
    assert_eq!(planted.exit.exit_code, 0, "{}", planted.stderr());
    c.clone()
        .edit_file(edit_req(&id, "src/a.py", vec![edit("t = 1", "t = 2")]))
        .await
        .unwrap();
    let asked = |verify: &str| pb::GetSessionReportRequest {
        session_id: id.clone(),
        planned_files: vec!["src/a.py".into(), "./src/out.py".into()],
        verification_command: verify.into(),
    };
    let r = c
        .clone()
        .get_session_report(asked(VERIFY))
        .await
        .expect("a link out of the workspace does not fail the report")
        .into_inner();
    assert_eq!(r.planned_touched, Vec::<String>::new(), "{r:?}");
    assert_eq!(r.unplanned, vec!["tests/test_x.py".to_string()], "{r:?}");
    assert_eq!(
        r.untouched,
        vec!["src/a.py".to_string(), "src/out.py".to_string()],
        "{r:?}"
    );
    assert!(
        r.changed_unplanned.contains(&"tests/test_x.py".to_string()),
        "{:?}",
        r.changed_unplanned
    );

    // Verified, then a command changes the code: no longer verified.
    c.clone()
        .edit_file(edit_req(&id, "calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    assert_eq!(run(&c, &id, VERIFY, 30_000).await.exit.exit_code, 0);
    let verdict = |r: pb::SessionReport| {
        let v = r.verification.unwrap();
        (v.ran_after_last_write, v.passed)
    };
    let r = c.clone().get_session_report(asked(VERIFY)).await.unwrap();
    assert_eq!(verdict(r.into_inner()), (true, true));
    run(&c, &id, "sed -i 's/a + b/a - b/' calc.py", 30_000).await;
    let r = c.clone().get_session_report(asked(VERIFY)).await.unwrap();
    assert_eq!(
        verdict(r.into_inner()),
        (false, false),
        "a command after it"
    );
    assert_eq!(run(&c, &id, VERIFY, 30_000).await.exit.exit_code, 1);
    let r = c.clone().get_session_report(asked(VERIFY)).await.unwrap();
    assert_eq!(
        verdict(r.into_inner()),
        (true, false),
        "run again, it fails"
    );
    server.stop().await;
}
