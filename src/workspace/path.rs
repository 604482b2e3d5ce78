//! Confinement of every path to the workspace.
//!
//! A request path is first checked and normalised lexically ([`RelPath`]),
//! then opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`
//! relative to a directory fd held for the workspace root. The kernel refuses
//! any resolution that leaves the root, through `..` or through a symlink,
//! atomically: a command that plants or swaps a symlink between our check and
//! our open cannot make us read or write outside. A prefix check on a
//! canonicalised path would be racy, so none is relied on.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::Error;

/// Where the workspace appears inside a sandbox container; absolute paths
/// under it are accepted as workspace paths.
pub const CONTAINER_WORKSPACE: &str = "/workspace";

/// A normalised workspace-relative path: no `.`/`..`, no empty components,
/// `/`-separated. The empty path is the workspace root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RelPath(String);

impl RelPath {
    /// The workspace root.
    pub fn root() -> Self {
        RelPath(String::new())
    }

    /// True for the workspace root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path as a string ("" for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Path to hand to `*at` calls: "." for the root.
    pub fn as_at_path(&self) -> &str {
        if self.0.is_empty() { "." } else { &self.0 }
    }

    /// Parent directory and final name; `None` for the root.
    pub fn split_last(&self) -> Option<(RelPath, &str)> {
        if self.0.is_empty() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => (RelPath(self.0[..i].to_string()), &self.0[i + 1..]),
            None => (RelPath::root(), self.0.as_str()),
        })
    }

    /// This path joined with one more component.
    pub fn join(&self, name: &str) -> RelPath {
        if self.0.is_empty() {
            RelPath(name.to_string())
        } else {
            RelPath(format!("{}/{}", self.0, name))
        }
    }

    /// Prefixes of this path, shortest first, excluding the root.
    pub fn ancestors_inclusive(&self) -> impl Iterator<Item = RelPath> + '_ {
        self.0
            .match_indices('/')
            .map(|(i, _)| RelPath(self.0[..i].to_string()))
            .chain((!self.0.is_empty()).then(|| self.clone()))
    }

    /// Normalises a request path. Relative paths are taken from the workspace
    /// root; absolute paths are accepted only under `host_root` or under
    /// [`CONTAINER_WORKSPACE`]. `..` may not climb above the root.
    pub fn parse(raw: &str, host_root: &Path) -> Result<RelPath, Error> {
        if raw.contains('\0') {
            return Err(Error::InvalidPath {
                path: raw.escape_debug().to_string(),
                why: "it contains a NUL byte",
            });
        }
        let path = Path::new(raw);
        let relative = if path.is_absolute() {
            path.strip_prefix(host_root)
                .or_else(|_| path.strip_prefix(CONTAINER_WORKSPACE))
                .map_err(|_| Error::OutsideWorkspace {
                    path: raw.to_string(),
                })?
        } else {
            path
        };
        let mut parts: Vec<&str> = Vec::new();
        for component in relative.components() {
            match component {
                Component::Normal(name) => {
                    parts.push(name.to_str().ok_or_else(|| Error::InvalidPath {
                        path: raw.to_string(),
                        why: "it is not valid UTF-8",
                    })?)
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err(Error::OutsideWorkspace {
                            path: raw.to_string(),
                        });
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Error::OutsideWorkspace {
                        path: raw.to_string(),
                    });
                }
            }
        }
        Ok(RelPath(parts.join("/")))
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "." } else { &self.0 })
    }
}

/// The workspace root, held open as a directory fd.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    host: PathBuf,
}

