//! Which gVisor runtime a session's container runs under, and what that
//! opens. A workspace the service made holds no socket of the host, so its
//! container runs under the service's own entry (runsc with host Unix
//! sockets open) and its supervisor links over its socket on the host. A
//! directory of the host lent to a session may hold the host's sockets, so
//! its container runs under plain runsc, where none is reachable, and its
//! supervisor frames over the engine's exec.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

use crate::common::{Mode, TestServer, containers_labelled, run};

/// The engine runtime of session `sid`'s container (docker CLI).
fn runtime_of(sid: &str) -> String {
    let ids = containers_labelled(&format!("sandboxd.session={sid}"));
    assert_eq!(ids.len(), 1, "{ids:?}");
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.HostConfig.Runtime}}", &ids[0]])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The command line of the supervisor running the command (its parent).
const SUPERVISOR: &str = "tr '\\0' ' ' < /proc/$PPID/cmdline";

/// A probe that connects to `/workspace/host.sock` and says so.
const PROBE: &str = "python3 -c '\
    import socket; s = socket.socket(socket.AF_UNIX); \
    s.connect(\"/workspace/host.sock\"); print(\"connected\")'";

/// A program of the host listening at `dir/host.sock`, for anyone.
fn listen_in(dir: &std::path::Path) -> UnixListener {
    let socket = dir.join("host.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

/// Whether a connection waits at `listener` (answered, so the probe ends).
fn reached(listener: &UnixListener) -> bool {
    match listener.accept() {
        Ok((mut stream, _)) => {
            let _ = stream.write_all(b"reached\n");
            true
        }
        Err(e) => {
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
            false
        }
    }
}

#[tokio::test]
async fn a_fresh_workspace_links_over_its_socket_and_a_lent_directory_reaches_no_host_socket() {
    let srv = TestServer::with_docker_mode(Mode::Gvisor).await;

    let (fresh, fresh_path) = srv.session().await;
    assert_eq!(runtime_of(&fresh), sandboxd::sandbox::runsc::LINKED);
    let ran = run(&srv.client, &fresh, SUPERVISOR, 10_000).await;
    assert!(ran.stdout().contains(" --connect "), "{}", ran.stdout());
    // What that runtime opens, shown by the probe: a socket of the host in
    // the workspace is reached (only root can put one there: it lies in
    // the service's private state directory).
    let listener = listen_in(&fresh_path);
    let ran = run(&srv.client, &fresh, PROBE, 20_000).await;
    assert_eq!(ran.stdout(), "connected\n", "{}", ran.stderr());
    assert!(reached(&listener));

    // A program of the host listens in a directory lent to a session.
    let dir = srv.allowed_root.path().join("proj");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let listener = listen_in(&dir);
    let lent = srv.lend(&dir).await.session_id;
    assert_eq!(runtime_of(&lent), sandboxd::sandbox::runsc::NAME);
    let ran = run(&srv.client, &lent, SUPERVISOR, 10_000).await;
    assert!(!ran.stdout().contains("--connect"), "{}", ran.stdout());
    let ran = run(&srv.client, &lent, PROBE, 20_000).await;
    assert!(!ran.stdout().contains("connected"), "{}", ran.stdout());
    assert_ne!(ran.exit.exit_code, 0, "{}", ran.stderr());
    assert!(ran.stderr().contains("Error"), "{}", ran.stderr());
    assert!(
        !reached(&listener),
        "a command reached a socket of the host in its lent directory"
    );
    srv.stop().await;
}
