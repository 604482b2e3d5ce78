//! Where workspaces live on the host, and how each one is pinned for the
//! containers that mount it.
//!
//! Everything lives in the service's private state directory
//! ([`StateDir`]). Inside it:
//! - `workspaces/<id>`: the mount point of a fresh workspace. When the
//!   service may mount (it runs as root), each fresh workspace is its own
//!   ext4 filesystem in a sparse file `volumes/<id>.img`, mounted
//!   `nosuid,nodev`: its size and inode count are the session's disk quota,
//!   and removing it is an unmount, however deep the tree a command built.
//! - `pins/<id>`: an existing directory lent to a session, pinned by a bind
//!   mount made from the directory fd the file tools hold (`open_tree`), so
//!   renaming or swapping any component of the original path later changes
//!   nothing the engine mounts. Also `nosuid,nodev`. A warm container
//!   for a lent directory binds `pins/<id>` before it is lent one: there
//!   the directory is first a slot (a shared mount of itself) and the pin
//!   is mounted on top of it, reaching the container by propagation. When root owns the
//!   directory (a CI checkout), the pin is id-mapped (`idmap`): commands,
//!   which run as an unprivileged user, see root's files as their own, and
//!   what they create is stored as root's, so the checkout keeps one owner.
//! - `run/<id>`: the socket directory of a session's supervisor.
//! - `history/<id>`: the kept contents of a session's checkpoints and of
//!   its starting point, out of reach of its commands.
//! - `closing/<id>`: the mark of a volume whose session closed and which
//!   is being removed (after the close answered): a service that stops
//!   before it is gone removes it at its next start, whatever it holds.
//! - `quarantine/`: workspaces with something in them that no session owns
//!   any more (a session whose record was lost or could not come back):
//!   moved here, never deleted, for the operator to look at and empty.
//!
//! The engine is only ever handed the mount point, a path whose every
//! component belongs to the service, and [`Volume::verify`] checks before
//! every container start that it still holds the session's directory (same
//! device and inode): if it does not, the session fails with a clear reason;
//! it never mounts something else.
//!
//! Without root, nothing is mounted: a fresh workspace is a plain
//! directory `workspaces/<id>` (no disk quota), and a lent directory is
//! bound by the engine from its own path, checked to be the very directory
//! the service opened just before each container start and, from inside
//! the container, before any command runs there (`bound`).
//!
//! One job per file: this one holds the volumes, their paths and removal;
//! `fresh` makes and remounts a session's own filesystem; `pin` pins a lent
//! directory (`bound` where the service cannot mount) (`idmap` maps root's checkout for its commands, `hardlinks`
//! refuses a tree linked from outside); `slot` lends one to a container
//! that already runs; `sweep` removes or quarantines what no session owns.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::state::{Dir, StateDir};
use crate::workspace::remove::remove_tree_at;

mod attrs;
mod bound;
mod found;
mod fresh;
mod hardlinks;
mod idmap;
mod pin;
mod slot;

pub use found::handle_of;
pub use slot::Lendable;
mod sweep;
#[cfg(test)]
mod testing;

