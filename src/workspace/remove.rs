//! Removal of directory trees that a hostile command may have built.
//!
//! `std::fs::remove_dir_all` (and so `tempfile::TempDir`) recurses once per
//! directory level: a command that makes a 25,000-deep tree overflows the
//! service's stack when the tree is removed. Removal here is iterative and
//! works through directory fds only:
//!
//! - at most [`MAX_OPEN_DIRS`] directories are open at once; a directory
//!   found deeper than that is renamed up into the directory being emptied
//!   (one `renameat`, `RENAME_NOREPLACE`, under a fresh name) and met again
//!   there, so any depth costs O(entries) time and bounded fds and memory;
//! - nothing is followed: directories are opened with `O_NOFOLLOW`
//!   relative to their parent's fd, entries are removed with `unlinkat`, so
//!   a symlink is unlinked and its target (inside or outside) survives;
//! - a directory on another filesystem (a mount point) is not entered;
//! - a directory a command made unreadable or unwritable (mode 000, 0500)
//!   is given mode 0700 when we own it or are root, through an `O_PATH` fd
//!   (never through a name that could be swapped for a symlink);
//! - entries vanishing concurrently are not errors. Other failures do not
//!   stop the removal: everything removable is removed and the first
//!   failure is returned.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// Most directories held open at once by one removal.
pub const MAX_OPEN_DIRS: usize = 64;

/// Times a directory is rescanned when entries keep appearing in it.
const NOT_EMPTY_RETRIES: u32 = 3;

/// Why a tree could not be removed completely. Everything else that could
/// be removed was.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The path has no final component to remove (`/`, or ends in `..`).
    #[error("{0} names no removable entry")]
    NoName(PathBuf),
    /// A directory could not be opened (the top one: `NotFound` if absent).
    #[error("open directory {name:?}: {source}")]
    Open {
        /// Entry name (the path, for the top directory).
        name: OsString,
        /// The OS error.
        source: io::Error,
    },
    /// A directory could not be read.
    #[error("read directory {name:?}: {source}")]
    Read {
        /// Entry name.
        name: OsString,
        /// The OS error.
        source: io::Error,
    },
    /// An entry could not be unlinked or a directory removed.
    #[error("remove {name:?}: {source}")]
    Remove {
        /// Entry name.
        name: OsString,
        /// The OS error.
        source: io::Error,
    },
    /// A too-deep directory could not be moved up.
    #[error("move {name:?} up for removal: {source}")]
    Rename {
        /// Entry name.
        name: OsString,
        /// The OS error.
        source: io::Error,
    },
    /// A directory is a mount point of another filesystem: left in place.
    #[error("{name:?} is on another filesystem and was left in place")]
    OtherFilesystem {
        /// Entry name.
        name: OsString,
    },
}

impl RemoveError {
    /// The kind of the underlying OS error (`NotFound` when the tree to
    /// remove does not exist).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            RemoveError::NoName(_) => io::ErrorKind::InvalidInput,
            RemoveError::OtherFilesystem { .. } => io::ErrorKind::CrossesDevices,
            RemoveError::Open { source, .. }
            | RemoveError::Read { source, .. }
            | RemoveError::Remove { source, .. }
            | RemoveError::Rename { source, .. } => source.kind(),
        }
    }
}

