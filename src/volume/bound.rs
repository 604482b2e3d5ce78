//! A lent directory the engine binds by its own path, for a service that
//! cannot mount (it does not run as root). Nothing of the service's own
//! stands between the path and the directory, so the path is trusted
//! nowhere: it must resolve, without a symlink anywhere, to the very
//! directory the service opened (device and inode) just before each
//! container start, and the supervisor checks the container's
//! `/workspace` against the same identity before any command runs there
//! (see `sandbox::Sandbox::ensure`). Binding it `nosuid,nodev` is not in
//! the service's hands; the directory must lie under one closed to other
//! users of the host (checked by the caller), so a set-id file a command
//! makes there reaches nobody else.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::{Kind, Volume, Volumes};

impl Volumes {
    /// The volume of the lent directory at `host` (canonical, already
    /// checked private and free of the service's state and of outside
    /// links), whose device and inode are `identity`. Makes nothing.
    pub(super) fn bound(&self, id: &str, host: &Path, identity: (u64, u64)) -> Volume {
        tracing::info!(
            volume = %id,
            path = %host.display(),
            "lent directory bound by the engine from its path (the service cannot mount)"
        );
        Volume {
            inner: Arc::clone(&self.inner),
            id: id.to_string(),
            kind: Kind::Bound,
            path: host.to_path_buf(),
            identity,
            quota: None,
            note: Some(format!(
                "this service runs without root, so {} is bound into the sandbox by the container \
                 engine from its path: the service checks that the path still holds this very \
                 directory before each container starts, and from inside the container before any \
                 command runs; it is not mounted nosuid,nodev, so it must stay under a directory \
                 closed to other users",
                host.display()
            )),
        }
    }
}

/// Opens the directory at `path` with no symlink followed anywhere on the
/// way (a swapped ancestor is refused, not followed).
pub(super) fn open(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?)
}
