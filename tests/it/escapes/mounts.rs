//! What a session mounts is what it was given: a host directory is never
//! mounted through a swapped path or in place of a removed lent directory;
//! lent directories must be private and never lend their group; the
//! service's state directory is never lent; a lent path is judged by where
//! it really is.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{container_of, create, docker, reset};
use crate::common::{TestServer, assert_refused, assert_refused_unchanged, run, run_req, try_run};
use sandboxd::pb;

/// A session over the existing directory `dir` (under the allowed root).
async fn lent_session(srv: &TestServer, dir: &Path) -> Result<String, tonic::Status> {
    srv.try_lend(dir).await.map(|s| s.session_id)
}

/// A directory outside every allowed root, holding a secret, as the
/// attacker's target.
fn host_target() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret\n").unwrap();
    (dir, secret)
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
    // The command must not run over the replacement directory.
    let ls = try_run(&srv.client, run_req(&sid, "ls", 20_000));
    let err = assert_refused_unchanged(ls, "WORKSPACE_GONE", &dir).await;
    assert!(err.message().contains("Close the session"), "{err:?}");
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
    let err = assert_refused_unchanged(lent_session(&srv, &open), "INVALID_WORKSPACE", &open).await;
    assert!(err.message().contains("chmod 700"), "{err:?}");
    // Closing the directory itself is not enough: its commands run as its
    // owner and could open it again.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_refused_unchanged(lent_session(&srv, &open), "INVALID_WORKSPACE", &open).await;
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
    let quota = pb::CreateSessionRequest {
        workspace_path: open.display().to_string(),
        limits: Some(pb::Limits {
            disk_bytes: 1 << 30,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_refused_unchanged(create(&srv, quota), "INVALID_ARGUMENT", &open).await;
    srv.stop().await;
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
        assert_refused(lent_session(&srv, &dir), "INVALID_WORKSPACE").await;
    }
    srv.stop().await;
}

/// Another service's state, or a journal directory, is never lent either:
/// not the directory itself, not a directory holding it, not a directory
/// inside it (its token, sockets and sessions would be a command's).
#[tokio::test]
async fn no_services_state_is_ever_lent() {
    let srv = TestServer::start().await;
    let root = srv.allowed_root.path();
    let other = root.join("other");
    let state = other.join("var/lib/sandboxd/other-service");
    sandboxd::state::StateDir::open(&state).unwrap();
    std::fs::write(state.join("token"), "other service's token\n").unwrap();
    std::fs::create_dir(state.join("workspaces")).unwrap();
    let journals = root.join("journals");
    sandboxd::state::StateDir::open(&journals).unwrap();
    let project = root.join("project");
    std::fs::create_dir(&project).unwrap();
    for dir in [
        state.clone(),
        state.join("workspaces"),
        other.clone(),
        other.join("var/lib"),
        journals.clone(),
    ] {
        let err =
            assert_refused_unchanged(lent_session(&srv, &dir), "INVALID_WORKSPACE", root).await;
        assert!(err.message().contains("sandboxd state"), "{dir:?}: {err:?}");
    }
    // A project of its own beside them is lent.
    lent_session(&srv, &project).await.unwrap();
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
        let lent = lent_session(&srv, Path::new(&climb));
        assert_refused_unchanged(lent, "PATH_OUTSIDE_WORKSPACE", outside).await;
    }
    srv.stop().await;
}
