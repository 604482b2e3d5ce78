//! Session policy over gRPC: a read-only session refuses every mutating call
//! and changes nothing while reads work; deny globs hold against `..`,
//! symlinks, case tricks, hard links and multi-edits; a grant never
//! overrides a deny; the operator's rules apply to every session; session
//! guard patterns refuse commands.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::{
    TestServer, assert_refused, assert_refused_unchanged, edit, edit_req, read_req, run_req,
    snapshot,
};
use sandboxd::pb;

fn project(ws: &Path) {
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("tests/unit")).unwrap();
    std::fs::write(ws.join("src/calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        ws.join("tests/test_calc.py"),
        "from calc import add\nassert add(2, 2) == 4\n",
    )
    .unwrap();
    std::fs::write(ws.join("tests/unit/test_deep.py"), "assert True\n").unwrap();
}

fn deny_tests() -> pb::Policy {
    pb::Policy {
        deny_writes: vec!["tests/**".into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn read_only_session_refuses_every_mutation_and_changes_nothing() {
    let server = TestServer::start().await;
    let s = server
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            read_only: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(s.policy.as_ref().unwrap().read_only);
    let (id, ws) = (s.session_id, std::path::PathBuf::from(s.workspace_path));
    project(&ws);
    let before = snapshot(&ws);
    let mut c = server.client.clone();
    let create = |path: &str, content: &str| pb::CreateFileRequest {
        session_id: id.clone(),
        path: path.into(),
        content: content.into(),
    };

    let refusals = [
        assert_refused_unchanged(
            c.create_file(create("new.py", "x = 1\n")),
            "POLICY_DENIED",
            &ws,
        )
        .await,
        assert_refused_unchanged(
            c.create_file(create("deep/new/dir/x.py", "x\n")),
            "POLICY_DENIED",
            &ws,
        )
        .await,
        assert_refused_unchanged(
            c.edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")])),
            "POLICY_DENIED",
            &ws,
        )
        .await,
        // Refused for the policy, even where the edit itself would fail.
        assert_refused_unchanged(
            c.edit_file(edit_req(&id, "missing.py", vec![edit("x", "y")])),
            "POLICY_DENIED",
            &ws,
        )
        .await,
        assert_refused_unchanged(
            c.run_command(run_req(&id, "echo hi > pwned.txt", 5000)),
            "POLICY_DENIED",
            &ws,
        )
        .await,
    ];
    for status in &refusals {
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert!(
            status.message().contains("read-only"),
            "{}",
            status.message()
        );
        assert!(status.message().contains("Nothing was changed"));
    }
    assert_eq!(snapshot(&ws), before, "a read-only session changed files");

    // Reading, listing, finding and searching work.
    let read = c.read_file(read_req(&id, "src/calc.py")).await.unwrap();
    assert!(read.into_inner().content.contains("a - b"));
    let listed = c
        .list_dir(pb::ListDirRequest {
            session_id: id.clone(),
            path: "src".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1);
    let found = c
        .find_files(pb::FindFilesRequest {
            session_id: id.clone(),
            pattern: "*.py".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.paths.len(), 3);
    let searched = c
        .search_files(pb::SearchFilesRequest {
            session_id: id.clone(),
            pattern: "return".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(searched.matches.len(), 1);

    // The journal lists the five refusals.
    let report = c
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.denied.len(), 5);
    assert!(report.denied.iter().all(|d| d.reason == "POLICY_DENIED"));
    assert!(report.files_written.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn deny_glob_holds_against_dots_symlinks_case_and_hard_links() {
    let server = TestServer::start().await;
    let (id, ws) = server.session_with(deny_tests()).await;
    project(&ws);
    // Routes into tests/ that a lexical check would miss.
    symlink("../tests/test_calc.py", ws.join("src/link_to_test.py")).unwrap();
    symlink("../tests", ws.join("src/tests_dir")).unwrap();
    symlink("tests", ws.join("T")).unwrap();
    std::fs::hard_link(ws.join("tests/test_calc.py"), ws.join("src/hardlink.py")).unwrap();
    let tests_before = snapshot(&ws.join("tests"));
    let mut c = server.client.clone();

    let fix = vec![edit("assert add(2, 2) == 4", "assert True")];
    for path in [
        "tests/test_calc.py",
        "./tests/test_calc.py",
        "src/../tests/test_calc.py",
        "TESTS/test_calc.py",
        "Tests/Unit/test_deep.py",
        "src/link_to_test.py",
        "src/tests_dir/test_calc.py",
        "T/test_calc.py",
        "tests/unit/test_deep.py",
        "/workspace/tests/test_calc.py",
    ] {
        // Refused as denied even where the path does not exist (the case
        // variants, on this case-sensitive filesystem).
        let req = edit_req(&id, path, fix.clone());
        let status = assert_refused_unchanged(c.edit_file(req), "POLICY_DENIED", &ws).await;
        assert!(
            status.message().to_lowercase().contains("tests/"),
            "the refusal names the path: {}",
            status.message()
        );
    }
    for path in [
        "tests/new_test.py",
        "tests/deep/new/test_x.py",
        "TESTS/sneaky.py",
        "src/tests_dir/planted.py",
        "T/planted.py",
        "src/../tests/planted.py",
    ] {
        let req = pb::CreateFileRequest {
            session_id: id.clone(),
            path: path.into(),
            content: "assert True\n".into(),
        };
        assert_refused_unchanged(c.create_file(req), "POLICY_DENIED", &ws).await;
    }
    assert_eq!(snapshot(&ws.join("tests")), tests_before);
    assert!(
        !ws.join("TESTS").exists(),
        "a refused create made directories"
    );
    assert!(
        !ws.join("tests/deep").exists(),
        "a refused create made directories"
    );

    // A multi-edit on a denied file is refused whole.
    let req = edit_req(
        &id,
        "src/link_to_test.py",
        vec![edit("from calc", "from x"), edit("== 4", "== 5")],
    );
    assert_refused_unchanged(c.edit_file(req), "POLICY_DENIED", &ws).await;

    // The hard link is outside tests/ by path: the edit is allowed, and the
    // atomic rename replaces the link, never the test's bytes.
    c.edit_file(edit_req(&id, "src/hardlink.py", fix.clone()))
        .await
        .unwrap();
    assert_eq!(snapshot(&ws.join("tests")), tests_before);

    // Writes elsewhere still work.
    c.edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    assert!(
        std::fs::read_to_string(ws.join("src/calc.py"))
            .unwrap()
            .contains("a + b")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_grant_never_overrides_a_deny_and_operator_rules_bind_every_session() {
    let server = TestServer::start_with(|c| c.rules.deny_writes = vec!["secrets/**".into()]).await;
    let (id, ws) = server
        .session_with(pb::Policy {
            deny_writes: vec!["tests/**".into()],
            allow_writes: vec!["**".into(), "tests/**".into(), "secrets/**".into()],
            ..Default::default()
        })
        .await;
    let s = server
        .client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let policy = s.policy.unwrap();
    assert_eq!(policy.deny_writes, vec!["secrets/**", "tests/**"]);
    let mut c = server.client.clone();
    let create = |path: &str| pb::CreateFileRequest {
        session_id: id.clone(),
        path: path.into(),
        content: "x\n".into(),
    };
    c.create_file(create("src/ok.py")).await.unwrap();
    for path in ["tests/x.py", "secrets/key.pem"] {
        assert_refused_unchanged(c.create_file(create(path)), "POLICY_DENIED", &ws).await;
    }
    assert!(!ws.join("tests").exists() && !ws.join("secrets").exists());

    // Operator rules bind a session that asked for nothing.
    let (plain, plain_ws) = server.session_with(pb::Policy::default()).await;
    let req = pb::CreateFileRequest {
        session_id: plain,
        path: "Secrets/k".into(),
        content: "x\n".into(),
    };
    assert_refused_unchanged(c.create_file(req), "POLICY_DENIED", &plain_ws).await;
    server.stop().await;
}

#[tokio::test]
async fn allow_writes_confines_writes_to_its_globs() {
    let server = TestServer::start().await;
    let (id, ws) = server
        .session_with(pb::Policy {
            allow_writes: vec!["src/**".into()],
            ..Default::default()
        })
        .await;
    project(&ws);
    let mut c = server.client.clone();
    c.edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    let req = pb::CreateFileRequest {
        session_id: id.clone(),
        path: "README.md".into(),
        content: "x\n".into(),
    };
    let status = assert_refused_unchanged(c.create_file(req), "POLICY_DENIED", &ws).await;
    assert!(status.message().contains("allow_writes"));
    assert!(!ws.join("README.md").exists());
    server.stop().await;
}

#[tokio::test]
async fn session_guard_patterns_refuse_matching_commands_and_bad_rules_are_refused() {
    let server = TestServer::start().await;
    let (id, ws) = server
        .session_with(pb::Policy {
            guard_patterns: vec![r"\bpip\s+install\b".into()],
            ..Default::default()
        })
        .await;
    let mut c = server.client.clone();
    let pip = c.run_command(run_req(&id, "pip install requests", 5000));
    let status = assert_refused_unchanged(pip, "COMMAND_REFUSED", &ws).await;
    assert!(status.message().contains("session"));

    for policy in [
        pb::Policy {
            deny_writes: vec!["../outside/**".into()],
            ..Default::default()
        },
        pb::Policy {
            allow_writes: vec!["src/[".into()],
            ..Default::default()
        },
        pb::Policy {
            guard_patterns: vec!["(unclosed".into()],
            ..Default::default()
        },
    ] {
        let req = pb::CreateSessionRequest {
            policy: Some(policy),
            ..Default::default()
        };
        let status = assert_refused(c.create_session(req), "INVALID_POLICY").await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
    server.stop().await;
}