impl Root {
    /// Opens `host` (which must be a directory) as a workspace root.
    pub fn at(host: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            host,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // The kernel's record of what was opened, never the caller's string:
        // a path that cannot be resolved this way is refused.
        let host = fd_path(&fd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot learn the real path of the directory (/proc/self/fd): {e}"),
            )
        })?;
        if !host.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("the directory has no reachable path ({})", host.display()),
            ));
        }
        Ok(Root { fd, host })
    }

    /// Canonical host path of the root.
    pub fn host(&self) -> &Path {
        &self.host
    }

    /// The root directory fd.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Normalises a request path against this root (see [`RelPath::parse`]).
    pub fn rel(&self, raw: &str) -> Result<RelPath, Error> {
        RelPath::parse(raw, &self.host)
    }

    /// Opens `rel` beneath the root; the kernel refuses any escape.
    pub fn open(&self, rel: &RelPath, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        // openat2 rejects O_PATH combined with any flag beyond a few.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        // EAGAIN means a concurrent rename raced the lookup; the kernel asks
        // for a retry.
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.fd, rel.as_at_path(), flags, mode, resolve) {
                Err(rustix::io::Errno::AGAIN) if tries < 16 => tries += 1,
                other => return other.map_err(io::Error::from),
            }
        }
    }

    /// Resolves symlinks inside the workspace: the real path of `rel`, itself
    /// relative to the root. Used as the key that serialises writes, so two
    /// spellings of one file share a queue.
    pub fn real(&self, rel: &RelPath) -> io::Result<RelPath> {
        // An atomic write to the same file (temp file renamed over it) may
        // unlink the inode we opened before its path is read: the kernel
        // then reports "<path> (deleted)". The link count, read after the
        // path, tells; the name is simply resolved again.
        let mut tries = 0;
        loop {
            let fd = self.open(rel, OFlags::PATH, Mode::empty())?;
            let real = self.real_of(&fd);
            let replaced = rustix::fs::fstat(&fd).is_ok_and(|st| st.st_nlink == 0);
            if !replaced || tries == 16 {
                return real;
            }
            tries += 1;
        }
    }

    /// Where a path that may not exist yet would land: the real path of its
    /// deepest existing ancestor, joined with the components below it.
    pub fn landing(&self, rel: &RelPath) -> io::Result<RelPath> {
        let parts: Vec<&str> = rel.0.split('/').filter(|c| !c.is_empty()).collect();
        for existing in (0..=parts.len()).rev() {
            match self.real(&RelPath(parts[..existing].join("/"))) {
                Ok(real) => {
                    return Ok(parts[existing..]
                        .iter()
                        .fold(real, |path, name| path.join(name)));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the workspace root is gone",
        ))
    }

    /// The real workspace-relative path of an fd opened beneath the root.
    pub fn real_of(&self, fd: &OwnedFd) -> io::Result<RelPath> {
        let real = fd_path(fd)?;
        let inner = real.strip_prefix(&self.host).map_err(|_| {
            // Only possible if the root itself moved on the host.
            io::Error::new(io::ErrorKind::NotFound, "path left the workspace root")
        })?;
        let inner = inner
            .to_str()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "non-UTF-8 path"))?;
        Ok(RelPath(inner.to_string()))
    }

    /// Creates the directory `rel` and its missing parents, each step
    /// confined beneath the root, owned by `owner` when given.
    pub fn create_dirs(&self, rel: &RelPath, owner: Option<(u32, u32)>) -> io::Result<()> {
        for dir in rel.ancestors_inclusive() {
            match self.open(&dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let Some((parent, name)) = dir.split_last() else {
                continue;
            };
            let parent_fd = self.open(&parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())?;
            let name = OsStr::from_bytes(name.as_bytes());
            match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    if let Some((uid, gid)) = owner {
                        rustix::fs::chownat(
                            &parent_fd,
                            name,
                            Some(rustix::fs::Uid::from_raw(uid)),
                            Some(rustix::fs::Gid::from_raw(gid)),
                            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                        )?;
                    }
                }
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// The path the kernel records for an open fd.
fn fd_path(fd: &impl AsFd) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<String, String> {
        RelPath::parse(raw, Path::new("/srv/ws"))
            .map(|p| p.as_str().to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn normalises_relative_paths() {
        assert_eq!(parse("src/./a.rs").unwrap(), "src/a.rs");
        assert_eq!(parse("src/../b.rs").unwrap(), "b.rs");
        assert_eq!(parse(".").unwrap(), "");
        assert_eq!(parse("").unwrap(), "");
        assert_eq!(parse("a//b/").unwrap(), "a/b");
    }

    #[test]
    fn accepts_absolute_paths_inside() {
        assert_eq!(parse("/srv/ws/src/a.rs").unwrap(), "src/a.rs");
        assert_eq!(parse("/workspace/src/a.rs").unwrap(), "src/a.rs");
    }

    #[test]
    fn refuses_escapes_and_nul() {
        assert!(parse("../x").is_err());
        assert!(parse("a/../../x").is_err());
        assert!(parse("/etc/passwd").is_err());
        assert!(parse("/srv/wsx/a").is_err());
        assert!(parse("/srv/ws/../x").is_err());
        assert!(parse("a\0b").is_err());
    }

    #[test]
    fn splits_and_lists_ancestors() {
        let p = RelPath("a/b/c".into());
        let (parent, name) = p.split_last().unwrap();
        assert_eq!((parent.as_str(), name), ("a/b", "c"));
        let all: Vec<_> = p.ancestors_inclusive().map(|p| p.0).collect();
        assert_eq!(all, ["a", "a/b", "a/b/c"]);
        assert!(RelPath::root().split_last().is_none());
    }
}
