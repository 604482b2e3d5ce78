//! Checkpoints and changes over gRPC and real Docker: a checkpoint taken, a
//! command's mess (new files, deletions, a mode change, a 10,000-file
//! directory, a fifo, a swapped symlink), and a restore that gives back the
//! checkpoint exactly; a restore refused under a running command unless it
//! may stop it; the changes since the start as a patch that `git apply`
//! turns a pristine copy into the workspace; and every refusal with its
//! reason.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{
    SANDBOXD, TestServer, assert_refused, assert_refused_unchanged, edit, edit_req, run, run_req,
};
use sandboxd::pb;
use sha2::{Digest, Sha256};
use tonic::Code;

/// Every entry under `root` with its kind, permission bits and contents:
/// what a restore must give back.
fn tree(root: &Path) -> BTreeMap<String, (char, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.mode() & 0o777;
            let ft = meta.file_type();
            let entry = if ft.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                ('l', 0, target.into_os_string().into_encoded_bytes())
            } else if ft.is_dir() {
                stack.push(path.clone());
                ('d', mode, Vec::new())
            } else if ft.is_file() {
                ('f', mode, std::fs::read(&path).unwrap())
            } else {
                ('s', mode, Vec::new())
            };
            out.insert(rel, entry);
        }
    }
    out
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn checkpoint(server: &TestServer, id: &str, label: &str) -> pb::CreateCheckpointResponse {
    server
        .client
        .clone()
        .create_checkpoint(pb::CreateCheckpointRequest {
            session_id: id.into(),
            label: label.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

fn restore_req(id: &str, cp: &str, stop: bool) -> pb::RestoreCheckpointRequest {
    pb::RestoreCheckpointRequest {
        session_id: id.into(),
        checkpoint_id: cp.into(),
        stop_commands: stop,
    }
}

async fn changes(server: &TestServer, id: &str, since: &str) -> pb::GetChangesResponse {
    server
        .client
        .clone()
        .get_changes(pb::GetChangesRequest {
            session_id: id.into(),
            since_checkpoint: since.into(),
            max_patch_bytes: 0,
        })
        .await
        .unwrap()
        .into_inner()
}

/// A small project written straight into the workspace, as an upload would.
fn project(ws: &Path) {
    std::fs::create_dir_all(ws.join("pkg/sub")).unwrap();
    std::fs::write(ws.join("pkg/calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(ws.join("pkg/sub/data.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("README.md"), "# calc\n").unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\npython3 -m pkg.calc\n").unwrap();
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("pkg/calc.py", ws.join("calc-link")).unwrap();
    std::fs::create_dir(ws.join("empty")).unwrap();
    // Written as the tests' user: given to the workspace's owner, whom
    // commands run as.
    let owned = Command::new("chown")
        .args(["-R", "-h", "--reference"])
        .args([ws, ws])
        .status()
        .unwrap();
    assert!(owned.success());
}

const MESS: &str = "set -e
echo changed > pkg/calc.py
rm -r pkg/sub
chmod 600 run.sh
chmod 700 empty
rm calc-link && ln -s README.md calc-link
echo new > new.txt
mkdir -p big/inner && cd big/inner && seq 1 10000 | xargs touch && cd ../..
mkfifo pipe
mkdir -p a/b/c && echo deep > a/b/c/d.txt";

#[tokio::test]
async fn a_restore_after_a_commands_mess_gives_back_the_checkpoint_exactly() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    project(&ws);
    let before = tree(&ws);
    let cp = checkpoint(&server, &id, "clean").await;
    let info = cp.checkpoint.clone().unwrap();
    assert_eq!(info.files, 4, "{cp:?}");
    assert_eq!(info.label, "clean");

    let mess = run(&server.client, &id, MESS, 60_000).await;
    assert_eq!(mess.exit.exit_code, 0, "{}", mess.stderr());
    assert_ne!(tree(&ws), before);
    let now = changes(&server, &id, &info.checkpoint_id).await;
    assert_ne!(now.digest, info.digest);

    let r = server
        .client
        .clone()
        .restore_checkpoint(restore_req(&id, &info.checkpoint_id, false))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.digest, info.digest, "{r:?}");
    assert_eq!(tree(&ws), before, "{}", r.message);
    assert!(
        r.message.contains("matches the checkpoint exactly"),
        "{}",
        r.message
    );
    // pkg/calc.py, pkg/sub/data.txt and the link written back; run.sh and
    // empty/ get their modes back; new.txt, big/, pipe and a/ removed.
    assert_eq!(
        (r.files_written, r.removed, r.modes_changed),
        (3, 4, 2),
        "{r:?}"
    );
    // The container sees the restored tree.
    let seen = run(&server.client, &id, "cat pkg/sub/data.txt; ls", 30_000).await;
    assert_eq!(
        seen.stdout(),
        "one\ntwo\nthree\nREADME.md\ncalc-link\nempty\npkg\nrun.sh\n"
    );
    // Nothing changed since the checkpoint, as GetChanges tells it too.
    let after = changes(&server, &id, &info.checkpoint_id).await;
    assert!(after.changes.is_empty(), "{after:?}");
    assert_eq!(after.digest, info.digest);

    // The report shows the checkpoint; the journal has the restore.
    let report = server
        .client
        .clone()
        .get_session_report(pb::GetSessionReportRequest {
            session_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(report.checkpoints.len(), 1);
    assert_eq!(report.checkpoints[0].checkpoint_id, info.checkpoint_id);
    let tools: Vec<&str> = report.journal.iter().map(|e| e.tool.as_str()).collect();
    assert!(
        tools.contains(&"CreateCheckpoint") && tools.contains(&"RestoreCheckpoint"),
        "{tools:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_restore_is_refused_under_a_running_command_unless_it_may_stop_it() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    project(&ws);
    let cp = checkpoint(&server, &id, "").await.checkpoint.unwrap();
    std::fs::write(ws.join("README.md"), "edited\n").unwrap();

    let mut events = server
        .client
        .clone()
        .run_command(run_req(&id, "echo up; sleep 120", 150_000))
        .await
        .unwrap()
        .into_inner();
    // Wait for the command to be running.
    while let Some(ev) = events.message().await.unwrap() {
        if let Some(pb::run_command_event::Event::Stdout(_)) = ev.event {
            break;
        }
    }
    let refused = assert_refused_unchanged(
        server
            .client
            .clone()
            .restore_checkpoint(restore_req(&id, &cp.checkpoint_id, false)),
        "COMMAND_RUNNING",
        &ws,
    )
    .await;
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(refused.message().contains("stop_commands"), "{refused:?}");

    let r = server
        .client
        .clone()
        .restore_checkpoint(restore_req(&id, &cp.checkpoint_id, true))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.stopped_commands, 1);
    assert_eq!(r.digest, cp.digest);
    assert_eq!(
        std::fs::read_to_string(ws.join("README.md")).unwrap(),
        "# calc\n"
    );
    // The stopped command's stream ends with its result.
    let mut exit = None;
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(60), events.message())
        .await
        .expect("the stopped command's stream ends")
        .unwrap()
    {
        if let Some(pb::run_command_event::Event::Exit(e)) = ev.event {
            exit = Some(e);
        }
    }
    let exit = exit.expect("an exit event");
    assert_ne!(exit.exit_code, 0, "{exit:?}");
    // And the sandbox works again.
    assert_eq!(
        run(&server.client, &id, "cat README.md", 30_000)
            .await
            .stdout(),
        "# calc\n"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_changes_since_the_start_are_a_patch_that_rebuilds_the_workspace() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    project(&ws);
    let pristine = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", ws.display()))
        .arg(pristine.path())
        .status()
        .unwrap();
    assert!(copied.success());
    // Nothing changed yet: the uploaded project is where the session began.
    assert!(changes(&server, &id, "").await.changes.is_empty());

    // Edits through the file tools...
    let c = server.client.clone();
    c.clone()
        .edit_file(edit_req(&id, "pkg/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    c.clone()
        .create_file(pb::CreateFileRequest {
            session_id: id.clone(),
            path: "tests/test_calc.py".into(),
            content: "from pkg.calc import add\nassert add(2, 3) == 5\n".into(),
        })
        .await
        .unwrap();
    // ...and through a command.
    let cmd = "set -e
rm README.md
printf 'one\\nTWO\\nthree' > pkg/sub/data.txt
chmod +x pkg/calc.py
printf 'caf\\303\\251\\n' > 'caf\u{e9} \"menu\".txt'
ln -sf run.sh calc-link
printf '\\000\\001' > blob.bin";
    let ran = run(&c, &id, cmd, 30_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());

    let got = changes(&server, &id, "").await;
    let listed: Vec<(&str, pb::ChangeKind)> = got
        .changes
        .iter()
        .map(|ch| (ch.path.as_str(), ch.kind()))
        .collect();
    use pb::ChangeKind::{Added, Deleted, Modified};
    assert_eq!(
        listed,
        vec![
            ("README.md", Deleted),
            ("blob.bin", Added),
            ("caf\u{e9} \"menu\".txt", Added),
            ("calc-link", Modified),
            ("pkg/calc.py", Modified),
            ("pkg/sub/data.txt", Modified),
            ("tests/test_calc.py", Added),
        ],
        "{}",
        got.message
    );
    for ch in &got.changes {
        let host = ws.join(&ch.path);
        if ch.kind() != Deleted && ch.mode_after != 0o120000 {
            assert_eq!(
                ch.sha256_after,
                sha(&std::fs::read(&host).unwrap()),
                "{}",
                ch.path
            );
        }
        if ch.kind() != Added && ch.mode_before != 0o120000 {
            let old = std::fs::read(pristine.path().join(&ch.path)).unwrap();
            assert_eq!(ch.sha256_before, sha(&old), "{}", ch.path);
        }
    }
    let calc = got
        .changes
        .iter()
        .find(|c| c.path == "pkg/calc.py")
        .unwrap();
    assert_eq!((calc.mode_before, calc.mode_after), (0o100644, 0o100755));
    let blob = got.changes.iter().find(|c| c.path == "blob.bin").unwrap();
    assert_eq!(blob.omitted(), pb::OmittedReason::OmittedBinary);
    assert_eq!(got.omitted, 1);

    // The CLI prints the same patch.
    // Run beside the in-process server, whose runtime this test shares.
    let cli = tokio::process::Command::new(SANDBOXD)
        .args([
            "--addr",
            &format!("http://{}", server.addr),
            "--session",
            &id,
            "diff",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert_eq!(cli.stdout, got.patch);
    assert!(String::from_utf8_lossy(&cli.stderr).contains("blob.bin is binary"));

    // git apply turns the pristine copy into the workspace (the binary
    // file, which the patch names but does not carry, aside).
    let patch = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(patch.path(), &got.patch).unwrap();
    let git = Command::new("git")
        .args(["apply", "--verbose"])
        .arg(patch.path())
        .current_dir(pristine.path())
        .output()
        .unwrap();
    assert!(
        git.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&git.stderr),
        String::from_utf8_lossy(&got.patch)
    );
    std::fs::copy(ws.join("blob.bin"), pristine.path().join("blob.bin")).unwrap();
    let files = |root: &Path| -> BTreeMap<String, (char, bool, Vec<u8>)> {
        tree(root)
            .into_iter()
            .filter(|(_, (kind, _, _))| *kind != 'd')
            .map(|(p, (kind, mode, bytes))| (p, (kind, mode & 0o100 != 0, bytes)))
            .collect()
    };
    assert_eq!(files(pristine.path()), files(&ws));
    server.stop().await;
}

#[tokio::test]
async fn changes_since_a_checkpoint_list_only_what_came_after_it() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    project(&ws);
    let c = server.client.clone();
    c.clone()
        .edit_file(edit_req(
            &id,
            "README.md",
            vec![edit("# calc", "# calculator")],
        ))
        .await
        .unwrap();
    let cp = checkpoint(&server, &id, "after readme")
        .await
        .checkpoint
        .unwrap();
    c.clone()
        .edit_file(edit_req(&id, "pkg/calc.py", vec![edit("a - b", "a + b")]))
        .await
        .unwrap();
    let since_cp = changes(&server, &id, &cp.checkpoint_id).await;
    let paths: Vec<&str> = since_cp.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["pkg/calc.py"]);
    let text = String::from_utf8(since_cp.patch.clone()).unwrap();
    assert!(
        text.contains("-    return a - b\n+    return a + b\n"),
        "{text}"
    );
    let since_start = changes(&server, &id, "").await;
    let paths: Vec<&str> = since_start
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(paths, ["README.md", "pkg/calc.py"]);
    assert_eq!(since_start.digest, since_cp.digest);
    server.stop().await;
}

#[tokio::test]
async fn checkpoint_refusals_name_their_reason_and_change_nothing() {
    let server = TestServer::start().await;
    let (id, ws) = server.session().await;
    let (other, _) = server.session().await;
    project(&ws);
    let c = server.client.clone();
    let cp = checkpoint(&server, &id, "").await.checkpoint.unwrap();
    let theirs = checkpoint(&server, &other, "").await.checkpoint.unwrap();
    std::fs::write(ws.join("README.md"), "mine now\n").unwrap();

    // Another session's checkpoint.
    let s = assert_refused_unchanged(
        c.clone()
            .restore_checkpoint(restore_req(&id, &theirs.checkpoint_id, false)),
        "CHECKPOINT_NOT_FOUND",
        &ws,
    )
    .await;
    assert_eq!(s.code(), Code::NotFound);
    assert!(s.message().contains("not one of this session's"), "{s:?}");
    // A deleted one.
    let gone = c
        .clone()
        .delete_checkpoint(pb::DeleteCheckpointRequest {
            session_id: id.clone(),
            checkpoint_id: cp.checkpoint_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(gone.message.contains("freed"), "{gone:?}");
    let s = assert_refused_unchanged(
        c.clone()
            .restore_checkpoint(restore_req(&id, &cp.checkpoint_id, false)),
        "CHECKPOINT_NOT_FOUND",
        &ws,
    )
    .await;
    assert!(s.message().contains("was deleted"), "{s:?}");
    assert_refused(
        c.clone().delete_checkpoint(pb::DeleteCheckpointRequest {
            session_id: id.clone(),
            checkpoint_id: cp.checkpoint_id.clone(),
        }),
        "CHECKPOINT_NOT_FOUND",
    )
    .await;
    // Changes since an unknown checkpoint.
    assert_refused(
        c.clone().get_changes(pb::GetChangesRequest {
            session_id: id.clone(),
            since_checkpoint: "nope".into(),
            max_patch_bytes: 0,
        }),
        "CHECKPOINT_NOT_FOUND",
    )
    .await;
    // A patch bound over the ceiling is refused, not lowered.
    assert_refused(
        c.clone().get_changes(pb::GetChangesRequest {
            session_id: id.clone(),
            since_checkpoint: String::new(),
            max_patch_bytes: u64::MAX,
        }),
        "LIMIT_EXCEEDED",
    )
    .await;
    // A label that is too long, or has control characters.
    for label in ["x".repeat(201), "a\nb".to_string()] {
        assert_refused(
            c.clone().create_checkpoint(pb::CreateCheckpointRequest {
                session_id: id.clone(),
                label,
            }),
            "INVALID_ARGUMENT",
        )
        .await;
    }
    // None of it left a checkpoint behind.
    let listed = c
        .clone()
        .list_checkpoints(pb::ListCheckpointsRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.checkpoints.is_empty(), "{listed:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_read_only_session_may_checkpoint_but_not_restore() {
    let server = TestServer::start().await;
    let (id, ws) = server
        .session_with(pb::Policy {
            read_only: true,
            ..Default::default()
        })
        .await;
    project(&ws);
    let cp = checkpoint(&server, &id, "").await.checkpoint.unwrap();
    std::fs::write(ws.join("README.md"), "changed outside\n").unwrap();
    assert_refused_unchanged(
        server
            .client
            .clone()
            .restore_checkpoint(restore_req(&id, &cp.checkpoint_id, false)),
        "POLICY_DENIED",
        &ws,
    )
    .await;
    server.stop().await;
}

#[tokio::test]
async fn checkpoints_count_against_the_disk_quota() {
    let server = TestServer::with_docker().await;
    let s = server
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                disk_bytes: 32 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let id = s.session_id;
    let make = "head -c 12000000 /dev/urandom > big.bin";
    assert_eq!(
        run(&server.client, &id, make, 60_000).await.exit.exit_code,
        0
    );
    let first = checkpoint(&server, &id, "one").await;
    assert!(first.copied_bytes >= 12_000_000, "{first:?}");
    assert_eq!(first.store_budget, 32 << 20);
    // Different bytes of the same size: a second copy fits...
    assert_eq!(
        run(&server.client, &id, make, 60_000).await.exit.exit_code,
        0
    );
    checkpoint(&server, &id, "two").await;
    // ...a third would pass the quota: refused, and nothing is kept of it.
    assert_eq!(
        run(&server.client, &id, make, 60_000).await.exit.exit_code,
        0
    );
    let refused = assert_refused(
        server
            .client
            .clone()
            .create_checkpoint(pb::CreateCheckpointRequest {
                session_id: id.clone(),
                label: "three".into(),
            }),
        "CHECKPOINT_STORE_FULL",
    )
    .await;
    assert_eq!(refused.code(), Code::ResourceExhausted);
    // Deleting the first frees its bytes, and the third fits.
    let cp1 = first.checkpoint.unwrap().checkpoint_id;
    server
        .client
        .clone()
        .delete_checkpoint(pb::DeleteCheckpointRequest {
            session_id: id.clone(),
            checkpoint_id: cp1,
        })
        .await
        .unwrap();
    let third = checkpoint(&server, &id, "three").await;
    assert!(third.store_bytes <= 2 * 12_000_000 + 1024, "{third:?}");
    server.stop().await;
}

/// A page written through a shared mapping while it is dirty changes no
/// timestamp: the scan writes the workspace back first, so the next write
/// faults and stamps ctime, and the change is seen.
#[tokio::test]
async fn a_write_through_a_shared_mapping_is_not_missed() {
    let server = TestServer::with_docker().await;
    let (id, ws) = server.session().await;
    let writer = "head -c 4096 /dev/zero | tr '\\0' A > m
setsid python3 -c '
import mmap, os, time
f = open(\"m\", \"r+b\")
mm = mmap.mmap(f.fileno(), 4096)
mm[0:1] = b\"B\"
while not os.path.exists(\"go\"):
    time.sleep(0.05)
mm[1:2] = b\"C\"
open(\"done\", \"w\").write(\"1\")
time.sleep(120)
' > /dev/null 2>&1 < /dev/null &";
    let started = run(&server.client, &id, writer, 30_000).await;
    assert_eq!(started.exit.exit_code, 0, "{}", started.stderr());
    // The first write's ctime settles; the page stays dirty, mapped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cp = checkpoint(&server, &id, "").await.checkpoint.unwrap();
    std::fs::write(ws.join("go"), "").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !ws.join("done").exists() {
        assert!(std::time::Instant::now() < until, "the writer never wrote");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bytes = std::fs::read(ws.join("m")).unwrap();
    assert_eq!(&bytes[..2], b"BC");
    let after = changes(&server, &id, &cp.checkpoint_id).await;
    let paths: Vec<&str> = after.changes.iter().map(|c| c.path.as_str()).collect();
    assert!(paths.contains(&"m"), "{paths:?}");
    assert_ne!(after.digest, cp.digest);
    server.stop().await;
}
