//! What a dead private service (an `mcp` one, killed) left is swept
//! without ever entering a lent directory: its pins, bind mounts of
//! directories that may sit on the very filesystem of the state directory,
//! are unmounted and removed first.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use sandboxd::sandbox::docker::DockerRuntime;

fn mount(args: &[&str]) {
    let out = Command::new("mount").args(args).output().unwrap();
    assert!(out.status.success(), "mount {args:?}: {out:?}");
}

/// Unmounts whatever the test left mounted under a directory, also when an
/// assertion fails.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        crate::common::unmount_under(&self.0);
    }
}

fn lent_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn sweeping_a_dead_private_service_never_enters_its_pins() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // The lent directory is on the same filesystem as the state directory.
    let lent = base.path().join("lent");
    std::fs::create_dir_all(lent.join("src")).unwrap();
    std::fs::write(lent.join("keep.txt"), "mine\n").unwrap();
    std::fs::write(lent.join("src/main.rs"), "fn main() {}\n").unwrap();
    let parent = base.path().join("mcp");
    let _unmount = Unmount(parent.clone());
    // A dead service's home: its state directory with pins left mounted,
    // one once and one twice over (stacked), and nothing holding its lock.
    let home = parent.join("sandboxd-mcp-dead");
    let state = home.join("state");
    sandboxd::state::StateDir::open(&home).unwrap();
    let state_dir = sandboxd::state::StateDir::open(&state).unwrap();
    let pins = state_dir.subdir("pins").unwrap();
    for (pin, times) in [("once", 1), ("stacked", 2)] {
        let at = pins.path.join(pin);
        std::fs::create_dir(&at).unwrap();
        for _ in 0..times {
            mount(&["--bind", lent.to_str().unwrap(), at.to_str().unwrap()]);
        }
        assert_eq!(lent_files(&at), ["keep.txt", "src"]);
    }
    drop(state_dir);
    let docker = Arc::new(DockerRuntime::new(None));
    let swept = sandboxd::local::sweep_dead(&parent, docker).await;
    assert_eq!(swept, ["sandboxd-mcp-dead"]);
    assert!(!home.exists(), "the dead service's state is still there");
    assert_eq!(lent_files(&lent), ["keep.txt", "src"]);
    assert_eq!(std::fs::read(lent.join("keep.txt")).unwrap(), b"mine\n");
    assert_eq!(
        std::fs::read(lent.join("src/main.rs")).unwrap(),
        b"fn main() {}\n"
    );
    assert!(
        crate::common::mounts_under(base.path()).is_empty(),
        "a pin is still mounted"
    );
}
