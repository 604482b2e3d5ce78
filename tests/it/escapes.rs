//! The escapes a hostile command, a hostile client and another local user
//! tried, each with variants: a host directory mounted through a swapped
//! path, the supervisor killed, read, impersonated or flooded, a set-id
//! file left usable on the host, deep trees, a session wedged by a
//! background fork bomb, TTL mid-command, the disk filled, and images the
//! operator never allowed. Real Docker, real gRPC.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common;
use crate::common::{Mode, TestServer, reason, run, run_req, try_run};
use sandboxd::pb;

/// A session over the existing directory `dir` (under the allowed root).
async fn lent_session(srv: &TestServer, dir: &Path) -> Result<String, tonic::Status> {
    srv.client
        .clone()
        .create_session(pb::CreateSessionRequest {
            workspace_path: dir.display().to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().session_id)
}

/// CreateSession.
async fn create(
    srv: &TestServer,
    req: pb::CreateSessionRequest,
) -> Result<pb::Session, tonic::Status> {
    srv.client
        .clone()
        .create_session(req)
        .await
        .map(|r| r.into_inner())
}

async fn reset(srv: &TestServer, sid: &str) -> pb::ResetSandboxResponse {
    srv.client
        .clone()
        .reset_sandbox(pb::ResetSandboxRequest {
            session_id: sid.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// A directory outside every allowed root, holding a secret, as the
/// attacker's target.
fn host_target() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret\n").unwrap();
    (dir, secret)
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// The container of session `sid` (docker CLI).
fn container_of(sid: &str) -> String {
    common::containers_labelled(&format!("sandboxd.session={sid}"))
        .pop()
        .expect("the session has a container")
}

/// Session B works over a subdirectory of session A's workspace. A swaps the
/// subdirectory for a symlink to a host directory; whatever makes B's
/// container be created again, B still sees its own directory and the host
/// directory is neither readable nor written.
#[tokio::test]
async fn swapped_path_never_mounts_a_host_directory() {
    let srv = TestServer::with_docker().await;
    let proj = srv.allowed_root.path().join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    std::fs::write(proj.join("sub/mine.txt"), "B's own file\n").unwrap();
    // A user's checkout: commands run as its owner.
    for dir in [&proj, &proj.join("sub")] {
        std::os::unix::fs::chown(dir, Some(1000), Some(1000)).unwrap();
    }
    let (_target, secret) = host_target();
    let target_dir = secret.parent().unwrap().to_path_buf();
    let a = lent_session(&srv, &proj).await.unwrap();
    let b = lent_session(&srv, &proj.join("sub")).await.unwrap();
    let seen = run(&srv.client, &b, "cat mine.txt", 20_000).await;
    assert_eq!(seen.stdout(), "B's own file\n");

    let swap = format!(
        "mv sub sub.real && ln -s {} sub && ls -la",
        target_dir.display()
    );
    let swapped = run(&srv.client, &a, &swap, 20_000).await;
    assert_eq!(swapped.exit.exit_code, 0, "{}", swapped.stderr());
    let check = "cat mine.txt; cat secret.txt; echo planted > planted.txt; ls";

    // Variant 1: the container is reset through the API.
    reset(&srv, &b).await;
    let after = run(&srv.client, &b, check, 20_000).await;
    assert!(
        after.stdout().starts_with("B's own file\n"),
        "{}",
        after.stdout()
    );
    assert!(
        !after.stdout().contains("host secret"),
        "{}",
        after.stdout()
    );

    // Variant 2: the container is killed from outside; the next command
    // replaces it.
    assert!(docker(&["kill", &container_of(&b)]).status.success());
    let after = run(&srv.client, &b, check, 20_000).await;
    assert!(
        after.stdout().starts_with("B's own file\n"),
        "{}",
        after.stdout()
    );
    assert!(
        !after.stdout().contains("host secret"),
        "{}",
        after.stdout()
    );

    // Variant 3: a component above the lent directory is swapped on the
    // host (another local user with rights there, or a second session over
    // the allowed root), then the container dies.
    std::fs::rename(&proj, srv.allowed_root.path().join("proj.moved")).unwrap();
    std::os::unix::fs::symlink(&target_dir, &proj).unwrap();
    assert!(docker(&["kill", &container_of(&b)]).status.success());
    let after = run(&srv.client, &b, check, 20_000).await;
    assert!(
        after.stdout().starts_with("B's own file\n"),
        "{}",
        after.stdout()
    );
    assert!(
        !after.stdout().contains("host secret"),
        "{}",
        after.stdout()
    );

    assert!(
        !target_dir.join("planted.txt").exists(),
        "a command wrote into the host directory"
    );
    assert_eq!(
        std::fs::read_dir(&target_dir).unwrap().count(),
        1,
        "the host directory is untouched"
    );
    srv.stop().await;
}

/// A lent directory removed from the host: the session says so and never
/// mounts whatever takes its place.
#[tokio::test]
async fn removed_workspace_fails_clearly_instead_of_mounting_a_replacement() {
    let srv = TestServer::with_docker().await;
    let dir = srv.allowed_root.path().join("gone");
    std::fs::create_dir(&dir).unwrap();
    let sid = lent_session(&srv, &dir).await.unwrap();
    run(&srv.client, &sid, "true", 20_000).await;
    // The directory is removed and a new one (with other content) made in
    // its place; then the container has to be made again.
    std::fs::remove_dir(&dir).unwrap_or_else(|_| {
        // The pin keeps the directory busy only as a mount, not as a name.
        panic!("cannot remove the lent directory on the host")
    });
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("impostor.txt"), "not the session's\n").unwrap();
    assert!(docker(&["kill", &container_of(&sid)]).status.success());
    let err = try_run(&srv.client, run_req(&sid, "ls", 20_000))
        .await
        .map(|r| r.stdout().to_string())
        .expect_err("the command must not run over a replacement directory");
    assert_eq!(reason(&err), "WORKSPACE_GONE", "{err:?}");
    assert!(err.message().contains("Close the session"), "{err:?}");
    srv.stop().await;
}

/// The supervisor runs as root in the container: a command can neither
/// kill it, read its memory or environment, nor reach its socket; and a
/// supervisor that dies anyway (killed from outside) is never replaced in
/// the same container: the next command gets a fresh container and says so.
#[tokio::test]
async fn commands_cannot_reach_their_supervisor_and_a_lost_link_replaces_the_container() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let attack = r#"
        sup=$(for p in /proc/[0-9]*; do grep -q supervise $p/cmdline 2>/dev/null && basename $p; done | head -1)
        echo "supervisor pid: $sup"
        kill -9 "$sup" 2>&1; echo "kill: $?"
        kill -STOP "$sup" 2>&1; echo "stop: $?"
        cat /proc/$sup/environ >/dev/null 2>&1; echo "environ: $?"
        cat /proc/$sup/mem >/dev/null 2>&1; echo "mem: $?"
        ls /proc/$sup/fd >/dev/null 2>&1; echo "fd: $?"
        ls /.sandboxd/run >/dev/null 2>&1; echo "run dir: $?"
        python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("/.sandboxd/run/sock")' 2>/dev/null; echo "connect: $?"
    "#;
    let ran = run(&srv.client, &sid, attack, 20_000).await;
    let out = ran.stdout();
    // Nor can it make the OOM killer pick the supervisor: commands are its
    // first choice.
    let adj = run(&srv.client, &sid, "cat /proc/self/oom_score_adj", 20_000).await;
    assert_eq!(adj.stdout(), "1000\n", "{}", adj.stderr());
    assert!(!out.contains("supervisor pid: \n"), "{out}");
    for line in [
        "kill: 0",
        "stop: 0",
        "environ: 0",
        "mem: 0",
        "fd: 0",
        "run dir: 0",
        "connect: 0",
    ] {
        assert!(!out.contains(line), "the command could: {line}\n{out}");
    }
    // The supervisor still answers.
    let first = container_of(&sid);
    let again = run(&srv.client, &sid, "echo still here", 20_000).await;
    assert_eq!(again.stdout(), "still here\n");
    assert!(again.exit.notes.is_empty(), "{:?}", again.exit.notes);

    // Kill the supervisor from outside (as only root on the host can): its
    // link dies, and the container it leaves behind is never trusted again.
    let killed = docker(&[
        "exec",
        "-u",
        "0",
        &first,
        "pkill",
        "-9",
        "-f",
        "^/.sandboxd/sandboxd supervise",
    ]);
    assert!(killed.status.success(), "{killed:?}");
    let ran = run(&srv.client, &sid, "echo fresh", 20_000).await;
    assert_eq!(ran.stdout(), "fresh\n", "{:?}", ran.exit);
    assert!(
        ran.exit
            .notes
            .iter()
            .any(|n| n.contains("the sandbox was replaced")),
        "{:?}",
        ran.exit.notes
    );
    let second = container_of(&sid);
    assert_ne!(first, second, "the container whose link died was replaced");
    srv.stop().await;
}

/// A command that dies with its supervisor mid-run gets an honest result:
/// unknown, with the container killed, never a forged or stale one.
#[tokio::test]
async fn a_link_lost_mid_command_reports_an_unknown_result() {
    let srv = TestServer::with_docker().await;
    let (sid, _) = srv.session().await;
    let container = container_of(&sid);
    let client = srv.client.clone();
    let sid2 = sid.clone();
    let running = tokio::spawn(async move {
        try_run(
            &client,
            run_req(&sid2, "echo started; sleep 30; echo 12 passed", 60_000),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = docker(&[
        "exec",
        "-u",
        "0",
        &container,
        "pkill",
        "-9",
        "-f",
        "^/.sandboxd/sandboxd supervise",
    ]);
    assert!(killed.status.success(), "{killed:?}");
    let ran = running.await.unwrap().unwrap();
    assert_eq!(ran.exit.exit_code, -1);
    assert_eq!(ran.exit.killed_by, pb::KilledBy::Container as i32);
    assert!(!ran.stdout().contains("12 passed"));
    assert!(
        ran.exit
            .notes
            .iter()
            .any(|n| n.contains("result is unknown")),
        "{:?}",
        ran.exit
    );
    let next = run(&srv.client, &sid, "echo ok", 20_000).await;
    assert_eq!(next.stdout(), "ok\n");
    assert_ne!(container_of(&sid), container);
    srv.stop().await;
}

/// A set-user-id shell planted by a command is of no use to another user of
/// the host: the workspace is not reachable by them, and its filesystem
/// ignores set-id bits anyway.
#[tokio::test]
async fn planted_setuid_files_are_useless_on_the_host() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    let plant = "cp /bin/sh suidsh && chmod 4755 suidsh && mkdir sgid && chmod 2777 sgid && cp /bin/sh sgid/sh && chmod 6755 sgid/sh && ls -l suidsh sgid/sh";
    let ran = run(&srv.client, &sid, plant, 20_000).await;
    assert_eq!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert!(ran.stdout().contains("rws"), "{}", ran.stdout());
    for file in ["suidsh", "sgid/sh"] {
        let path = ws.join(file);
        // Another user cannot even reach it...
        let out = Command::new("su")
            .args(["nobody", "-s", "/bin/sh", "-c"])
            .arg(format!("{} -p -c id", path.display()))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "nobody ran {file}: {said}");
        assert!(!said.contains("euid="), "{said}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{err}");
    }
    // ...and the filesystem holding it is mounted nosuid, on the host and in
    // the container.
    let st = rustix::fs::statvfs(&ws).unwrap();
    assert!(st.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID));
    let mounts = run(
        &srv.client,
        &sid,
        "grep ' /workspace ' /proc/mounts",
        20_000,
    )
    .await;
    assert!(mounts.stdout().contains("nosuid"), "{}", mounts.stdout());
    // Even root's copy of the path to the workspace passes only through
    // directories closed to others.
    let mut dir = ws.parent();
    let mut closed = false;
    while let Some(d) = dir {
        if std::fs::metadata(d).unwrap().mode() & 0o011 == 0 {
            closed = true;
            break;
        }
        dir = d.parent();
    }
    assert!(
        closed,
        "some directory above the workspace is closed to others"
    );
    srv.stop().await;
}

/// A lent directory other users can reach is refused (a set-id file a
/// command plants there could be run by them); a private one is accepted,
/// and its pin is nosuid too.
#[tokio::test]
async fn lent_directories_must_be_private() {
    let srv = TestServer::with_docker().await;
    // The allowed root is a private temporary directory: open it up.
    std::fs::set_permissions(
        srv.allowed_root.path(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let open = srv.allowed_root.path().join("open");
    std::fs::create_dir(&open).unwrap();
    // A user's checkout: commands run as its owner.
    std::os::unix::fs::chown(&open, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = lent_session(&srv, &open).await.unwrap_err();
    assert_eq!(reason(&err), "INVALID_WORKSPACE", "{err:?}");
    assert!(err.message().contains("chmod 700"), "{err:?}");
    // Closing the directory itself is not enough: its commands run as its
    // owner and could open it again.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = lent_session(&srv, &open).await.unwrap_err();
    assert_eq!(reason(&err), "INVALID_WORKSPACE", "{err:?}");
    // A closed directory above it is.
    let private = srv.allowed_root.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let open = private.join("open");
    std::fs::rename(srv.allowed_root.path().join("open"), &open).unwrap();
    let sid = lent_session(&srv, &open).await.unwrap();
    // Its commands opening the directory up changes nothing for others.
    let opened = run(
        &srv.client,
        &sid,
        "chmod 755 /workspace && cp /bin/sh sh && chmod 4755 sh && echo planted",
        20_000,
    )
    .await;
    assert_eq!(opened.stdout(), "planted\n", "{}", opened.stderr());
    let out = Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c"])
        .arg(format!("{}/sh -p -c id", open.display()))
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let mounts = run(
        &srv.client,
        &sid,
        "grep ' /workspace ' /proc/mounts",
        20_000,
    )
    .await;
    assert!(mounts.stdout().contains("nosuid"), "{}", mounts.stdout());
    // Quotas apply to fresh workspaces only, and asking for one here says so.
    let err = create(
        &srv,
        pb::CreateSessionRequest {
            workspace_path: open.display().to_string(),
            limits: Some(pb::Limits {
                disk_bytes: 1 << 30,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "INVALID_ARGUMENT", "{err:?}");
    srv.stop().await;
}

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
    assert!(!ws.exists(), "the workspace is gone");
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
    let err = create(
        &srv,
        pb::CreateSessionRequest {
            limits: Some(pb::Limits {
                disk_bytes: u64::MAX,
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "LIMIT_EXCEEDED", "{err:?}");
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
        Command::new(env!("CARGO_BIN_EXE_sandboxd"))
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
    let err = srv
        .client
        .clone()
        .get_session(pb::GetSessionRequest { session_id: sid })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    srv.stop().await;
}

/// Images the operator did not allow are refused; allowed ones work.
#[tokio::test]
async fn only_allowed_images_start() {
    let default = sandboxd::sandbox::image::default_image();
    // Another tag of the default image: present, but not allowed.
    let other = "sandboxd-test-unlisted:latest";
    assert!(docker(&["tag", &default, other]).status.success());
    let srv = TestServer::with_docker().await;
    let err = create(
        &srv,
        pb::CreateSessionRequest {
            image: other.into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "IMAGE_NOT_ALLOWED", "{err:?}");
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

/// Runs `script` as `nobody` (uid 65534), the unprivileged local user.
fn as_nobody(script: &str) -> std::process::Output {
    Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c", script])
        .output()
        .unwrap()
}

/// Another user of the host can neither list the sessions, nor reach a
/// supervisor's socket, nor a workspace, while commands run.
#[tokio::test]
async fn another_local_user_cannot_reach_the_service_state() {
    let srv = TestServer::with_docker().await;
    let (sid, ws) = srv.session().await;
    run(&srv.client, &sid, "echo secret > notes.txt", 20_000).await;
    let state = srv.state_dir();
    assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
    // While a command runs (and whenever a socket might exist).
    let client = srv.client.clone();
    let id = sid.clone();
    let running =
        tokio::spawn(async move { run(&client, &id, "sleep 3; echo done", 20_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for script in [
        format!("ls {}", state.display()),
        format!("ls {}/run", state.display()),
        format!("ls {}/run/{sid}", state.display()),
        format!("cat {}/notes.txt", ws.display()),
        format!(
            "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"{}/run/{sid}/sock\")'",
            state.display()
        ),
    ] {
        let out = as_nobody(&script);
        assert!(!out.status.success(), "nobody could: {script}: {out:?}");
    }
    assert_eq!(running.await.unwrap().stdout(), "done\n");
    srv.stop().await;
}

/// A state directory another user prepared (say in /tmp, before the
/// service starts) is refused, and so is one with an open mode: the service
/// will not start on it.
#[tokio::test]
async fn the_service_refuses_a_state_directory_another_user_controls() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let planted = base.path().join("state");
    let made = as_nobody(&format!(
        "mkdir -m 700 {0} && mkdir -m 777 {0}/run {0}/workspaces",
        planted.display()
    ));
    assert!(made.status.success(), "{made:?}");
    let serve = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_sandboxd"))
            .args(["serve", "--listen", "127.0.0.1:0", "--pool-size", "0"])
            .args(["--docker-host", common::NO_DOCKER])
            .arg("--state-dir")
            .arg(dir)
            .output()
            .unwrap()
    };
    let out = serve(&planted);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unsafe") && err.contains("owned by uid 65534"),
        "{err}"
    );
    // Nothing of the service's went in there.
    assert!(!planted.join("volumes").exists());
    // An open mode is refused too, with the fix named.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = serve(&open);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 700"));
}

/// The service's own state (other sessions' volumes and sockets) is never
/// lent to a session, even under an allowed root.
#[tokio::test]
async fn the_state_directory_is_never_lent() {
    let srv = TestServer::start_with(|c| {
        c.allowed_roots = vec![c.state_dir.parent().unwrap().to_path_buf()];
    })
    .await;
    let (_, ws) = srv.session().await;
    let state = srv.state_dir();
    for dir in [state.clone(), state.join("workspaces"), ws] {
        let err = lent_session(&srv, &dir).await.unwrap_err();
        assert_eq!(
            reason(&err),
            "INVALID_WORKSPACE",
            "{}: {err:?}",
            dir.display()
        );
    }
    srv.stop().await;
}

/// Commands run with the lent directory's owner's own group, never the
/// directory's group (root's here, after an operator's `chown 1000`), so
/// they cannot leave a setgid-root file on the host.
#[tokio::test]
async fn commands_never_take_the_lent_directorys_group() {
    let srv = TestServer::with_docker().await;
    let proj = srv.allowed_root.path().join("proj");
    std::fs::create_dir(&proj).unwrap();
    std::os::unix::fs::chown(&proj, Some(1000), Some(0)).unwrap();
    let sid = lent_session(&srv, &proj).await.unwrap();
    let ran = run(&srv.client, &sid, "id -u; id -g; id -G; touch made", 20_000).await;
    assert_eq!(ran.stdout(), "1000\n1000\n1000\n", "{}", ran.stderr());
    let made = std::fs::metadata(proj.join("made")).unwrap();
    assert_ne!(
        made.gid(),
        0,
        "a file made by a command is not root's group"
    );
    srv.stop().await;
}

/// A lent path is judged by where it really is, never by its spelling:
/// `<allowed>/../..` climbing out is refused, however it starts.
#[tokio::test]
async fn lent_paths_are_judged_by_their_real_location() {
    let srv = TestServer::start().await;
    let (_outside, secret) = host_target();
    let outside = secret.parent().unwrap();
    let mut climbs = vec![format!(
        "{}/../../{}",
        srv.allowed_root.path().display(),
        outside.display()
    )];
    let depth = srv.allowed_root.path().components().count();
    climbs.push(format!(
        "{}/{}{}",
        srv.allowed_root.path().display(),
        "../".repeat(depth),
        outside.display().to_string().trim_start_matches('/')
    ));
    for climb in climbs {
        let err = lent_session(&srv, Path::new(&climb)).await.unwrap_err();
        assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE", "{climb}: {err:?}");
    }
    srv.stop().await;
}
