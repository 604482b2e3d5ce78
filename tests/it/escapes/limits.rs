//! What the operator bounds holds against a command and recovers: a
//! 30,000-deep tree, the disk and inode quotas, the process limit (a
//! session wedged by a background fork bomb is reported and reset), the
//! idle timeout during a command, and the images allowed.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{container_of, create, docker, reset};
use crate::common;
use crate::common::{Mode, TestServer, assert_refused, prepare_host, run};
use sandboxd::pb;

/// A tree tens of thousands of directories deep is the session's problem:
/// closing the session removes it and the service keeps serving.
#[tokio::test]
async fn deep_trees_are_removed_without_harming_the_service() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    let deep = "python3 -c 'import os\nfor _ in range(30000):\n    os.mkdir(\"d\"); os.chdir(\"d\")\nprint(\"deep\")'";
    let ran = run(&srv.client, &sid, deep, 120_000).await;
    assert_eq!(ran.stdout(), "deep\n", "{}", ran.stderr());
    // The host-side tools meet it too.
    let listed = srv
        .client
        .clone()
        .find_files(pb::FindFilesRequest {
            session_id: sid.clone(),
            pattern: "*".into(),
            ..Default::default()
        })
        .await;
    assert!(listed.is_ok(), "{listed:?}");
    srv.client
        .clone()
        .close_session(pb::CloseSessionRequest {
            session_id: sid.clone(),
        })
        .await
        .unwrap();
    assert!(crate::common::gone_soon(&ws).await, "the workspace is gone");
    // Still serving.
    let (other, _) = srv.session().await;
    let ran = run(&srv.client, &other, "echo alive", 20_000).await;
    assert_eq!(ran.stdout(), "alive\n");
    srv.stop().await;
}