impl From<RemoveError> for io::Error {
    fn from(e: RemoveError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Removes `path` and everything beneath it, never following a symlink:
/// `path`'s parent is opened with `O_NOFOLLOW | O_DIRECTORY` (its own
/// ancestors resolve as usual) and its last component is never followed, so
/// a symlink there is unlinked, not its target.
pub fn remove_tree(path: &Path) -> Result<(), RemoveError> {
    let Some(name) = path.file_name() else {
        return Err(RemoveError::NoName(path.to_path_buf()));
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let parent_fd =
        rustix::fs::open(parent, flags, Mode::empty()).map_err(|e| RemoveError::Open {
            name: parent.as_os_str().to_owned(),
            source: e.into(),
        })?;
    remove_tree_at(&parent_fd, name)
}

/// Removes the entry `name` of the directory `parent` and, if it is a
/// directory, everything beneath it. A symlink is unlinked, never followed.
/// `NotFound` (see [`RemoveError::kind`]) if there is no such entry.
pub fn remove_tree_at(parent: impl AsFd, name: &OsStr) -> Result<(), RemoveError> {
    let parent = parent.as_fd();
    let cname = CString::new(name.as_bytes()).map_err(|_| RemoveError::Open {
        name: name.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "name contains a NUL byte"),
    })?;
    let euid = rustix::process::geteuid().as_raw();
    let open_err = |e: Errno| RemoveError::Open {
        name: name.to_owned(),
        source: e.into(),
    };
    let fd = match open_child(parent, &cname, euid).map_err(open_err)? {
        Child::Dir(fd) => fd,
        Child::Gone => return Err(open_err(Errno::NOENT)),
        Child::NotDir => {
            return match rustix::fs::unlinkat(parent, cname.as_c_str(), AtFlags::empty()) {
                Ok(()) => Ok(()),
                Err(e) => Err(RemoveError::Remove {
                    name: name.to_owned(),
                    source: e.into(),
                }),
            };
        }
    };
    let mut emptier = Emptier::new(fd, euid).map_err(open_err)?;
    let mut tries = 0;
    loop {
        emptier.run()?;
        match rustix::fs::unlinkat(parent, cname.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            // Something added an entry meanwhile: empty it again.
            Err(Errno::NOTEMPTY | Errno::EXIST) if tries < NOT_EMPTY_RETRIES => {
                tries += 1;
                emptier.rewind_base();
            }
            Err(e) => {
                return Err(RemoveError::Remove {
                    name: name.to_owned(),
                    source: e.into(),
                });
            }
        }
    }
}

/// Removes everything inside the directory `dir` and keeps `dir` itself
/// (its mode becomes 0700 if we own it and could not write in it).
pub fn empty_dir(dir: impl AsFd) -> Result<(), RemoveError> {
    let euid = rustix::process::geteuid().as_raw();
    let open_err = |e: Errno| RemoveError::Open {
        name: ".".into(),
        source: e.into(),
    };
    let fd = match open_child(dir.as_fd(), c".", euid).map_err(open_err)? {
        Child::Dir(fd) => fd,
        Child::Gone | Child::NotDir => return Err(open_err(Errno::NOTDIR)),
    };
    Emptier::new(fd, euid).map_err(open_err)?.run()
}

/// What a directory entry turned out to be when opened.
enum Child {
    Dir(OwnedFd),
    NotDir,
    Gone,
}

/// Opens the directory `name` of `parent` for reading without following a
/// symlink. A directory we may not read is made ours to read (mode 0700)
/// when we own it or are root.
fn open_child(parent: BorrowedFd<'_>, name: &CStr, euid: u32) -> Result<Child, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => return Ok(Child::Dir(fd)),
        Err(Errno::NOTDIR | Errno::LOOP) => return Ok(Child::NotDir),
        Err(Errno::NOENT) => return Ok(Child::Gone),
        Err(Errno::ACCESS) => {}
        Err(e) => return Err(e),
    }
    // The O_PATH fd pins the directory itself: the mode change below cannot
    // land on a symlink's target swapped in under the same name.
    let path_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let pinned = match rustix::fs::openat(parent, name, path_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOTDIR | Errno::LOOP) => return Ok(Child::NotDir),
        Err(Errno::NOENT) => return Ok(Child::Gone),
        Err(e) => return Err(e),
    };
    if !make_owner_rwx(&pinned, euid) {
        return Err(Errno::ACCESS);
    }
    rustix::fs::openat(
        &pinned,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(Child::Dir)
}

/// Gives the directory behind `fd` (any fd, `O_PATH` included) mode 0700
/// if we own it or are root. True if the mode was changed.
fn make_owner_rwx(fd: &OwnedFd, euid: u32) -> bool {
    let Ok(st) = rustix::fs::fstat(fd) else {
        return false;
    };
    if euid != 0 && st.st_uid != euid {
        return false;
    }
    // fchmod refuses O_PATH fds; the /proc link reaches the same inode and
    // is not a name anyone else can change.
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::chmod(proc_path.as_str(), Mode::from_raw_mode(0o700)).is_ok()
}

/// One open directory of the removal.
struct Frame {
    dir: Dir,
    /// Its name in the frame below (empty for the base).
    name: CString,
    /// Something beneath could not be removed: do not try to rmdir it.
    failed: bool,
    /// Rescans after finding it not empty.
    rescans: u32,
    /// Its mode was already changed to let us write in it.
    made_writable: bool,
}

impl Frame {
    /// The directory's fd (never an error on Linux: the stream owns it).
    fn fd(&self) -> Result<BorrowedFd<'_>, Errno> {
        self.dir.fd()
    }
}

