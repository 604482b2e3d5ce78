//! What the volume tests share: a private state directory with its
//! volumes, mounts made with mount(8), and this process's view of them.

use std::path::{Path, PathBuf};

use super::{Volumes, unmount};
use crate::state::StateDir;

/// The volumes of a new state directory under `base`, which is closed to
/// others first (lent directories must lie under such a one).
pub(super) fn volumes_in(base: &Path) -> (StateDir, Volumes) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state = StateDir::open(&base.join("state")).unwrap();
    let volumes = Volumes::open(&state).unwrap();
    (state, volumes)
}

/// Refuses to go on unless the tests run as root (pins and slots mount).
pub(super) fn as_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "pins and slots mount: run the tests as root"
    );
}

/// Runs mount(8) with `args`; panics with its words if it fails.
pub(super) fn mount(args: &[&str]) {
    let out = std::process::Command::new("mount")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount {args:?}: {out:?}");
}

/// A test's own mount at a path, unmounted (every layer) also when an
/// assertion fails.
pub(super) struct Bound(pub(super) PathBuf);

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = unmount(&self.0);
    }
}

/// Every line of this process's mountinfo for a mount at `path`, lowest
/// first.
pub(super) fn mounts_at(path: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|line| line.split(' ').nth(4).is_some_and(|m| Path::new(m) == path))
        .map(str::to_string)
        .collect()
}

/// The options of the topmost mount at `path`.
pub(super) fn mount_options(path: &Path) -> String {
    let top = mounts_at(path);
    let top = top
        .last()
        .unwrap_or_else(|| panic!("nothing is mounted at {}", path.display()));
    top.split(' ').nth(5).unwrap().to_string()
}
