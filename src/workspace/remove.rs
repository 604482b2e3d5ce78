//! Removing trees (interim: replaced by the iterative implementation).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Removes `name` in `dir` and everything beneath it.
pub fn remove_tree_at(dir: &OwnedFd, name: &str) -> io::Result<()> {
    let path = format!("/proc/self/fd/{}/{name}", dir.as_raw_fd());
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
        Ok(_) => std::fs::remove_file(&path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
