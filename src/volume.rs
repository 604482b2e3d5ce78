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
//!   nothing the engine mounts. Also `nosuid,nodev`. When root owns the
//!   directory (a CI checkout), the pin is id-mapped (`idmap`): commands,
//!   which run as an unprivileged user, see root's files as their own, and
//!   what they create is stored as root's, so the checkout keeps one owner.
//! - `run/<id>`: the socket directory of a session's supervisor.
//! - `history/<id>`: the kept contents of a session's checkpoints and of
//!   its starting point, out of reach of its commands.
//! - `quarantine/`: workspaces with something in them that no session owns
//!   any more (a session whose record was lost or could not come back):
//!   moved here, never deleted, for the operator to look at and empty.
//!
//! The engine is only ever handed the mount point, a path whose every
//! component belongs to the service, and [`Volume::verify`] checks before
//! every container start that it still holds the session's directory (same
//! device and inode): if it does not, the session fails with a clear reason;
//! it never mounts something else.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::state::{Dir, StateDir};
use crate::workspace::remove::remove_tree_at;

mod idmap;

use idmap::IdMap;

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
    /// Existing directories need the service to be able to mount.
    #[error("existing directories can only be lent to sessions when the service runs as root")]
    CannotPin,
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

    /// Makes a fresh, empty workspace `id` whose root is owned by `owner`:
    /// its own filesystem of `quota` when the service may mount, else a
    /// plain directory. Blocking.
    pub fn fresh(&self, id: &str, quota: Quota, owner: (u32, u32)) -> Result<Volume, Error> {
        check_id(id)?;
        // An inode table must fit in the filesystem: a small disk quota
        // holds at most one inode per 4 KiB (the default count is meant
        // for the default size).
        let quota = Quota {
            inodes: quota
                .inodes
                .min(quota.disk_bytes.max(MIN_DISK_BYTES) / 4096)
                .max(MIN_INODES),
            ..quota
        };
        let inner = &self.inner;
        let path = inner.workspaces.path.join(id);
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: if inner.can_mount {
                Kind::Filesystem
            } else {
                Kind::Directory
            },
            path,
            identity: (0, 0),
            quota: inner.can_mount.then_some(quota),
            note: None,
        };
        let create = |e: io::Error| Error::Create(e.to_string());
        rustix::fs::mkdirat(&inner.workspaces.fd, id, Mode::from_raw_mode(0o700))
            .map_err(|e| create(e.into()))?;
        // From here on, dropping `volume` on an error path cleans up.
        if volume.kind == Kind::Filesystem {
            let made = make_filesystem(inner, id, quota, owner);
            if let Err(e) = made {
                volume.discard();
                return Err(e);
            }
        }
        let root = match volume.open_root() {
            Ok(root) => root,
            Err(e) => {
                volume.discard();
                return Err(Error::Create(e.to_string()));
            }
        };
        let prepared = (|| -> io::Result<(u64, u64)> {
            if volume.kind == Kind::Filesystem {
                // The filesystem's own lost+found is noise in a checkout.
                match rustix::fs::unlinkat(&root, "lost+found", AtFlags::REMOVEDIR) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if rustix::process::geteuid().is_root() {
                rustix::fs::fchown(
                    &root,
                    Some(rustix::fs::Uid::from_raw(owner.0)),
                    Some(rustix::fs::Gid::from_raw(owner.1)),
                )?;
            }
            // Nobody but its owner (and root) may pass through the root.
            rustix::fs::fchmod(&root, Mode::from_raw_mode(0o700))?;
            let st = rustix::fs::fstat(&root)?;
            Ok((st.st_dev, st.st_ino))
        })();
        match prepared {
            Ok(identity) => {
                volume.identity = identity;
                Ok(volume)
            }
            Err(e) => {
                volume.discard();
                Err(Error::Create(e.to_string()))
            }
        }
    }

    /// The fresh workspace `id` an earlier instance of this service made
    /// (one whose session comes back after a restart), as it left it: still
    /// mounted where the service was killed, or mounted again from its
    /// volume file where the host restarted. Blocking.
    pub fn reopen_fresh(&self, id: &str, quota: Quota) -> Result<Volume, Error> {
        check_id(id)?;
        let inner = &self.inner;
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: if inner.can_mount {
                Kind::Filesystem
            } else {
                Kind::Directory
            },
            path: inner.workspaces.path.join(id),
            identity: (0, 0),
            quota: None,
            note: None,
        };
        let gone =
            |e: &dyn std::fmt::Display| Error::Gone(format!("{}: {e}", volume.path.display()));
        if volume.kind == Kind::Filesystem {
            if !volume.mount_again().map_err(|e| gone(&e))? {
                return Err(gone(&"its volume file is missing"));
            }
            // The filesystem was made to this quota and enforces it.
            volume.quota = Some(quota);
        }
        let st =
            rustix::fs::fstat(volume.open_root().map_err(|e| gone(&e))?).map_err(|e| gone(&e))?;
        volume.identity = (st.st_dev, st.st_ino);
        Ok(volume)
    }

    /// [`Volumes::pin`] for a session that comes back after a restart: a
    /// pin an earlier instance left for `id` is let go first, so the new one
    /// is made from the directory fd just opened and checked, never taken
    /// on trust. Blocking.
    pub fn repin(
        &self,
        id: &str,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
    ) -> Result<Volume, Error> {
        check_id(id)?;
        let pins = &self.inner.pins;
        unmount(&pins.path.join(id)).map_err(Error::Pin)?;
        match rustix::fs::unlinkat(&pins.fd, id, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(Error::Pin(e.into())),
        }
        self.pin(id, root, host, root_user, no_idmap)
    }

    /// Pins the existing directory whose fd (`O_PATH` is enough) the file
    /// tools hold, for session `id`: a bind mount of exactly that directory,
    /// `nosuid,nodev`, made from the fd (no path is resolved). Refuses a
    /// directory other users of the host could reach. Blocking.
    ///
    /// When root owns the directory, its commands run as `root_user` (uid,
    /// gid): the pin is then id-mapped, on-disk uid 0 to that uid and the
    /// directory's group to that gid, so they can work in it as in their
    /// own. Where that cannot be done (an old kernel, a filesystem without
    /// support) or must not be (`no_idmap` says why: a runtime it does not
    /// work under), the pin is a plain one, as without the map, and
    /// [`Volume::note`] says what that means for the session.
    pub fn pin(
        &self,
        id: &str,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
    ) -> Result<Volume, Error> {
        check_id(id)?;
        if !self.inner.can_mount {
            return Err(Error::CannotPin);
        }
        let st = rustix::fs::fstat(root).map_err(|e| Error::Pin(e.into()))?;
        // A set-id file a command makes in the directory lands on the host
        // with the directory owner's ids (root's, when id-mapped): only a
        // directory no other user can reach may be lent.
        if !private(host, st.st_uid).map_err(Error::Pin)? {
            return Err(Error::NotPrivate {
                path: host.to_path_buf(),
            });
        }
        // A service's state (its token, sockets, other sessions) is never
        // lent, whichever service it belongs to.
        if let Some(state) = host
            .ancestors()
            .find(|dir| dir.join(crate::state::MARKER).symlink_metadata().is_ok())
        {
            return Err(Error::HoldsState {
                path: state.to_path_buf(),
            });
        }
        // Privacy covers the directory's own files only: a file hard-linked
        // from elsewhere (a local `git clone`, `cp -al`) is the same file
        // there, where others may reach it. The same walk finds state below.
        linked_outside(root)?;
        let idmap = (st.st_uid == 0 && root_user.0 != 0).then_some(IdMap {
            uid: (0, root_user.0),
            gid: (st.st_gid, root_user.1),
        });
        let inner = &self.inner;
        let path = inner.pins.path.join(id);
        rustix::fs::mkdirat(&inner.pins.fd, id, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::Pin(e.into()))?;
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: Kind::Pin,
            path,
            identity: (st.st_dev, st.st_ino),
            quota: None,
            note: None,
        };
        let pinned = (|| -> io::Result<Option<io::Error>> {
            use rustix::mount::{MountFlags, MoveMountFlags, OpenTreeFlags};
            let tree = rustix::mount::open_tree(
                root,
                "",
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_EMPTY_PATH,
            )?;
            // Only a detached tree can be id-mapped; a failure leaves it as
            // it was, and the plain pin is still the right one to make.
            let unmapped = match (idmap, no_idmap) {
                (None, _) => None,
                (Some(_), Some(why)) => Some(io::Error::other(why)),
                (Some(map), None) => idmap::apply(&tree, map).err(),
            };
            rustix::mount::move_mount(
                &tree,
                "",
                &inner.pins.fd,
                id,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )?;
            // The tree fd names the new mount itself: no path is resolved.
            rustix::mount::mount_remount(
                proc_fd_path(&tree),
                MountFlags::BIND | MountFlags::NOSUID | MountFlags::NODEV,
                "",
            )?;
            Ok(unmapped)
        })();
        match pinned.and_then(|unmapped| volume.check_identity().map(|()| unmapped)) {
            Ok(None) => {
                if let Some(map) = idmap {
                    tracing::info!(
                        volume = %id,
                        path = %host.display(),
                        uid = map.uid.1,
                        gid = map.gid.1,
                        "root's checkout id-mapped for its commands"
                    );
                }
                Ok(volume)
            }
            Ok(Some(e)) => {
                tracing::warn!(
                    volume = %id,
                    path = %host.display(),
                    error = %e,
                    "cannot id-map a root-owned checkout: its commands run as uid {} and cannot write root's files in it",
                    root_user.0
                );
                volume.note = Some(format!(
                    "{} is owned by root and could not be id-mapped for the sandbox ({e}), so commands run as uid {} and cannot write what root owns there; lend a checkout owned by the user commands should run as, or keep it on a filesystem with id-mapped mounts (Linux 5.12+; ext4, xfs, btrfs, tmpfs)",
                    host.display(),
                    root_user.0
                ));
                Ok(volume)
            }
            Err(e) => {
                volume.discard();
                Err(Error::Pin(e))
            }
        }
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

    /// Removes every volume, pin and socket directory whose id is not in
    /// `live` (what an earlier instance of the service left behind).
    /// Containers that used them must be gone first. Blocking.
    pub fn sweep(&self, live: &[String]) -> usize {
        let mut removed = 0;
        let inner = &self.inner;
        let stale = |dir: &Dir| -> Vec<String> {
            let Ok((entries, _)) = crate::workspace::walk::list(&dir.fd, usize::MAX) else {
                return Vec::new();
            };
            entries
                .into_iter()
                .map(|e| e.name)
                .filter(|n| {
                    let id = n.strip_suffix(".img").unwrap_or(n);
                    !live.iter().any(|l| l == id)
                })
                .collect()
        };
        for (dir, kind) in [
            (&inner.workspaces, Kind::Filesystem),
            (&inner.pins, Kind::Pin),
        ] {
            for id in stale(dir) {
                let volume = Volume {
                    inner: Arc::clone(inner),
                    path: dir.path.join(&id),
                    id,
                    kind,
                    identity: (0, 0),
                    quota: None,
                    note: None,
                };
                // What someone may still want is moved aside, not deleted:
                // a volume the host no longer mounts is mounted to be seen.
                let holds_something = kind == Kind::Filesystem
                    && match inner.can_mount.then(|| volume.mount_again()) {
                        // A volume that cannot be looked into is kept.
                        Some(Err(_)) => true,
                        _ => !volume.is_empty(),
                    };
                if holds_something {
                    match volume.quarantine() {
                        Ok(to) => tracing::warn!(
                            volume = %volume.id,
                            to = %to.display(),
                            "a workspace no session owns was moved to the quarantine (empty it when it is not needed)"
                        ),
                        Err(e) => {
                            tracing::warn!(volume = %volume.id, error = %e, "cannot quarantine a workspace no session owns; it is left in place")
                        }
                    }
                    continue;
                }
                match volume.remove() {
                    Ok(()) => removed += 1,
                    Err(e) => {
                        tracing::warn!(volume = %volume.id, error = %e, "cannot remove a stale workspace")
                    }
                }
            }
        }
        for name in stale(&inner.images) {
            let _ = rustix::fs::unlinkat(&inner.images.fd, name.as_str(), AtFlags::empty());
        }
        for dir in [&inner.run, &inner.history] {
            for id in stale(dir) {
                let _ = remove_tree_at(&dir.fd, std::ffi::OsStr::new(&id));
            }
        }
        removed
    }
}