/// Empties one base directory, iteratively.
struct Emptier {
    stack: Vec<Frame>,
    dev: u64,
    euid: u32,
    /// Directories moved into the base since its last rescan.
    moved: u64,
    first_error: Option<RemoveError>,
}

/// Counter behind the names of directories moved up.
static MOVED: AtomicU64 = AtomicU64::new(0);

impl Emptier {
    fn new(base: OwnedFd, euid: u32) -> Result<Emptier, Errno> {
        let dev = rustix::fs::fstat(&base)?.st_dev;
        let mut stack = Vec::with_capacity(MAX_OPEN_DIRS);
        stack.push(Frame {
            dir: Dir::new(base)?,
            name: CString::default(),
            failed: false,
            rescans: 0,
            made_writable: false,
        });
        Ok(Emptier {
            stack,
            dev,
            euid,
            moved: 0,
            first_error: None,
        })
    }

    fn rewind_base(&mut self) {
        if let Some(base) = self.stack.first_mut() {
            base.dir.rewind();
        }
    }

    /// Empties the base; the first failure, if any, once all else is done.
    fn run(&mut self) -> Result<(), RemoveError> {
        while let Some(top) = self.stack.last_mut() {
            match top.dir.read() {
                Some(Ok(entry)) => {
                    let name = entry.file_name();
                    if name == c"." || name == c".." {
                        continue;
                    }
                    let name = name.to_owned();
                    self.remove_entry(name, entry.file_type());
                }
                Some(Err(e)) => {
                    let name = os_name(&top.name);
                    self.fail(RemoveError::Read {
                        name,
                        source: e.into(),
                    });
                    // The stream ends after an error; the next read says so.
                }
                None => {
                    if self.finish_top() {
                        break;
                    }
                }
            }
        }
        match self.first_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Records a failure in the top directory.
    fn fail(&mut self, e: RemoveError) {
        if let Some(top) = self.stack.last_mut() {
            top.failed = true;
        }
        self.first_error.get_or_insert(e);
    }

    /// Removes one entry of the top directory (a directory is entered, or
    /// moved up when too deep).
    fn remove_entry(&mut self, name: CString, ftype: FileType) {
        let failure = |op: fn(OsString, io::Error) -> RemoveError, name: &CStr, e: Errno| {
            op(os_name(name), e.into())
        };
        let top = self.stack.len() - 1;
        let is_dir = match ftype {
            FileType::Directory => true,
            FileType::Unknown => {
                let st = self.stack[top]
                    .fd()
                    .and_then(|fd| rustix::fs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW));
                match st {
                    Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                    Err(Errno::NOENT) => return,
                    Err(e) => return self.fail(failure(remove_err, &name, e)),
                }
            }
            _ => false,
        };
        if !is_dir {
            match self.unlink_in(top, &name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => return,
                // Replaced by a directory since the listing.
                Err(Errno::ISDIR) => {}
                Err(e) => return self.fail(failure(remove_err, &name, e)),
            }
        }
        if self.stack.len() >= MAX_OPEN_DIRS {
            if let Err(e) = self.move_to_base(&name) {
                self.fail(failure(rename_err, &name, e));
            }
            return;
        }
        let child = self.stack[top]
            .fd()
            .and_then(|fd| open_child(fd, &name, self.euid));
        match child {
            Err(e) => self.fail(failure(open_err, &name, e)),
            Ok(Child::Gone) => {}
            Ok(Child::NotDir) => match self.unlink_in(top, &name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => self.fail(failure(remove_err, &name, e)),
            },
            Ok(Child::Dir(fd)) => {
                let same_fs = rustix::fs::fstat(&fd).map(|st| st.st_dev == self.dev);
                match (same_fs, Dir::new(fd)) {
                    (Ok(true), Ok(dir)) => self.stack.push(Frame {
                        dir,
                        name,
                        failed: false,
                        rescans: 0,
                        made_writable: false,
                    }),
                    (Ok(false), _) => self.fail(RemoveError::OtherFilesystem {
                        name: os_name(&name),
                    }),
                    (Err(e), _) | (_, Err(e)) => self.fail(failure(open_err, &name, e)),
                }
            }
        }
    }

