//! A lent directory that was moved while the service was down (it, or an
//! ancestor, renamed, and something else put at its old path, as another
//! session's command over an ancestor can do) comes back at a restart
//! where the running service had it: found by the file handle its record
//! keeps, never through the recorded path, after a kill, a clean stop or a
//! restart of the host alike. What now lies at the old path is never taken
//! for it, and a directory removed and made again is not it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sandboxd::pb::{self, sandbox_client::SandboxClient};

use crate::restart_deep::{client, serve};
use crate::served::Unmount;

/// Starts the service again over `state`; returns it, a client, and the
/// session `id` as it lists it, if it came back.
async fn again(
    roots: &Path,
    state: &Path,
    id: &str,
) -> (
    Serving,
    SandboxClient<tonic::transport::Channel>,
    Option<pb::Session>,
) {
    let (served, port) = serve(roots, state);
    let served = Serving(served);
    let mut c = client(port).await;
    let back = listed(&mut c)
        .await
        .into_iter()
        .find(|s| s.session_id == id);
    (served, c, back)
}

async fn listed(c: &mut SandboxClient<tonic::transport::Channel>) -> Vec<pb::Session> {
    c.list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions
}

async fn read(c: &mut SandboxClient<tonic::transport::Channel>, id: &str, path: &str) -> String {
    c.read_file(crate::common::read_req(id, path))
        .await
        .unwrap()
        .into_inner()
        .content
}

/// A service that is killed if the test ends before it stops it.
struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stop(Serving(child): &mut Serving, signal: rustix::process::Signal) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        signal,
    )
    .unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn a_lent_directory_moved_while_the_service_was_down_comes_back_by_its_handle() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    std::fs::create_dir_all(roots.join("x/a")).unwrap();
    std::fs::write(roots.join("x/a/f"), "mine\n").unwrap();
    // What the old paths will lead to: a directory the session was never
    // lent.
    std::fs::create_dir_all(roots.join("decoy/a")).unwrap();
    std::fs::write(roots.join("decoy/a/f"), "decoy\n").unwrap();

    let (served, port) = serve(&roots, &state);
    let mut served = Serving(served);
    let mut c = client(port).await;
    let id = c
        .create_session(pb::CreateSessionRequest {
            workspace_path: roots.join("x/a").display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session_id;

    // Killed; then the ancestor is moved and a link put in its place.
    stop(&mut served, rustix::process::Signal::KILL);
    std::fs::rename(roots.join("x"), roots.join("x2")).unwrap();
    std::os::unix::fs::symlink(roots.join("decoy"), roots.join("x")).unwrap();
    let (mut served, mut c, back) = again(&roots, &state, &id).await;
    let back = back.expect("the session came back after the kill");
    assert_eq!(Path::new(&back.workspace_path), roots.join("x2/a"));
    assert_eq!(read(&mut c, &id, "f").await, "mine\n");
    c.create_file(pb::CreateFileRequest {
        session_id: id.clone(),
        path: "new.txt".into(),
        content: "after\n".into(),
    })
    .await
    .unwrap();
    assert!(roots.join("x2/a/new.txt").exists());
    assert!(!roots.join("decoy/a/new.txt").exists());

    // Stopped cleanly; the directory itself is moved and another made at
    // the path it had.
    stop(&mut served, rustix::process::Signal::TERM);
    std::fs::rename(roots.join("x2/a"), roots.join("x2/b")).unwrap();
    std::fs::create_dir(roots.join("x2/a")).unwrap();
    std::fs::write(roots.join("x2/a/f"), "impostor\n").unwrap();
    let (mut served, mut c, back) = again(&roots, &state, &id).await;
    let back = back.expect("the session came back after a clean stop");
    assert_eq!(Path::new(&back.workspace_path), roots.join("x2/b"));
    assert_eq!(read(&mut c, &id, "f").await, "mine\n");

    // The host restarts (no mount survives), and the directory moves
    // again, an impostor put where it was: the directory is found by its
    // file handle, and what lies at its old path is never taken for it.
    stop(&mut served, rustix::process::Signal::KILL);
    crate::common::unmount_under(&state);
    std::fs::rename(roots.join("x2/b"), roots.join("x2/c")).unwrap();
    std::fs::create_dir(roots.join("x2/b")).unwrap();
    std::fs::write(roots.join("x2/b/f"), "impostor\n").unwrap();
    let (mut served, mut c, back) = again(&roots, &state, &id).await;
    let back = back.expect("the session came back after the host restarted");
    assert_eq!(Path::new(&back.workspace_path), roots.join("x2/c"));
    assert_eq!(read(&mut c, &id, "f").await, "mine\n");
    stop(&mut served, rustix::process::Signal::TERM);

    // Removed while the service was down and another directory made in its
    // place (the inode may even be reused): not brought back.
    std::fs::remove_dir_all(roots.join("x2/c")).unwrap();
    std::fs::create_dir(roots.join("x2/c")).unwrap();
    std::fs::write(roots.join("x2/c/f"), "new\n").unwrap();
    let (mut served, _, back) = again(&roots, &state, &id).await;
    assert!(
        back.is_none(),
        "a session came back over a directory it was not lent"
    );
    assert_eq!(
        std::fs::read_to_string(roots.join("x2/c/f")).unwrap(),
        "new\n"
    );
    stop(&mut served, rustix::process::Signal::TERM);
}
