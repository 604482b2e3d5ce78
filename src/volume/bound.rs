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

use super::{Error, Kind, Volume, Volumes};

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
            source: None,
            slot: None,
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

/// Refuses `path` unless no user but root and `owner` could change what
/// it names: every directory from `/` down to its parent belongs to root
/// or `owner`, and is writable by nobody else (a sticky directory of
/// theirs, such as /tmp, lets nobody else rename what is not theirs).
/// The engine resolves the path itself, so another user able to rename
/// a directory above it could put anything in its place.
pub(super) fn held(path: &Path, owner: u32) -> Result<(), Error> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let pin = |e: rustix::io::Errno| Error::Pin(e.into());
    let mut dir = rustix::fs::open("/", flags, Mode::empty()).map_err(pin)?;
    let mut at = std::path::PathBuf::from("/");
    let names: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((_, above)) = names.split_last() else {
        return Ok(());
    };
    for name in std::iter::once(None).chain(above.iter().map(Some)) {
        if let Some(name) = name {
            dir = rustix::fs::openat(&dir, *name, flags, Mode::empty()).map_err(pin)?;
            at.push(name);
        }
        let st = rustix::fs::fstat(&dir).map_err(pin)?;
        let theirs = st.st_uid == 0 || st.st_uid == owner;
        let sticky = st.st_mode & 0o1000 != 0;
        if !theirs || (st.st_mode & 0o022 != 0 && !sticky) {
            return Err(Error::Exposed {
                path: path.to_path_buf(),
                ancestor: at,
            });
        }
    }
    Ok(())
}