/// Why a volume or the state directory could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory cannot be used.
    #[error(transparent)]
    State(#[from] crate::state::Error),
    /// A fresh workspace volume could not be made.
    #[error("cannot create a workspace volume: {0}")]
    Create(String),
    /// An existing directory could not be pinned for the engine.
    #[error("cannot pin the workspace for its containers: {0}")]
    Pin(io::Error),
    /// The directory is (or could be made, by its own commands) reachable
    /// by other users of the host, so a file a command marks set-id there
    /// could be run by them.
    #[error("{path} is reachable by other users of the host")]
    NotPrivate {
        /// The directory.
        path: PathBuf,
    },
    /// A file in the directory is also linked from outside it: a command
    /// writing it, or marking it set-id, would change a file elsewhere on
    /// the host.
    #[error("{path} is hard-linked from outside the directory ({links} links)")]
    LinkedOutside {
        /// The file, relative to the directory.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// The directory is, holds or lies inside a sandboxd state directory
    /// (see [`crate::state::MARKER`]).
    #[error("{path} is sandboxd's state")]
    HoldsState {
        /// Where the state directory is.
        path: PathBuf,
    },
    /// The directory could not be checked for such files.
    #[error("cannot check {path} for files linked from outside it: {why}")]
    Unchecked {
        /// Where the check stopped.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Without root the engine binds the directory by its path, and a
    /// directory above it could be changed by another user of the host.
    #[error("{ancestor}, above {path}, could be changed by another user of the host")]
    Exposed {
        /// The directory lent.
        path: PathBuf,
        /// The directory above it that others could change.
        ancestor: PathBuf,
    },
    /// The workspace's mount no longer holds the session's directory.
    #[error("the workspace is gone: {0}")]
    Gone(String),
}

/// A session's disk quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Bytes the workspace may hold.
    pub disk_bytes: u64,
    /// Files and directories the workspace may hold.
    pub inodes: u64,
}

/// Smallest quota a volume is made with: ext4 needs room for its own
/// metadata, and a workspace needs room for a checkout.
pub const MIN_DISK_BYTES: u64 = 16 << 20;
/// Fewest inodes a volume is made with.
pub const MIN_INODES: u64 = 1024;

/// The workspace volumes of one service, in its state directory.
#[derive(Debug)]
pub struct Volumes {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    workspaces: Dir,
    images: Dir,
    pins: Dir,
    run: Dir,
    history: Dir,
    quarantine: Dir,
    /// One empty file per volume whose session closed before the volume
    /// was removed: the sweep removes such a volume, never quarantines it.
    closing: Dir,
    /// The service may mount: fresh workspaces get their own filesystem
    /// (with a quota) and existing directories can be pinned.
    can_mount: bool,
}

/// What kind of volume, and how it goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Its own filesystem in `volumes/<id>.img`, mounted at `workspaces/<id>`.
    Filesystem,
    /// A plain directory `workspaces/<id>` (the service cannot mount).
    Directory,
    /// An existing directory bind-mounted at `pins/<id>`.
    Pin,
    /// An existing directory the engine binds by its own path (the service
    /// cannot mount): checked before and after every container start.
    Bound,
}

/// One session's workspace as the engine sees it.
#[derive(Debug)]
pub struct Volume {
    inner: Arc<Inner>,
    id: String,
    kind: Kind,
    path: PathBuf,
    identity: (u64, u64),
    quota: Option<Quota>,
    /// What the session must tell its callers about this volume.
    note: Option<String>,
    /// What a lent directory's pin is made from at each container start.
    source: Option<Arc<pin::Source>>,
    /// The slot's own mount, while a pin lies on it for a warm container
    /// (see [`Volume::settle`]).
    slot: Option<OwnedFd>,
}

impl Volumes {
    /// The volumes under `state`; `can_mount` when the service runs as root.
    /// Blocking: a root service first installs mkfs.ext4 and mount if the
    /// host lacks them (see [`crate::provision`]).
    pub fn open(state: &StateDir) -> Result<Volumes, Error> {
        let can_mount = rustix::process::geteuid().is_root();
        if can_mount {
            crate::provision::ensure(&[crate::provision::MKFS_EXT4, crate::provision::MOUNT])
                .map_err(|e| Error::Create(e.to_string()))?;
        }
        Ok(Volumes {
            inner: Arc::new(Inner {
                workspaces: state.subdir("workspaces")?,
                images: state.subdir("volumes")?,
                pins: state.subdir("pins")?,
                run: state.subdir("run")?,
                history: state.subdir("history")?,
                quarantine: state.subdir("quarantine")?,
                closing: state.subdir("closing")?,
                can_mount,
            }),
        })
    }

    /// Whether fresh workspaces get a disk quota here.
    pub fn enforces_quota(&self) -> bool {
        self.inner.can_mount
    }

    /// The directory under which each session's supervisor socket lives.
    pub fn socket_root(&self) -> &Path {
        &self.inner.run.path
    }

