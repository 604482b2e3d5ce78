//! A restart brings back sessions over lent directories however deep their
//! trees, and checks them again: the hard-link check walks by descriptor.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use sandboxd::pb::{self, sandbox_client::SandboxClient};

use crate::common::{self, SANDBOXD};
use crate::served::Unmount;

/// A chain of `depth` directories under `top` (made by descriptor: its path
/// is longer than a path may be) with a file `f` at the bottom; returns
/// the bottom directory, open.
fn deep_tree(top: &Path, depth: usize) -> OwnedFd {
    std::fs::create_dir(top).unwrap();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(top, flags, Mode::empty()).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, "d", flags, Mode::empty()).unwrap();
    }
    let file = rustix::fs::openat(
        &fd,
        "f",
        OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&file, b"bottom\n").unwrap();
    fd
}

/// `serve` over `state` on a loopback port it picks, and that port.
pub(crate) fn serve(roots: &Path, state: &Path) -> (Child, u16) {
    let (child, addr) = common::spawn_listening(
        Command::new(SANDBOXD)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--pool-size", "0", "--no-token"])
            .args(["--docker-host", common::NO_DOCKER])
            .arg("--allow-root")
            .arg(roots)
            .arg("--state-dir")
            .arg(state)
            .stdout(Stdio::null()),
    );
    (child, addr.port())
}

pub(crate) async fn client(port: u16) -> SandboxClient<tonic::transport::Channel> {
    let addr = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut c) = SandboxClient::connect(addr.clone()).await
            && c.list_sessions(pb::ListSessionsRequest {}).await.is_ok()
        {
            return c;
        }
        assert!(Instant::now() < deadline, "the service did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A session over a 3,000-deep lent tree survives a kill -9 (it used to be
/// dropped: the check failed with "File name too long"); one whose tree
/// gained a link from outside while the service was down is not brought
/// back, and its files are untouched.
#[tokio::test]
async fn a_session_over_a_3000_deep_lent_tree_comes_back_after_a_kill() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = base.path().join("state");
    let _unmount = Unmount(state.clone());
    let roots = base.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let _kept = deep_tree(&roots.join("kept"), 3000);
    let linked = deep_tree(&roots.join("linked"), 3000);
    let (mut first, port) = serve(&roots, &state);
    let mut c = client(port).await;
    let open = |name: &str| {
        let req = pb::CreateSessionRequest {
            workspace_path: roots.join(name).display().to_string(),
            ..Default::default()
        };
        let mut c = c.clone();
        async move { c.create_session(req).await.unwrap().into_inner().session_id }
    };
    let kept = open("kept").await;
    let dropped = open("linked").await;
    first.kill().unwrap();
    first.wait().unwrap();
    // While the service is down, the bottom file gains a link outside.
    rustix::fs::linkat(
        &linked,
        "f",
        rustix::fs::CWD,
        base.path().join("outside"),
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    let (mut second, port) = serve(&roots, &state);
    c = client(port).await;
    let listed: Vec<String> = c
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    let _ = second.kill();
    let _ = second.wait();
    assert!(
        listed.contains(&kept),
        "the deep session was dropped: {listed:?}"
    );
    assert!(
        !listed.contains(&dropped),
        "a tree linked from outside came back"
    );
    assert_eq!(
        std::fs::read(base.path().join("outside")).unwrap(),
        b"bottom\n"
    );
    for tree in ["kept", "linked"] {
        crate::common::unmount_under(&state);
        assert!(
            std::process::Command::new("rm")
                .args(["-rf", "--one-file-system"])
                .arg(roots.join(tree))
                .status()
                .unwrap()
                .success()
        );
    }
}