/// Unmounts whatever is mounted at `path` (detached, so a straggler
/// holding it open cannot make this fail; never through a symlink); done
/// when nothing is mounted there.
fn unmount(path: &Path) -> io::Result<()> {
    match rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
    ) {
        Ok(()) | Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
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

/// Creates `volumes/<id>.img` (sparse, `quota.disk_bytes`) with an ext4
/// filesystem of `quota.inodes` inodes whose root `owner` owns, and mounts
/// it `nosuid,nodev` at `workspaces/<id>`.
fn make_filesystem(inner: &Inner, id: &str, quota: Quota, owner: (u32, u32)) -> Result<(), Error> {
    let create = |what: &str, e: &dyn std::fmt::Display| Error::Create(format!("{what}: {e}"));
    let image_name = format!("{id}.img");
    let image = rustix::fs::openat(
        &inner.images.fd,
        image_name.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| create("creating the volume file", &e))?;
    rustix::fs::ftruncate(&image, quota.disk_bytes.max(MIN_DISK_BYTES))
        .map_err(|e| create("sizing the volume file", &e))?;
    drop(image);
    // Paths below lie entirely in the service's private directory: no other
    // user can change what they resolve to.
    let image_path = inner.images.path.join(&image_name);
    let mount_point = inner.workspaces.path.join(id);
    run_tool(
        std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-N"])
            .arg(quota.inodes.max(MIN_INODES).to_string())
            .arg("-E")
            .arg(format!(
                "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner={}:{}",
                owner.0, owner.1
            ))
            .arg(&image_path),
    )?;
    run_tool(
        std::process::Command::new("mount")
            .args([
                "-t",
                "ext4",
                "-o",
                "loop,nosuid,nodev,noatime,discard,noinit_itable",
            ])
            .arg(&image_path)
            .arg(&mount_point),
    )
}

/// Runs a filesystem tool to completion; its stderr explains a failure.
fn run_tool(cmd: &mut std::process::Command) -> Result<(), Error> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            Error::Create(format!(
                "cannot run {program} (install e2fsprogs and util-linux): {e}"
            ))
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Create(format!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Whether nobody but `owner` (and root) can reach `path`, whatever its
/// commands do: some directory strictly above it belongs to root or
/// `owner` and grants its group and others no access. The directory itself
/// does not count: commands run as its owner (or, through an id-mapped
/// pin of root's directory, are its owner there) and could open it up.
/// Entries of a lent directory checked for outside links at most.
const MAX_CHECKED_ENTRIES: u64 = 2_000_000;

/// Refuses a tree holding a regular file with more links than the tree
/// itself holds. Walked through the directory's descriptor (a path swapped
/// meanwhile cannot redirect it), without following symbolic links.
fn linked_outside(root: &OwnedFd) -> Result<(), Error> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let base = proc_fd_path(root);
    let mut inside: HashMap<(u64, u64), (PathBuf, u64, u64)> = HashMap::new();
    let walk = ignore::WalkBuilder::new(&base)
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .build();
    for (n, entry) in walk.enumerate() {
        let unchecked = |path: &Path, why: String| Error::Unchecked {
            path: path.strip_prefix(&base).unwrap_or(path).to_path_buf(),
            why,
        };
        if n as u64 >= MAX_CHECKED_ENTRIES {
            return Err(unchecked(
                Path::new(""),
                format!("it holds more than {MAX_CHECKED_ENTRIES} entries"),
            ));
        }
        let entry = entry.map_err(|e| unchecked(Path::new(""), e.to_string()))?;
        if entry.depth() > 0 && entry.file_name() == crate::state::MARKER {
            let state = entry.path().parent().unwrap_or(entry.path());
            let inside = state.strip_prefix(&base).unwrap_or(state);
            return Err(Error::HoldsState {
                path: Path::new(".").join(inside),
            });
        }
        let meta = entry
            .metadata()
            .map_err(|e| unchecked(entry.path(), e.to_string()))?;
        if meta.is_file() && meta.nlink() > 1 {
            let seen = inside
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| (entry.path().to_path_buf(), meta.nlink(), 0));
            seen.2 += 1;
        }
    }
    match inside.into_values().find(|(_, links, seen)| seen < links) {
        Some((path, links, _)) => Err(Error::LinkedOutside {
            path: path.strip_prefix(&base).unwrap_or(&path).to_path_buf(),
            links,
        }),
        None => Ok(()),
    }
}