    /// The history directory of session `id`, empty and made now (mode
    /// 0700, the service's own), opened for reading; removed with the
    /// session's volume. Blocking.
    pub fn history_dir(&self, id: &str) -> io::Result<OwnedFd> {
        check_id(id).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let history = &self.inner.history.fd;
        // Whatever an earlier session of this id left there is not ours.
        match remove_tree_at(history, std::ffi::OsStr::new(id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        rustix::fs::mkdirat(history, id, Mode::from_raw_mode(0o700))?;
        Ok(rustix::fs::openat(
            history,
            id,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// The history directory of session `id` as an earlier instance of the
    /// service left it (made empty if there is none), for a session that
    /// comes back after a restart. Blocking.
    pub fn history_dir_again(&self, id: &str) -> io::Result<OwnedFd> {
        check_id(id).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let history = &self.inner.history.fd;
        match rustix::fs::mkdirat(history, id, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = rustix::fs::openat(
            history,
            id,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        if rustix::fs::fstat(&fd)?.st_uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::other(
                "the history directory is not the service's own",
            ));
        }
        Ok(fd)
    }
}

/// Unmounts whatever is mounted at `path`, every layer (a pin on its
/// slot), each detached so a straggler holding it open cannot make this
/// fail; never through a symlink. Done when nothing is mounted there.
fn unmount(path: &Path) -> io::Result<()> {
    // A pin on a slot is two layers; more than a few is not ours.
    for _ in 0..8 {
        match rustix::mount::unmount(
            path,
            rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
        ) {
            Ok(()) => {}
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(format!(
        "{}: still mounted after eight unmounts",
        path.display()
    )))
}

/// Ids name files in the state directory: plain names only.
fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::Create(format!("{id:?} is not a valid volume id")));
    }
    Ok(())
}

/// `/proc/self/fd/N` for an fd of this process.
fn proc_fd_path(fd: &impl AsFd) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

impl Volume {
    /// The path to hand to the engine.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The quota the volume enforces, if it enforces one.
    pub fn quota(&self) -> Option<Quota> {
        self.quota
    }

    /// What a session over this volume must tell its callers, in plain
    /// words: that a root-owned checkout could not be id-mapped, so its
    /// commands cannot write root's files.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Whether the volume is the session's own workspace (removed with
    /// it), rather than a directory lent to it.
    pub fn owns_workspace(&self) -> bool {
        !matches!(self.kind, Kind::Pin | Kind::Bound)
    }

    /// Whether the engine binds the workspace by a path the service does
    /// not control (a lent directory, where the service cannot mount): the
    /// container's `/workspace` must then be checked from inside before any
    /// command runs there.
    pub fn bound_by_path(&self) -> bool {
        self.kind == Kind::Bound
    }

    /// Device and inode of the workspace root.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    fn dir(&self) -> &Dir {
        match self.kind {
            Kind::Filesystem | Kind::Directory => &self.inner.workspaces,
            Kind::Pin | Kind::Bound => &self.inner.pins,
        }
    }

    fn open_root(&self) -> io::Result<OwnedFd> {
        if self.kind == Kind::Bound {
            return bound::open(&self.path);
        }
        Ok(rustix::fs::openat(
            &self.dir().fd,
            self.id.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    fn check_identity(&self) -> io::Result<()> {
        let st = rustix::fs::fstat(self.open_root()?)?;
        if (st.st_dev, st.st_ino) != self.identity {
            return Err(io::Error::other(
                "the mount point does not hold the session's directory",
            ));
        }
        if st.st_nlink == 0 {
            return Err(io::Error::other("the directory was removed"));
        }
        Ok(())
    }

    /// Checks, right before a container is started over it, that the mount
    /// point still holds the session's directory and that the directory
    /// still exists. Blocking (one open and one stat).
    pub fn verify(&self) -> Result<(), Error> {
        self.check_identity()
            .map_err(|e| Error::Gone(format!("{}: {e}", self.path.display())))
    }

    /// Marks the volume as its session's, closed: from now on it is
    /// removed, by [`Volume::remove`] or, if the service stops first, by
    /// the sweep at its next start (never quarantined). Blocking (one
    /// empty file made).
    pub fn mark_closed(&self) -> io::Result<()> {
        rustix::fs::openat(
            &self.inner.closing.fd,
            self.id.as_str(),
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(())
    }

    /// Unmounts and removes the volume: for a fresh workspace, everything
    /// in it; for a pin, only the pin (the lent directory stays). The
    /// session's history goes with it, then its closing mark. Blocking.
    pub fn remove(&self) -> io::Result<()> {
        self.remove_parts()?;
        match rustix::fs::unlinkat(&self.inner.closing.fd, self.id.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn remove_parts(&self) -> io::Result<()> {
        match remove_tree_at(&self.inner.history.fd, std::ffi::OsStr::new(&self.id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        if self.kind == Kind::Bound {
            // Nothing of the service's own was made for it.
            return Ok(());
        }
        let dir = self.dir();
        if matches!(self.kind, Kind::Filesystem | Kind::Pin) {
            // Detached, so a straggler holding it open cannot make this
            // fail; the filesystem goes when its last user does.
            unmount(&dir.path.join(&self.id))?;
        }
        if self.kind == Kind::Filesystem {
            match rustix::fs::unlinkat(
                &self.inner.images.fd,
                format!("{}.img", self.id).as_str(),
                AtFlags::empty(),
            ) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match self.kind {
            // Empty once unmounted; anything else there (a workspace made
            // while the service could not mount) is removed without
            // recursion.
            Kind::Filesystem | Kind::Directory => {
                match remove_tree_at(&dir.fd, std::ffi::OsStr::new(&self.id)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
                    _ => Ok(()),
                }
            }
            Kind::Pin | Kind::Bound => {
                match rustix::fs::unlinkat(&dir.fd, self.id.as_str(), AtFlags::REMOVEDIR) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Lets go of the volume and keeps everything in it: the service
    /// stops, and the session comes back at its next start
    /// ([`Volumes::reopen_fresh`], [`Volumes::repin`]). A fresh
    /// workspace's filesystem is unmounted, and so is anything still
    /// mounted at a pin: nothing of a user's directory stays where a
    /// removal of the state directory would reach it. The next start finds
    /// the directory by its file handle ([`Volumes::found_path`]).
    /// Blocking.
    pub fn release(&self) -> io::Result<()> {
        if matches!(self.kind, Kind::Filesystem | Kind::Pin) {
            unmount(&self.path)?;
        }
        Ok(())
    }

    /// What mounts a lent directory's pin for each container start and
    /// takes it away after (see [`crate::sandbox::WorkspaceMount`]); `None`
    /// for a volume that is always in place.
    pub fn engine_mount(&self) -> Option<Arc<dyn crate::sandbox::WorkspaceMount>> {
        let source = self.source.as_ref()?;
        Some(Arc::new(pin::PinMount {
            inner: Arc::clone(&self.inner),
            id: self.id.clone(),
            identity: self.identity,
            source: Arc::clone(source),
        }))
    }

    /// Takes a pin lent on a slot off the host, once the warm container
    /// binding the slot has confirmed it: the slot is made private first,
    /// so that unmounting it and the pin on it reaches no container, and
    /// the container keeps both. From then on the pin is mounted only
    /// for container starts, as a cold one. Blocking.
    pub fn settle(&mut self) -> io::Result<()> {
        let Some(slot) = self.slot.take() else {
            return Ok(());
        };
        rustix::mount::mount_change(
            proc_fd_path(&slot),
            rustix::mount::MountPropagationFlags::PRIVATE,
        )?;
        drop(slot);
        unmount(&self.path)
    }

    /// Best-effort removal on an error path.
    fn discard(&self) {
        if let Err(e) = self.remove() {
            tracing::warn!(volume = %self.id, error = %e, "cannot remove a half-made workspace");
        }
    }
}