/// The disk quota of a fresh workspace: a command that fills it gets
/// ENOSPC, removing the files gives the space back, other sessions and the
/// host are unaffected; the inode quota likewise.
#[tokio::test]
async fn disk_and_inode_quotas_hold_and_recover() {
    let srv = TestServer::with_docker().await;
    let small = create(
        &srv,
        pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                disk_bytes: 64 << 20,
                inodes: 4096,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let limits = small.limits.unwrap();
    assert_eq!(limits.disk_bytes, 64 << 20);
    assert_eq!(limits.inodes, 4096);
    let sid = small.session_id;
    let (other, _) = srv.session().await;
    let fill = run(
        &srv.client,
        &sid,
        "dd if=/dev/zero of=big bs=1M count=200 2>&1; echo rc=$?",
        60_000,
    )
    .await;
    assert!(
        fill.stdout().contains("No space left on device"),
        "{}",
        fill.stdout()
    );
    let size = std::fs::metadata(PathBuf::from(&small.workspace_path).join("big"))
        .unwrap()
        .len();
    assert!(size <= 64 << 20, "{size}");
    // Another session is unaffected.
    let ok = run(
        &srv.client,
        &other,
        "dd if=/dev/zero of=f bs=1M count=80 2>&1 && echo wrote",
        60_000,
    )
    .await;
    assert!(ok.stdout().contains("wrote"), "{}", ok.stdout());
    // Space comes back once the files are gone.
    let again = run(
        &srv.client,
        &sid,
        "rm big && dd if=/dev/zero of=f bs=1M count=10 2>/dev/null && echo again",
        60_000,
    )
    .await;
    assert_eq!(again.stdout(), "again\n", "{}", again.stderr());
    // Inodes: thousands of empty files hit the inode quota, not the host.
    let many = run(&srv.client, &sid, "python3 -c 'import os\nn=0\ntry:\n    for i in range(10000):\n        open(\"e%d\" % i, \"w\").close(); n+=1\nexcept OSError as e:\n    print(n, e.strerror)'", 60_000).await;
    assert!(
        many.stdout().contains("No space left on device"),
        "{}",
        many.stdout()
    );
    let cleaned = run(
        &srv.client,
        &sid,
        "rm -f e* && touch after && echo ok",
        60_000,
    )
    .await;
    assert_eq!(cleaned.stdout(), "ok\n", "{}", cleaned.stderr());
    // Past the ceiling is refused.
    let huge = pb::CreateSessionRequest {
        limits: Some(pb::Limits {
            disk_bytes: u64::MAX,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_refused(create(&srv, huge), "LIMIT_EXCEEDED").await;
    srv.stop().await;
}

/// A background fork bomb and a CPU spinner outlive their command; the
/// session reports the exhausted process limit clearly, and ResetSandbox
/// brings it back with the same id and workspace.
#[tokio::test]
async fn a_wedged_session_is_reported_and_reset() {
    let srv = TestServer::with_docker().await;
    let s = create(
        &srv,
        pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                pids: 64,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let sid = s.session_id;
    std::fs::write(PathBuf::from(&s.workspace_path).join("kept.txt"), "kept\n").unwrap();
    let spin = run(
        &srv.client,
        &sid,
        "python3 -c 'while 1: pass' SPINNER >/dev/null 2>&1 & echo spinning",
        20_000,
    )
    .await;
    assert_eq!(spin.stdout(), "spinning\n");
    // A background fork bomb returns at once, and processes left running
    // fill the process limit (the bomb alone may burn out by itself).
    let bomb = run(
        &srv.client,
        &sid,
        "b(){ b|b& }; b 2>/dev/null; echo bombed",
        20_000,
    )
    .await;
    assert_eq!(bomb.exit.exit_code, 0);
    let fill =
        "i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); done 2>/dev/null; echo planted";
    // The shell itself may die of "Cannot fork" on the way (while the bomb
    // peaks): fill again until the limit holds with the bomb gone or not.
    let mut wedged = None;
    for _ in 0..5 {
        run(&srv.client, &sid, fill, 20_000).await;
        let ran = run(&srv.client, &sid, "echo a | cat; echo b | cat", 20_000).await;
        if ran.exit.pids_exhausted {
            wedged = Some(ran);
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let wedged = wedged.expect("processes left running fill the process limit");
    assert!(
        wedged.exit.pids_exhausted,
        "{:?} {}",
        wedged.exit,
        wedged.stderr()
    );
    assert!(
        wedged.exit.notes.iter().any(|n| n.contains("ResetSandbox")),
        "{:?}",
        wedged.exit.notes
    );
    let before = container_of(&sid);
    let reset = reset(&srv, &sid).await;
    assert_eq!(reset.session_id, sid);
    assert!(!reset.container_id.is_empty());
    assert_ne!(container_of(&sid), before);
    let ran = run(
        &srv.client,
        &sid,
        "cat kept.txt; ps -eo args | grep -c '[S]PINNER\\|[s]leep 1000'; true",
        20_000,
    )
    .await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert_eq!(
        ran.stdout(),
        "kept\n0\n",
        "the spinner and the sleepers are gone"
    );
    assert!(!ran.exit.pids_exhausted);
    srv.stop().await;
}

/// `sandboxd session reset` drives the same call from the CLI.
#[tokio::test]
async fn cli_resets_a_session() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let before = container_of(&sid);
    let addr = format!("http://{}", srv.addr);
    let id = sid.clone();
    // Off the test's thread: the server under test runs on it.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(common::SANDBOXD)
            .args(["--addr", &addr, "session", "reset", &id])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("the sandbox was reset"));
    assert_ne!(container_of(&sid), before);
    srv.stop().await;
}

/// A running command is activity: the idle timeout waits for it, then
/// reaps the session once it is idle.
#[tokio::test]
async fn ttl_never_reaps_a_session_with_a_running_command() {
    let srv = TestServer::with_docker().await;
    let sid = create(
        &srv,
        pb::CreateSessionRequest {
            ttl_seconds: 2,
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .session_id;
    let ran = run(&srv.client, &sid, "sleep 5; echo done", 30_000).await;
    assert_eq!(ran.stdout(), "done\n");
    assert_eq!(ran.exit.killed_by, pb::KilledBy::None as i32);
    // Still there right after, then reaped once idle past its TTL.
    srv.client
        .clone()
        .get_session(pb::GetSessionRequest {
            session_id: sid.clone(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut c = srv.client.clone();
    let get = c.get_session(pb::GetSessionRequest { session_id: sid });
    assert_refused(get, "SESSION_NOT_FOUND").await;
    srv.stop().await;
}

/// Images the operator did not allow are refused; allowed ones work.
#[tokio::test]
async fn only_allowed_images_start() {
    prepare_host();
    let default = sandboxd::sandbox::image::default_image();
    // Another tag of the default image: present, but not allowed.
    let other = "sandboxd-test-unlisted:latest";
    assert!(docker(&["tag", &default, other]).status.success());
    let srv = TestServer::with_docker().await;
    let unlisted = pb::CreateSessionRequest {
        image: other.into(),
        ..Default::default()
    };
    let err = assert_refused(create(&srv, unlisted), "IMAGE_NOT_ALLOWED").await;
    assert!(err.message().contains(&default), "{err:?}");
    srv.stop().await;
    let srv = TestServer::with_docker_mode_and(Mode::Supervisor, |c| {
        c.sandbox.allowed_images = vec![other.to_string()];
    })
    .await;
    let s = create(
        &srv,
        pb::CreateSessionRequest {
            image: other.into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let ran = run(&srv.client, &s.session_id, "echo allowed", 20_000).await;
    assert_eq!(ran.stdout(), "allowed\n");
    srv.stop().await;
    docker(&["rmi", other]);
}