fn private(path: &Path, owner: u32) -> io::Result<bool> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open("/", flags, Mode::empty())?;
    let closed = |fd: &OwnedFd| -> io::Result<bool> {
        let st = rustix::fs::fstat(fd)?;
        Ok((st.st_uid == 0 || st.st_uid == owner) && st.st_mode & 0o011 == 0)
    };
    let names: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((_, above)) = names.split_last() else {
        return Ok(false);
    };
    if closed(&fd)? {
        return Ok(true);
    }
    for name in above {
        fd = rustix::fs::openat(&fd, *name, flags, Mode::empty())?;
        if closed(&fd)? {
            return Ok(true);
        }
    }
    Ok(false)
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
        self.kind != Kind::Pin
    }

    /// Device and inode of the workspace root.
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    fn dir(&self) -> &Dir {
        match self.kind {
            Kind::Filesystem | Kind::Directory => &self.inner.workspaces,
            Kind::Pin => &self.inner.pins,
        }
    }

    fn open_root(&self) -> io::Result<OwnedFd> {
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

    /// Unmounts and removes the volume: for a fresh workspace, everything
    /// in it; for a pin, only the pin (the lent directory stays). The
    /// session's history goes with it. Blocking.
    pub fn remove(&self) -> io::Result<()> {
        match remove_tree_at(&self.inner.history.fd, std::ffi::OsStr::new(&self.id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
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
            Kind::Pin => {
                match rustix::fs::unlinkat(&dir.fd, self.id.as_str(), AtFlags::REMOVEDIR) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Mounts a fresh workspace's volume file at its mount point again if
    /// it is not mounted there (the host restarted), as it was first
    /// mounted (ext4 replays its own journal). False when there is no
    /// volume file to mount. Blocking.
    fn mount_again(&self) -> io::Result<bool> {
        let inner = &self.inner;
        let root = self.open_root()?;
        let parent = rustix::fs::fstat(&inner.workspaces.fd)?;
        if rustix::fs::fstat(&root)?.st_dev != parent.st_dev {
            return Ok(true);
        }
        drop(root);
        let image = inner.images.path.join(format!("{}.img", self.id));
        if !image.exists() {
            return Ok(false);
        }
        run_tool(
            std::process::Command::new("mount")
                .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard"])
                .arg(&image)
                .arg(&self.path),
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(true)
    }

    /// Whether the workspace holds nothing (or cannot be read at all).
    fn is_empty(&self) -> bool {
        match self.open_root() {
            Ok(root) => crate::workspace::walk::list(&root, 1)
                .map(|(entries, more)| entries.is_empty() && !more)
                .unwrap_or(false),
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Moves the workspace into the quarantine: its volume file (unmounted
    /// first), or the plain directory. Returns where it went. Blocking.
    fn quarantine(&self) -> io::Result<PathBuf> {
        let inner = &self.inner;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let container_free = match self.kind {
            Kind::Filesystem if self.inner.can_mount => {
                unmount(&self.path)?;
                let name = format!("{}-{stamp}.img", self.id);
                let from = format!("{}.img", self.id);
                match rustix::fs::renameat(
                    &inner.images.fd,
                    from.as_str(),
                    &inner.quarantine.fd,
                    name.as_str(),
                ) {
                    // The mount point holds the files of a workspace made
                    // while the service could not mount: move it instead.
                    Err(rustix::io::Errno::NOENT) => None,
                    Ok(()) => Some(name),
                    Err(e) => return Err(e.into()),
                }
            }
            _ => None,
        };
        let name = match container_free {
            Some(name) => {
                let _ = rustix::fs::unlinkat(
                    &inner.workspaces.fd,
                    self.id.as_str(),
                    AtFlags::REMOVEDIR,
                );
                name
            }
            None => {
                let name = format!("{}-{stamp}", self.id);
                rustix::fs::renameat(
                    &inner.workspaces.fd,
                    self.id.as_str(),
                    &inner.quarantine.fd,
                    name.as_str(),
                )?;
                name
            }
        };
        let _ = remove_tree_at(&inner.history.fd, std::ffi::OsStr::new(&self.id));
        Ok(inner.quarantine.path.join(name))
    }

    /// Lets go of the volume's mount and keeps everything in it: the
    /// service stops, and the session comes back at its next start
    /// ([`Volumes::reopen_fresh`], [`Volumes::repin`]). Blocking.
    pub fn release(&self) -> io::Result<()> {
        if matches!(self.kind, Kind::Filesystem | Kind::Pin) {
            unmount(&self.path)?;
        }
        Ok(())
    }

    /// Best-effort removal on an error path.
    fn discard(&self) {
        if let Err(e) = self.remove() {
            tracing::warn!(volume = %self.id, error = %e, "cannot remove a half-made workspace");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_a_file_linked_from_outside_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let tree = top.path().join("tree");
        std::fs::create_dir_all(tree.join("deep/er")).unwrap();
        std::fs::write(tree.join("deep/er/a"), "a").unwrap();
        // Links inside the tree only: fine.
        std::fs::hard_link(tree.join("deep/er/a"), tree.join("a-again")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tree.join("link")).unwrap();
        let open = || {
            rustix::fs::open(
                &tree,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        linked_outside(&open()).unwrap();
        // One more link, outside: refused, naming the file.
        std::fs::hard_link(tree.join("deep/er/a"), top.path().join("outside")).unwrap();
        match linked_outside(&open()) {
            Err(Error::LinkedOutside { path, links: 3 }) => {
                assert!(
                    path == Path::new("a-again") || path == Path::new("deep/er/a"),
                    "{path:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(top.path().join("outside")).unwrap();
        linked_outside(&open()).unwrap();
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// The options of the mount at `path`, from this process's mountinfo.
    fn mount_options(path: &Path) -> String {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        info.lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                (Path::new(fields[4]) == path).then(|| fields[5].to_string())
            })
            .unwrap_or_else(|| panic!("nothing is mounted at {}", path.display()))
    }

    /// Pins removed (unmounted) also when an assertion fails.
    struct Pins(Vec<Volume>);

    impl Drop for Pins {
        fn drop(&mut self) {
            for v in &self.0 {
                v.remove().unwrap();
            }
        }
    }

    /// Root's lent directory gets an id-mapped pin (root's files are the
    /// command user's through it), unless the caller says it must not, in
    /// which case the pin is plain and the volume's note says why; another
    /// owner's directory is never id-mapped.
    #[test]
    fn a_root_owned_lent_directory_is_pinned_id_mapped_unless_it_must_not_be() {
        assert!(
            rustix::process::geteuid().is_root(),
            "pins need root: run the tests as root"
        );
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let state = StateDir::open(&base.path().join("state")).unwrap();
        let volumes = Volumes::open(&state).unwrap();
        let lent = base.path().join("repo");
        std::fs::create_dir(&lent).unwrap();
        std::fs::write(lent.join("f"), "x\n").unwrap();
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let user = (1000, 1000);
        let mut pins = Pins(Vec::new());

        pins.0
            .push(volumes.pin("mapped", &fd, &lent, user, None).unwrap());
        let mapped = &pins.0[0];
        assert_eq!(mapped.note(), None);
        let options = mount_options(mapped.path());
        assert!(options.contains("idmapped"), "{options}");
        assert!(options.contains("nosuid") && options.contains("nodev"));
        let seen = std::fs::metadata(mapped.path().join("f")).unwrap();
        assert_eq!((seen.uid(), seen.gid()), user);

        let why = "the runtime cannot create files through one";
        pins.0
            .push(volumes.pin("plain", &fd, &lent, user, Some(why)).unwrap());
        let plain = &pins.0[1];
        let note = plain.note().unwrap();
        assert!(note.contains(why) && note.contains("uid 1000"), "{note}");
        let options = mount_options(plain.path());
        assert!(!options.contains("idmapped"), "{options}");
        assert!(options.contains("nosuid") && options.contains("nodev"));
        assert_eq!(std::fs::metadata(plain.path().join("f")).unwrap().uid(), 0);

        std::os::unix::fs::chown(&lent, Some(1000), Some(1000)).unwrap();
        pins.0
            .push(volumes.pin("owned", &fd, &lent, user, None).unwrap());
        let owned = &pins.0[2];
        assert_eq!(owned.note(), None);
        assert!(!mount_options(owned.path()).contains("idmapped"));
        assert_eq!(std::fs::metadata(owned.path().join("f")).unwrap().uid(), 0);
    }
}
