//! The service's private state directory.
//!
//! Everything the service keeps on the host (workspace volumes, supervisor
//! sockets, lock files) lives in one directory owned by the service's user,
//! mode 0700, whose every ancestor is owned by root or that user and
//! writable by nobody else (a sticky directory such as /tmp is accepted as
//! an ancestor: others may add names to it but not rename or remove ours).
//! The service refuses to start on anything else, and creates, changes and
//! removes what is inside through directory fds, never by re-resolving a
//! path another user could have changed in between.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory (or an ancestor) has an owner or mode that would let
    /// another user change what the service relies on.
    #[error("the {what} {path} is unsafe: {why}")]
    Unsafe {
        /// Which directory: the state directory, or the one a flag named.
        what: &'static str,
        /// The offending path.
        path: PathBuf,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// The directory could not be created or opened.
    #[error("cannot prepare the {what} {path}: {source}")]
    Open {
        /// Which directory: the state directory, or the one a flag named.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// An open directory of the service's own.
#[derive(Debug)]
pub struct Dir {
    /// Open for reading (listing) and as the base of `*at` calls.
    pub fd: OwnedFd,
    /// Its path, inside the state directory.
    pub path: PathBuf,
}

/// The service's private state directory, checked and held open.
#[derive(Debug)]
pub struct StateDir {
    dir: Dir,
}

/// The file that marks a directory as sandboxd's state: any service's,
/// journal directories included. No directory holding one, inside one, or
/// with one below it is ever lent to a session, so one service's tokens,
/// sockets and sessions are never another's workspace.
pub const MARKER: &str = "SANDBOXD-STATE";

/// What the service's own state directory is called in its errors.
const STATE: &str = "state directory";

fn state_err(path: &Path) -> impl FnOnce(rustix::io::Errno) -> Error + '_ {
    move |e| Error::Open {
        what: STATE,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

impl Error {
    /// The same error, naming the directory as `what`.
    fn of(self, what: &'static str) -> Error {
        match self {
            Error::Unsafe { path, why, .. } => Error::Unsafe { what, path, why },
            Error::Open { path, source, .. } => Error::Open { what, path, source },
        }
    }
}

impl StateDir {
    /// Where sandboxd keeps state by default: `/var/lib/sandboxd` for
    /// root, else `sandboxd` in the user's state home.
    pub fn default_root() -> PathBuf {
        if rustix::process::geteuid().is_root() {
            return PathBuf::from("/var/lib/sandboxd");
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("/var/lib"));
        base.join("sandboxd")
    }

    /// The default state directory of service `service`.
    pub fn default_path(service: &str) -> PathBuf {
        Self::default_root().join(service)
    }

    /// Opens `path`, creating it (and missing parents) mode 0700 if needed.
    ///
    /// Refuses a path that is not absolute, passes through a symlink, has an
    /// ancestor owned by another user or writable by others (a sticky
    /// directory such as /tmp is accepted as an ancestor), or is itself not
    /// owned by the service's user with mode 0700 or stricter.
    pub fn open(path: &Path) -> Result<StateDir, Error> {
        Self::open_as(path, STATE)
    }

    /// [`StateDir::open`] for a directory the operator named for another
    /// use, checked alike: `what` names it in errors (e.g. "journal
    /// directory (--journal-dir)"), so the operator knows which to fix.
    pub fn open_as(path: &Path, what: &'static str) -> Result<StateDir, Error> {
        Self::open_checked(path).map_err(|e| e.of(what))
    }

    fn open_checked(path: &Path) -> Result<StateDir, Error> {
        let unsafe_state = |p: &Path, why: String| Error::Unsafe {
            what: STATE,
            path: p.to_path_buf(),
            why,
        };
        if !path.is_absolute() {
            return Err(unsafe_state(path, "it is not an absolute path".into()));
        }
        let euid = rustix::process::geteuid().as_raw();
        let names: Vec<&OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(Ok(n)),
                Component::RootDir => None,
                _ => Some(Err(())),
            })
            .collect::<Result<_, ()>>()
            .map_err(|()| unsafe_state(path, "it contains `.` or `..`".into()))?;
        let Some((last, ancestors)) = names.split_last() else {
            return Err(unsafe_state(path, "it is the root directory".into()));
        };
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut current = PathBuf::from("/");
        let mut fd = rustix::fs::open("/", dir_flags, Mode::empty()).map_err(state_err(path))?;
        for name in ancestors.iter().copied() {
            check_ancestor(&fd, &current, euid)?;
            current.push(name);
            fd = open_or_make_dir(&fd, name, &current)?;
        }
        check_ancestor(&fd, &current, euid)?;
        current.push(last);
        let fd = open_or_make_dir(&fd, last, &current)?;
        let st = rustix::fs::fstat(&fd).map_err(state_err(path))?;
        if st.st_uid != euid {
            return Err(unsafe_state(
                path,
                format!(
                    "it is owned by uid {}, not by the service's uid {euid}; remove it or chown it",
                    st.st_uid
                ),
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(unsafe_state(
                path,
                format!(
                    "its mode is {:04o}: other users could reach the service's state; chmod 700 it",
                    st.st_mode & 0o7777
                ),
            ));
        }
        let dir = Dir {
            fd: reopen_dir(&fd, path)?,
            path: path.to_path_buf(),
        };
        mark(&dir).map_err(|e| Error::Open {
            what: STATE,
            path: path.join(MARKER),
            source: e,
        })?;
        Ok(StateDir { dir })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.dir.path
    }

    /// The subdirectory `name`, made 0700 if missing, owned by the service.
    pub fn subdir(&self, name: &str) -> Result<Dir, Error> {
        let path = self.dir.path.join(name);
        match rustix::fs::mkdirat(&self.dir.fd, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(state_err(&path)(e)),
        }
        let fd = rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(state_err(&path))?;
        let st = rustix::fs::fstat(&fd).map_err(state_err(&path))?;
        if st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(Error::Unsafe {
                what: STATE,
                path,
                why: format!("it is owned by uid {}", st.st_uid),
            });
        }
        if st.st_mode & 0o077 != 0 {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(state_err(&path))?;
        }
        Ok(Dir { fd, path })
    }

    /// The subdirectory `name` as a state directory of its own (made 0700
    /// if missing; see [`StateDir::subdir`]).
    pub fn child(&self, name: &str) -> Result<StateDir, Error> {
        Ok(StateDir {
            dir: self.subdir(name)?,
        })
    }

    /// Removes the file `name` from this directory, if it is there (a link
    /// is removed, never followed).
    pub fn remove_file(&self, name: &str) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.dir.fd, name, rustix::fs::AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the new file `name` in this directory, readable and writable
    /// by the service's user only, opened for appending. Refuses a name that
    /// exists (a planted file or link is never opened).
    pub fn create_private(&self, name: &str) -> io::Result<std::fs::File> {
        let fd = rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::WRONLY
                | OFlags::APPEND
                | OFlags::CREATE
                | OFlags::EXCL
                | OFlags::NOFOLLOW
                | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens the file `name` of this directory for appending, creating it
    /// (0600) if missing. Refuses anything but a regular file of the
    /// service's own (a planted link is never followed).
    pub fn open_append(&self, name: &str) -> io::Result<std::fs::File> {
        let fd = rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        self.check_own(&fd, name)?;
        Ok(std::fs::File::from(fd))
    }

    /// The contents of the file `name`, `None` if there is none. Refuses
    /// anything but a regular file of the service's own.
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let fd = match rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        self.check_own(&fd, name)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Renames `from` to `to` within this directory (replacing `to`).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.dir.fd, from, &self.dir.fd, to)?)
    }

    /// Replaces the file `name` with `bytes` atomically: written to a
    /// temporary name, renamed over `name`, then synced with the directory,
    /// so that after a crash `name` holds either the old contents or the
    /// new, whole.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.write_renamed(name, bytes)?;
        self.sync(name)
    }

    /// [`StateDir::write_atomic`] without waiting for the disk: `name` is
    /// whole for every process at once and survives the service's own
    /// crash; [`StateDir::sync`] makes it survive the host's too.
    pub fn write_renamed(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = format!(".{name}.{}.{n}.tmp", std::process::id());
        let fd = rustix::fs::openat(
            &self.dir.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(bytes).and_then(|()| self.rename(&tmp, name));
        if let Err(e) = written {
            let _ = self.remove_file(&tmp);
            return Err(e);
        }
        Ok(())
    }

    /// Waits until the file `name` and its entry in this directory are on
    /// the disk.
    pub fn sync(&self, name: &str) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rustix::fs::fdatasync(&fd)?;
        rustix::fs::fsync(&self.dir.fd)?;
        Ok(())
    }

    /// The names in this directory.
    pub fn names(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.dir.fd)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn check_own(&self, fd: &OwnedFd, name: &str) -> io::Result<()> {
        let st = rustix::fs::fstat(fd)?;
        if FileKind::of(st.st_mode) != FileKind::File
            || st.st_uid != rustix::process::geteuid().as_raw()
        {
            return Err(io::Error::other(format!(
                "{} is not a file of the service's own",
                self.dir.path.join(name).display()
            )));
        }
        Ok(())
    }

    /// An exclusive lock file in this directory, held until dropped (opened
    /// without following a symlink, checked to be the service's own).
    pub fn lock(&self, name: &str) -> io::Result<OwnedFd> {
        let fd = self.lock_file(name)?;
        rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(fd)
    }

    /// [`StateDir::lock`] without waiting: `None` while another process
    /// holds it (a live process's mark; the kernel drops it when the
    /// process dies, however it dies).
    pub fn try_lock(&self, name: &str) -> io::Result<Option<OwnedFd>> {
        let fd = self.lock_file(name)?;
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(fd)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn lock_file(&self, name: &str) -> io::Result<OwnedFd> {
        let fd = rustix::fs::openat(
            &self.dir.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        self.check_own(&fd, name)?;
        Ok(fd)
    }
}

/// Puts the [`MARKER`] in `dir`, if it is not there.
fn mark(dir: &Dir) -> io::Result<()> {
    use std::io::Write;
    let created = rustix::fs::openat(
        &dir.fd,
        MARKER,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    );
    match created {
        Ok(fd) => std::fs::File::from(fd).write_all(
            b"This directory holds sandboxd's private state. sandboxd never lends it, \
              anything inside it, or anything above it to a session.\n",
        ),
        Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum FileKind {
    File,
    Dir,
    Other,
}

impl FileKind {
    fn of(mode: u32) -> FileKind {
        match rustix::fs::FileType::from_raw_mode(mode) {
            rustix::fs::FileType::RegularFile => FileKind::File,
            rustix::fs::FileType::Directory => FileKind::Dir,
            _ => FileKind::Other,
        }
    }
}

/// An ancestor of the state directory must be root's or ours, and writable
/// by nobody else unless sticky (others may then add names but not rename
/// or remove ours).
fn check_ancestor(fd: &OwnedFd, path: &Path, euid: u32) -> Result<(), Error> {
    let st = rustix::fs::fstat(fd).map_err(state_err(path))?;
    if st.st_uid != 0 && st.st_uid != euid {
        return Err(Error::Unsafe {
            what: STATE,
            path: path.to_path_buf(),
            why: format!("this ancestor is owned by uid {}", st.st_uid),
        });
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0 {
        return Err(Error::Unsafe {
            what: STATE,
            path: path.to_path_buf(),
            why: format!(
                "this ancestor has mode {:04o}: other users could replace what is in it",
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(())
}

/// Opens the directory `name` in `parent` without following a symlink,
/// making it mode 0700 first if it does not exist.
fn open_or_make_dir(parent: &OwnedFd, name: &OsStr, path: &Path) -> Result<OwnedFd, Error> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::NOENT) => {
            match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(state_err(path)(e)),
            }
            rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(state_err(path))
        }
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => Err(Error::Unsafe {
            what: STATE,
            path: path.to_path_buf(),
            why: "it is a symbolic link or not a directory".into(),
        }),
        Err(e) => Err(state_err(path)(e)),
    }
}

/// A readable fd of the directory an `O_PATH` fd names.
fn reopen_dir(fd: &OwnedFd, path: &Path) -> Result<OwnedFd, Error> {
    rustix::fs::openat(
        fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(state_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn chown(path: &Path, uid: u32) {
        std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    }

    /// A private base directory to play in (tempfile makes them 0755).
    fn base() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o700);
        dir
    }

    fn unsafe_why(path: &Path) -> String {
        match StateDir::open(path) {
            Err(Error::Unsafe { why, .. }) => why,
            other => panic!("{} was accepted: {other:?}", path.display()),
        }
    }

    #[test]
    fn missing_directories_are_made_private() {
        let base = base();
        let path = base.path().join("a/b/state");
        let state = StateDir::open(&path).unwrap();
        for dir in [base.path().join("a"), base.path().join("a/b"), path.clone()] {
            assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        }
        let sub = state.subdir("workspaces").unwrap();
        assert_eq!(std::fs::metadata(&sub.path).unwrap().mode() & 0o777, 0o700);
        // Opening it again is fine.
        StateDir::open(&path).unwrap();
    }

    #[test]
    fn an_open_mode_is_refused() {
        let base = base();
        let path = base.path().join("state");
        std::fs::create_dir(&path).unwrap();
        chmod(&path, 0o711);
        assert!(unsafe_why(&path).contains("chmod 700"));
    }

    #[test]
    fn another_owner_is_refused() {
        // Another user made it first (say, in a shared directory).
        let base = base();
        let path = base.path().join("state");
        std::fs::create_dir(&path).unwrap();
        chmod(&path, 0o700);
        chown(&path, 65534);
        assert!(unsafe_why(&path).contains("owned by uid 65534"));
    }

    #[test]
    fn a_symlink_anywhere_on_the_path_is_refused() {
        let base = base();
        let real = base.path().join("real");
        std::fs::create_dir(&real).unwrap();
        chmod(&real, 0o700);
        std::os::unix::fs::symlink(&real, base.path().join("link")).unwrap();
        assert!(unsafe_why(&base.path().join("link")).contains("symbolic link"));
        assert!(unsafe_why(&base.path().join("link/state")).contains("symbolic link"));
    }

    #[test]
    fn ancestors_others_can_change_are_refused_unless_sticky() {
        let base = base();
        let shared = base.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o777);
        assert!(unsafe_why(&shared.join("state")).contains("mode 0777"));
        // Sticky, like /tmp: others cannot rename or remove what we make.
        chmod(&shared, 0o1777);
        StateDir::open(&shared.join("state")).unwrap();
        // An ancestor owned by another user is refused whatever its mode.
        let theirs = base.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chown(&theirs, 65534);
        assert!(unsafe_why(&theirs.join("state")).contains("owned by uid 65534"));
    }

    #[test]
    fn a_planted_lock_file_is_refused() {
        let base = base();
        let state = StateDir::open(&base.path().join("state")).unwrap();
        let outside = base.path().join("victim");
        std::fs::write(&outside, "keep").unwrap();
        std::os::unix::fs::symlink(&outside, state.path().join("a.lock")).unwrap();
        assert!(state.lock("a.lock").is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        std::fs::write(state.path().join("b.lock"), "").unwrap();
        chown(&state.path().join("b.lock"), 65534);
        assert!(state.lock("b.lock").is_err());
        let held = state.lock("c.lock").unwrap();
        // Held: another open of it cannot take it, until it is let go.
        assert!(state.try_lock("c.lock").unwrap().is_none());
        drop(held);
        assert!(state.try_lock("c.lock").unwrap().is_some());
    }
}
