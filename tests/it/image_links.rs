//! An image whose paths the sandbox mounts on (`/workspace`, the
//! supervisor's `/.sandboxd/...`, `/tmp`, a declared VOLUME) or a
//! directory above one is a symlink, or not a directory, opens no session:
//! the engine would follow the link and make the supervisor's entries, as
//! root, in the user's directory, and the supervisor's binary and socket
//! would lie under the command's reach. Nothing is written into a lent
//! directory, and nothing is left behind.

use std::path::Path;

use crate::common::{self, TestServer, reason};
use sandboxd::pb;

/// An image of a static busybox whose root also holds `extra` (made by a
/// shell script in the root), imported as `name`.
fn image(name: &str, extra: &str) {
    common::prepare_host();
    let root = tempfile::tempdir().unwrap();
    for dir in ["bin", "proc", "dev", "sys", "etc"] {
        std::fs::create_dir(root.path().join(dir)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.path().join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", root.path().join("bin/sh")).unwrap();
    let made = std::process::Command::new("sh")
        .arg("-c")
        .arg(extra)
        .current_dir(root.path())
        .status()
        .unwrap();
    assert!(made.success(), "{extra}");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | docker import - {name} >/dev/null",
            root.path().display()
        ))
        .status()
        .unwrap();
    assert!(status.success(), "docker import failed");
}

/// Removes the test's images when it ends, also when it fails.
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = std::process::Command::new("docker")
                .args(["image", "rm", "-f", name])
                .output();
        }
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_image_with_a_link_at_a_mount_target_opens_no_session_and_writes_nothing() {
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let cases = [
        (
            "sandboxd-over-workspace",
            "ln -s /workspace .sandboxd",
            "/.sandboxd",
        ),
        (
            "workspace-elsewhere",
            "mkdir -p srv && ln -s /srv workspace",
            "/workspace",
        ),
        ("tmp-over-workspace", "ln -s /workspace tmp", "/tmp"),
        (
            "run-over-workspace",
            "mkdir .sandboxd && ln -s /workspace .sandboxd/run",
            "/.sandboxd/run",
        ),
        ("sandboxd-a-file", "echo x > .sandboxd", "/.sandboxd"),
        (
            "binary-a-link",
            "mkdir .sandboxd && ln -s /workspace/x .sandboxd/sandboxd",
            "/.sandboxd/sandboxd",
        ),
    ];
    let names: Vec<String> = cases
        .iter()
        .map(|(n, _, _)| format!("sandboxd-test-link-{n}:{tag}"))
        .collect();
    let _images = Images(names.clone());
    for ((_, extra, _), name) in cases.iter().zip(&names) {
        image(name, extra);
    }
    let srv = TestServer::with_docker_mode_and(common::Mode::Supervisor, |c| {
        c.sandbox.allowed_images = names.clone();
    })
    .await;
    let lent = srv.allowed_root.path().join("repo");
    std::fs::create_dir(&lent).unwrap();
    std::fs::write(lent.join("keep.txt"), "mine\n").unwrap();
    for ((_, _, path), name) in cases.iter().zip(&names) {
        for workspace_path in [lent.display().to_string(), String::new()] {
            let refused = srv
                .client
                .clone()
                .create_session(pb::CreateSessionRequest {
                    image: name.clone(),
                    workspace_path: workspace_path.clone(),
                    ..Default::default()
                })
                .await
                .expect_err(name);
            assert_eq!(reason(&refused), "IMAGE_NOT_ALLOWED", "{name}: {refused:?}");
            let message = refused.message();
            assert!(
                message.contains(&format!("its {path} is ")),
                "{name}: {message}"
            );
            assert_eq!(
                entries(&lent),
                vec!["keep.txt".to_string()],
                "{name} ({workspace_path:?}): something was written into the lent directory"
            );
            assert!(
                srv.containers().is_empty(),
                "{name}: {:?}",
                srv.containers()
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(lent.join("keep.txt")).unwrap(),
        "mine\n"
    );
    let listed = srv
        .client
        .clone()
        .list_sessions(pb::ListSessionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sessions.is_empty(), "{listed:?}");
    srv.stop().await;
}