    /// The top directory is read to its end. Removes it (or rescans the
    /// base for directories moved into it). True when the base is done.
    fn finish_top(&mut self) -> bool {
        let depth = self.stack.len();
        if depth <= 1 {
            if self.moved == 0 {
                return true;
            }
            self.moved = 0;
            if let Some(base) = self.stack.first_mut() {
                base.dir.rewind();
            }
            return false;
        }
        let frame = &self.stack[depth - 1];
        let mut failed = frame.failed;
        if !failed {
            let name = frame.name.clone();
            match self.unlink_in(depth - 2, &name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::NOTEMPTY | Errno::EXIST)
                    if self.stack[depth - 1].rescans < NOT_EMPTY_RETRIES =>
                {
                    // Entries appeared meanwhile: read it again.
                    let frame = &mut self.stack[depth - 1];
                    frame.rescans += 1;
                    frame.dir.rewind();
                    return false;
                }
                Err(e) => {
                    failed = true;
                    self.first_error
                        .get_or_insert(remove_err(os_name(&name), e.into()));
                }
            }
        }
        self.stack.pop();
        if failed && let Some(parent) = self.stack.last_mut() {
            parent.failed = true;
        }
        false
    }

    /// `unlinkat` in the directory at `idx` of the stack; on a permission
    /// refusal the directory is made writable (once) and the call retried.
    fn unlink_in(&mut self, idx: usize, name: &CStr, flags: AtFlags) -> Result<(), Errno> {
        match rustix::fs::unlinkat(self.stack[idx].fd()?, name, flags) {
            Err(Errno::ACCESS | Errno::PERM) if self.make_writable(idx) => {
                rustix::fs::unlinkat(self.stack[idx].fd()?, name, flags)
            }
            other => other,
        }
    }

    /// Gives the directory at `idx` of the stack mode 0700 (once), if we
    /// own it or are root. True if the mode was changed.
    fn make_writable(&mut self, idx: usize) -> bool {
        let frame = &mut self.stack[idx];
        if frame.made_writable {
            return false;
        }
        frame.made_writable = true;
        let Ok(fd) = frame.fd() else {
            return false;
        };
        match rustix::fs::fstat(fd) {
            Ok(st) if self.euid == 0 || st.st_uid == self.euid => {
                rustix::fs::fchmod(fd, Mode::from_raw_mode(0o700)).is_ok()
            }
            _ => false,
        }
    }

    /// Moves the directory `name` of the top directory into the base under
    /// a fresh name: O(1) whatever its depth, and met again from the base.
    fn move_to_base(&mut self, name: &CStr) -> Result<(), Errno> {
        let top = self.stack.len() - 1;
        let mut fixed_perms = false;
        let mut collisions = 0;
        loop {
            let fresh = format!(
                ".sandboxd-rm-{:x}-{:016x}",
                MOVED.fetch_add(1, Ordering::Relaxed),
                uuid::Uuid::new_v4().as_u64_pair().0
            );
            let (from, base) = (self.stack[top].fd()?, self.stack[0].fd()?);
            let flags = RenameFlags::NOREPLACE;
            let result = match rustix::fs::renameat_with(from, name, base, fresh.as_str(), flags) {
                // A filesystem without RENAME_NOREPLACE; the name is fresh.
                Err(Errno::INVAL) => rustix::fs::renameat(from, name, base, fresh.as_str()),
                other => other,
            };
            match result {
                Ok(()) => {
                    self.moved += 1;
                    return Ok(());
                }
                Err(Errno::NOENT) => return Ok(()),
                Err(Errno::EXIST | Errno::NOTEMPTY) if collisions < 8 => collisions += 1,
                // Moving a directory needs write access to the directory it
                // leaves and to itself (its `..` changes).
                Err(Errno::ACCESS | Errno::PERM) if !fixed_perms => {
                    fixed_perms = true;
                    self.make_writable(top);
                    let flags =
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    if let Ok(pinned) =
                        rustix::fs::openat(self.stack[top].fd()?, name, flags, Mode::empty())
                    {
                        make_owner_rwx(&pinned, self.euid);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn open_err(name: OsString, source: io::Error) -> RemoveError {
    RemoveError::Open { name, source }
}

fn remove_err(name: OsString, source: io::Error) -> RemoveError {
    RemoveError::Remove { name, source }
}

fn rename_err(name: OsString, source: io::Error) -> RemoveError {
    RemoveError::Rename { name, source }
}

fn os_name(name: &CStr) -> OsString {
    OsStr::from_bytes(name.to_bytes()).to_owned()
}

#[cfg(test)]
mod tests;
