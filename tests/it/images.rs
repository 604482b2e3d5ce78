//! The supervisor needs nothing from the image but `/bin/sh`: commands run
//! in an image holding only a static busybox (no libc, no coreutils).

use crate::common;
use crate::common::{TestServer, run};
use sandboxd::pb;

const IMAGE: &str = "sandboxd-test-nolibc:1";

/// Builds the image once from the host's static busybox (Debian's
/// busybox-static, which `prepare_host` installs when missing).
fn nolibc_image() {
    common::prepare_host();
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .unwrap();
    if present.status.success() {
        return;
    }
    let busybox = std::path::Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "this test needs a static busybox: apt-get install busybox-static"
    );
    let root = tempfile::tempdir().unwrap();
    for dir in ["bin", "tmp", "workspace", "proc", "dev", "sys"] {
        std::fs::create_dir(root.path().join(dir)).unwrap();
    }
    std::fs::copy(busybox, root.path().join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", root.path().join("bin/sh")).unwrap();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | docker import - {IMAGE} >/dev/null",
            root.path().display()
        ))
        .status()
        .unwrap();
    assert!(status.success(), "docker import failed");
}

#[tokio::test]
async fn the_supervisor_runs_commands_in_an_image_without_libc() {
    common::prepare_host();
    nolibc_image();
    let srv = TestServer::with_docker_mode_and(common::Mode::Supervisor, |c| {
        c.sandbox.allowed_images = vec![IMAGE.to_string()];
    })
    .await;
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            image: IMAGE.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(s.sandbox_status.is_empty(), "{}", s.sandbox_status);
    let ran = run(
        &srv.client,
        &s.session_id,
        "echo hello > made.txt; read x < made.txt; echo \"$x\"; busybox ls /lib 2>&1; busybox tr '\\0' ' ' < /proc/$PPID/cmdline",
        20_000,
    )
    .await;
    let out = ran.stdout();
    assert!(out.starts_with("hello\n"), "{out}");
    assert!(
        out.contains("No such file or directory"),
        "the image has no /lib: {out}"
    );
    assert!(
        out.contains("/.sandboxd/sandboxd supervise"),
        "commands ran under the supervisor: {out}"
    );
    // The kill ladder works there too.
    let ran = run(
        &srv.client,
        &s.session_id,
        "trap '' TERM; busybox sleep 1000",
        1000,
    )
    .await;
    assert!(ran.exit.timed_out);
    assert_eq!(ran.exit.killed_by(), pb::KilledBy::ProcessGroupKill);
    srv.stop().await;
}

/// The default image has a stable name that follows the recipe's build, so
/// nobody copies a hash: `sandboxd-default:latest` is the very image the
/// hash tag names, and a session may ask for it by that name.
#[tokio::test]
async fn the_default_image_answers_to_a_stable_name() {
    let srv = TestServer::with_docker().await;
    let id = |name: &str| {
        let out = std::process::Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let hashed = sandboxd::sandbox::image::default_image();
    assert_eq!(id("sandboxd-default:latest"), id(&hashed));
    let s = srv
        .client
        .clone()
        .create_session(pb::CreateSessionRequest {
            image: "sandboxd-default:latest".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.image, hashed, "the alias names the default image");
    let ran = run(
        &srv.client,
        &s.session_id,
        "python3 -c 'print(6*7)'",
        20_000,
    )
    .await;
    assert_eq!(ran.stdout(), "42\n", "{}", ran.stderr());
    srv.stop().await;
}
