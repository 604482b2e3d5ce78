//! The escapes that apply without root. The engine binds a lent directory
//! by its path, which commands of another session may reach: a swap
//! between two commands must never make a container mount what the path
//! names now. The supervisor's socket is open to the container's commands
//! here, and must still take only the supervisor.

use super::{Served, User};

/// Session `outer` lends a directory holding session `inner`'s project:
/// a command of `outer` swaps the project (or an ancestor of it) for a
/// symlink to another directory of the user's. `inner`'s next container
/// is refused, and never sees that directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_lent_directory_or_an_ancestor_between_commands_mounts_nothing_else() {
    let user = User::new();
    user.mkdir("outer/mid/proj");
    user.write("outer/mid/proj/mine.txt", "mine\n");
    user.mkdir("secret/proj");
    user.write("secret/proj/key.txt", "the user's key\n");
    let served = Served::start(&user).await;
    let secret = user.home.join("secret");
    let outer = served.open(&user.home.join("outer"));

    for (swapped, target) in [("mid/proj", secret.join("proj")), ("mid", secret.clone())] {
        let inner = served.open(&user.home.join("outer/mid/proj"));
        let (code, out) = served.run(&inner, "cat mine.txt");
        assert_eq!(code, 0, "{out}");
        let (code, out) = served.run(
            &outer,
            &format!(
                "mv {swapped} {swapped}.real && ln -s {} {swapped}",
                target.display()
            ),
        );
        assert_eq!(code, 0, "{out}");
        // A fresh container for `inner`: its path now leads elsewhere.
        let (code, out, err) = served.cli(&["session", "reset", "-s", &inner]);
        let reset = format!("{out}{err}");
        let (code2, out2) = served.run(&inner, "cat key.txt; ls");
        assert!(
            code != 0 || code2 != 0,
            "a container started over the swapped path: {reset} {out2}"
        );
        assert!(!out2.contains("the user's key"), "{out2}");
        assert!(
            reset.contains("WORKSPACE_GONE") || out2.contains("WORKSPACE_GONE"),
            "{reset} {out2}"
        );
        // Put back for the next round.
        let (code, out) = served.run(
            &outer,
            &format!("rm {swapped} && mv {swapped}.real {swapped}"),
        );
        assert_eq!(code, 0, "{out}");
        let _ = served.cli(&["session", "close", "-s", &inner]);
    }
}

/// Without root the supervisor's socket directory is open to the
/// container's commands (they run as the service's own user), so the
/// socket must be gone before any command runs: once the supervisor
/// connected, nothing is left to connect to, and commands keep running
/// supervised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_finds_the_supervisor_socket_to_pose_on() {
    let user = User::new();
    let proj = user.mkdir("proj");
    let served = Served::start(&user).await;
    let id = served.open(&proj);
    let pose = r#"ls -la /.sandboxd/run; python3 -c '
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/.sandboxd/run/sock")
    print("connected")
except OSError as e:
    print("refused:", e.strerror)
'"#;
    let (_, out) = served.run(&id, pose);
    assert!(
        out.contains("refused: No such file or directory"),
        "a command reached the socket: {out}"
    );
    let (code, out) = served.run(&id, "echo still && sleep 0.1 && echo here");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("still") && out.contains("here"), "{out}");
    assert!(
        !served.log().contains("framing over stdio"),
        "the link went over the socket: {}",
        served.log()
    );
}

/// The check that closes the last gap: between the service's own check of
/// the path and the engine's mount, the path could still be swapped. The
/// supervisor, first in every container of such a workspace, serves
/// nothing unless `/workspace` is the session's directory (device and
/// inode), so nothing runs over another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_serves_only_over_the_sessions_own_directory() {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    use sandboxd::sandbox::supervisor::host::Link;
    use sandboxd::sandbox::{ContainerSpec, Runtime, docker::DockerRuntime};

    crate::common::TestServer::with_docker().await.stop().await;
    let rt: Arc<dyn Runtime> = Arc::new(DockerRuntime::new(None));
    let dir = tempfile::tempdir().unwrap();
    let label = format!("sandboxd-test-{}", uuid::Uuid::new_v4().simple());
    let spec = ContainerSpec {
        workspace_bound: false,
        workspace_slot: false,
        supervisor: Some(crate::common::SANDBOXD.into()),
        ..small_container(dir.path().to_path_buf(), &label)
    };
    let container = rt.start_container(&spec).await.unwrap();
    let md = std::fs::metadata(dir.path()).unwrap();
    let other = Link::start(
        &rt,
        &container,
        "1000:1000",
        None,
        Some((md.dev(), md.ino() + 1)),
    )
    .await;
    let own = Link::start(
        &rt,
        &container,
        "1000:1000",
        None,
        Some((md.dev(), md.ino())),
    )
    .await;
    crate::common::remove_containers_labelled(&label);
    let Err(refused) = other else {
        panic!("the supervisor served over another directory");
    };
    assert!(own.is_ok(), "{:?}", own.err());
    let _ = refused;
}

/// The engine is never asked to make a missing workspace: a path that
/// leads, through a symlink planted on the way, to a place without the
/// directory fails to start, and nothing is made there (the engine, as
/// root, would make it and give it to root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_never_makes_a_missing_workspace() {
    use std::sync::Arc;

    use sandboxd::sandbox::{ContainerSpec, Runtime, docker::DockerRuntime};

    crate::common::TestServer::with_docker().await.stop().await;
    let rt: Arc<dyn Runtime> = Arc::new(DockerRuntime::new(None));
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.path().join("mid")).unwrap();
    let label = format!("sandboxd-test-{}", uuid::Uuid::new_v4().simple());
    let spec = ContainerSpec {
        workspace_bound: true,
        workspace_slot: false,
        supervisor: None,
        ..small_container(dir.path().join("mid/proj"), &label)
    };
    let started = rt.start_container(&spec).await;
    crate::common::remove_containers_labelled(&label);
    assert!(started.is_err(), "a container started over a missing path");
    assert!(
        !elsewhere.join("proj").exists(),
        "the engine made the missing workspace"
    );
}

/// Without root the engine finds a lent directory by its path, so no
/// directory above it may belong to another user, who could swap it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_under_another_users_directory_is_not_lent() {
    let user = User::new();
    let proj = user.mkdir("shared/proj");
    let shared = user.home.join("shared");
    std::os::unix::fs::chown(&shared, Some(65534), Some(65534)).unwrap();
    let served = Served::start(&user).await;
    let (code, out, err) =
        served.cli(&["session", "create", "--workspace", proj.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("INVALID_WORKSPACE"), "{err}");
    assert!(
        err.contains(&format!("lies under {}", shared.display())),
        "{err}"
    );
}

/// A small container over `workspace`, labelled `label` (for its removal),
/// its commands run as uid 1000, nothing else set.
fn small_container(workspace: std::path::PathBuf, label: &str) -> sandboxd::sandbox::ContainerSpec {
    sandboxd::sandbox::ContainerSpec {
        image: sandboxd::sandbox::image::default_image(),
        workspace,
        workspace_identity: None,
        workspace_bound: false,
        workspace_slot: false,
        workspace_lent: false,
        workspace_mount: None,
        user: "1000:1000".into(),
        env: Default::default(),
        limits: sandboxd::sandbox::Limits {
            memory_bytes: 256 << 20,
            nano_cpus: 1_000_000_000,
            pids: 64,
            disk_bytes: 0,
            inodes: 0,
        },
        tmp_bytes: 16 << 20,
        labels: [(label.to_string(), "1".to_string())].into(),
        runtime: None,
        supervisor: None,
        idle: None,
        socket_dir: None,
    }
}
