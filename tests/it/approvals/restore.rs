//! A restore writes and removes files like any write tool, so the rules
//! hold for it too: a deny rule and an approved plan refuse a restore that
//! would touch a file they do not grant, whole, and allow one that touches
//! only granted files.

use std::path::Path;

use sandboxd::pb;
use sandboxd::pb::plan_event::Event;

use super::{ADMIN, APPROVER, As, checkout, files_server, meta, next, open, plan};
use crate::common::{edit, edit_req, reason};

async fn checkpoint(agent: &As, id: &str) -> String {
    agent
        .c()
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: id.into(),
            label: "before".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .checkpoint
        .unwrap()
        .checkpoint_id
}

async fn restore(agent: &As, id: &str, to: &str) -> Result<(), tonic::Status> {
    agent
        .c()
        .restore_checkpoint(pb::RestoreCheckpointRequest {
            session_id: id.into(),
            checkpoint_id: to.into(),
            stop_commands: false,
        })
        .await
        .map(drop)
}

fn read(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).unwrap()
}

#[tokio::test]
async fn a_restore_that_would_touch_a_denied_file_is_refused_whole() {
    let srv = files_server(|c| c.rules.deny_writes = vec!["tests/**".into()]).await;
    let dir = checkout(srv.allowed_root.path());
    let admin = As::new(&srv, ADMIN).await;
    let (id, _) = open(
        &admin,
        pb::CreateSessionRequest {
            workspace_path: dir.display().to_string(),
            ..Default::default()
        },
    )
    .await;
    let start = checkpoint(&admin, &id).await;
    let test_before = read(&dir, "tests/test_calc.py");
    // The code is edited through the tools; the test is changed as a
    // command would change it (commands may write anywhere).
    admin
        .c()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    std::fs::write(dir.join("tests/test_calc.py"), "print('weakened')\n").unwrap();

    let refused = restore(&admin, &id, &start).await.unwrap_err();
    assert_eq!(reason(&refused), "POLICY_DENIED", "{refused:?}");
    assert_eq!(meta(&refused, "rule"), "deny_writes");
    assert_eq!(meta(&refused, "path"), "tests/test_calc.py");
    // Nothing was restored, the allowed file included.
    assert!(read(&dir, "src/calc.py").contains("a + b"));
    assert_eq!(read(&dir, "tests/test_calc.py"), "print('weakened')\n");

    // Once the denied file is as the checkpoint holds it, the restore
    // touches allowed files only, and goes ahead.
    std::fs::write(dir.join("tests/test_calc.py"), &test_before).unwrap();
    restore(&admin, &id, &start).await.unwrap();
    assert!(read(&dir, "src/calc.py").contains("a - b"));
    srv.stop().await;
}

#[tokio::test]
async fn after_an_approved_plan_a_restore_keeps_to_the_plans_files() {
    let srv = files_server(|_| {}).await;
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
    // Plan mode refuses a restore outright.
    let start = checkpoint(&agent, &id).await;
    let read_only = restore(&agent, &id, &start).await.unwrap_err();
    assert_eq!(reason(&read_only), "POLICY_DENIED");
    assert_eq!(meta(&read_only, "rule"), "plan_mode");

    assert!(approver.pending(0).await.unwrap().is_empty());
    let mut events = agent
        .submit(&id, plan(&["src/calc.py"], "python3 tests/test_calc.py"))
        .await
        .unwrap();
    let Event::Pending(pending) = next(&mut events).await else {
        panic!("the plan waits first");
    };
    approver
        .decide(&pending.approval_id, true, "")
        .await
        .unwrap();
    let Event::Approved(_) = next(&mut events).await else {
        panic!("approved");
    };
    agent
        .c()
        .edit_file(edit_req(&id, "src/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    // A file outside the plan appears (as a command would make it): a
    // restore would remove it, which the plan does not grant.
    std::fs::write(dir.join("notes.txt"), "scratch\n").unwrap();
    let refused = restore(&agent, &id, &start).await.unwrap_err();
    assert_eq!(reason(&refused), "POLICY_DENIED", "{refused:?}");
    assert_eq!(meta(&refused, "rule"), "plan");
    assert_eq!(meta(&refused, "path"), "notes.txt");
    assert!(read(&dir, "src/calc.py").contains("a + b"));
    assert!(dir.join("notes.txt").exists());

    // Touching the plan's files alone, it goes ahead.
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    restore(&agent, &id, &start).await.unwrap();
    assert!(read(&dir, "src/calc.py").contains("a - b"));
    srv.stop().await;
}
