//! Whole-tree pictures of a workspace: what every file, directory and
//! symlink holds at one moment ([`Manifest`]), the content-addressed store
//! that keeps the bytes a picture needs ([`store`]), bringing a workspace
//! back to a picture ([`restore`]) and the difference of two pictures as a
//! listing and a patch ([`changes`]).
//!
//! A scan reads the tree through directory fds, one component at a time,
//! never following a symlink (a command may plant or swap them while we
//! look). It is bounded whatever a command built ([`scan`]): depth,
//! entries, memory, bytes read and time, past which it is refused naming
//! the bound; a file past the per-file bound is recorded unread.
//!
//! Hashing every file on every scan would cost a full read of the tree. A
//! scan is instead given an earlier picture as a cache: a file whose device,
//! inode, size, mtime and ctime are those recorded reuses the recorded hash.
//! A command can set mtime, but not ctime: the kernel sets it to the
//! current time on every change. A recorded hash is trusted only when the
//! file's ctime was already [`scan::SETTLED`] before the earlier scan began (as
//! git treats "racily clean" entries): the kernel stamps ctime from a clock
//! that ticks every few milliseconds, so a file changed twice within one
//! tick around a scan is read again, never taken for unchanged.

pub mod changes;
mod chmod;
pub mod intent;
pub mod restore;
pub mod scan;
pub mod store;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};

pub use scan::{ScanError, ScanLimits, scan, scan_until};

/// A sha256 digest.
pub type Hash = [u8; 32];

/// Mode bits a picture records: set-id and sticky bits are neither
/// recorded nor restored (a restored file never becomes a set-id file, and
/// a restore never touches those bits).
pub const KEPT_MODE: u32 = 0o777;

/// What identifies one version of a file on disk, as `stat` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl Stamp {
    /// A stamp no file on disk has: a picture read back from the disk
    /// trusts none of its hashes for the next scan's cache.
    fn unknown() -> Stamp {
        Stamp {
            dev: u64::MAX,
            ino: u64::MAX,
            size: u64::MAX,
            mtime: (i64::MIN, 0),
            ctime: (i64::MIN, 0),
        }
    }

    fn of(st: &rustix::fs::Stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// One entry of a picture.
#[derive(Debug, Clone)]
pub enum Node {
    /// A directory and its permission bits.
    Dir {
        /// Permission bits ([`KEPT_MODE`]).
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits ([`KEPT_MODE`]).
        mode: u32,
        /// Size in bytes.
        size: u64,
        /// sha256 of the contents; for a file not read (`hashed` false),
        /// a digest of its stamp, which changes whenever the file may have.
        sha256: Hash,
        /// The version of the file the hash was taken from.
        stamp: Stamp,
        /// Whether the contents were read: a file past the scan's
        /// per-file bound never is (see [`scan::ScanLimits`]), and no
        /// store keeps it.
        hashed: bool,
    },
    /// A symlink (never followed) and its target.
    Symlink {
        /// The target, as stored.
        target: Vec<u8>,
    },
    /// A fifo, socket or device node: listed so that a restore removes it,
    /// never kept.
    Special,
}

impl Node {
    /// Same kind, mode and contents (the stamp is not compared).
    pub fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Dir { mode: a }, Node::Dir { mode: b }) => a == b,
            (
                Node::File {
                    mode: ma,
                    sha256: ha,
                    ..
                },
                Node::File {
                    mode: mb,
                    sha256: hb,
                    ..
                },
            ) => ma == mb && ha == hb,
            (Node::Symlink { target: a }, Node::Symlink { target: b }) => a == b,
            (Node::Special, Node::Special) => true,
            _ => false,
        }
    }

    /// Same kind and contents; modes may differ.
    pub fn same_contents(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Dir { .. }, Node::Dir { .. }) => true,
            (Node::File { sha256: a, .. }, Node::File { sha256: b, .. }) => a == b,
            _ => self.same(other),
        }
    }

    fn kind_byte(&self) -> u8 {
        match self {
            Node::Dir { .. } => b'd',
            Node::File { .. } => b'f',
            Node::Symlink { .. } => b'l',
            Node::Special => b's',
        }
    }
}

/// A picture of a whole tree: every entry by its workspace-relative path
/// (bytes, `/`-separated; names need not be UTF-8).
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// Entries in byte order of their paths (a directory before anything
    /// under it).
    pub entries: BTreeMap<Vec<u8>, Node>,
    /// The real-time clock when the scan began (seconds, nanoseconds).
    pub started: (i64, u64),
}

/// A picture as it is written to the disk: one line per entry, each field
/// plain (hex for bytes that need not be text), read back whole or refused.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Stored {
    started: (i64, u64),
    /// `kind mode size sha256 path-hex target-hex`, one per entry.
    entries: Vec<String>,
}

impl Manifest {
    /// The picture in its written form.
    pub fn stored(&self) -> Stored {
        let entries = self
            .entries
            .iter()
            .map(|(path, node)| {
                let path = hex::encode(path);
                match node {
                    Node::Dir { mode } => format!("d {mode} 0 - {path} -"),
                    Node::File {
                        mode,
                        size,
                        sha256,
                        hashed,
                        ..
                    } => {
                        let kind = if *hashed { "f" } else { "u" };
                        format!("{kind} {mode} {size} {} {path} -", hex::encode(sha256))
                    }
                    Node::Symlink { target } => {
                        format!("l 0 0 - {path} {}", hex::encode(target))
                    }
                    Node::Special => format!("s 0 0 - {path} -"),
                }
            })
            .collect();
        Stored {
            started: self.started,
            entries,
        }
    }

    /// A picture read back from its written form; its hashes are never
    /// trusted as a scan's cache (see [`Stamp::unknown`]).
    pub fn from_stored(stored: &Stored) -> Result<Manifest, String> {
        let mut entries = BTreeMap::new();
        for line in &stored.entries {
            let f: Vec<&str> = line.split(' ').collect();
            let bad = || format!("a malformed entry: {line:?}");
            let [kind, mode, size, sha, path, target] = f[..] else {
                return Err(bad());
            };
            let mode: u32 = mode.parse().map_err(|_| bad())?;
            let path = hex::decode(path).map_err(|_| bad())?;
            let node = match kind {
                "d" => Node::Dir { mode },
                "f" | "u" => Node::File {
                    mode,
                    size: size.parse().map_err(|_| bad())?,
                    sha256: hex::decode(sha)
                        .ok()
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(bad)?,
                    stamp: Stamp::unknown(),
                    hashed: kind == "f",
                },
                "l" => Node::Symlink {
                    target: hex::decode(target).map_err(|_| bad())?,
                },
                "s" => Node::Special,
                _ => return Err(bad()),
            };
            entries.insert(path, node);
        }
        Ok(Manifest {
            entries,
            started: stored.started,
        })
    }

    /// A hex sha256 over every entry's path, kind, mode and contents: two
    /// trees with the same digest hold the same files, bytes, modes and
    /// symlinks.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        for (path, node) in &self.entries {
            h.update((path.len() as u64).to_le_bytes());
            h.update(path);
            h.update([node.kind_byte()]);
            match node {
                Node::Dir { mode } => h.update(mode.to_le_bytes()),
                Node::File { mode, sha256, .. } => {
                    h.update(mode.to_le_bytes());
                    h.update(sha256);
                }
                Node::Symlink { target } => {
                    h.update((target.len() as u64).to_le_bytes());
                    h.update(target);
                }
                Node::Special => {}
            }
        }
        hex::encode(h.finalize())
    }

    /// About how many bytes of memory the picture takes.
    pub fn memory(&self) -> usize {
        self.entries
            .iter()
            .map(|(p, n)| {
                scan::entry_memory(p)
                    + match n {
                        Node::Symlink { target } => target.len(),
                        _ => 0,
                    }
            })
            .sum()
    }

    /// Regular files, and the bytes they hold.
    pub fn file_totals(&self) -> (u64, u64) {
        self.entries
            .values()
            .fold((0, 0), |(n, bytes), node| match node {
                Node::File { size, .. } => (n + 1, bytes + size),
                _ => (n, bytes),
            })
    }

    /// The picture as kept: special files dropped.
    fn kept(mut self) -> Manifest {
        self.entries
            .retain(|_, node| !matches!(node, Node::Special));
        self
    }

    /// The hash recorded for `path` if the file on disk (`stamp`) is
    /// provably the version it was taken from (see the module's docs).
    fn cached(&self, path: &[u8], stamp: &Stamp) -> Option<Hash> {
        match self.entries.get(path) {
            Some(Node::File {
                sha256,
                stamp: was,
                hashed: true,
                ..
            }) if was == stamp && scan::settled(stamp.ctime, self.started) => Some(*sha256),
            _ => None,
        }
    }

    /// The first file recorded unread (past the scan's per-file bound), and
    /// its size: a picture holding one cannot be restored.
    pub fn unread(&self) -> Option<(&[u8], u64)> {
        self.entries.iter().find_map(|(p, n)| match n {
            Node::File {
                size,
                hashed: false,
                ..
            } => Some((p.as_slice(), *size)),
            _ => None,
        })
    }
}

/// A path for messages: bytes shown as UTF-8, invalid sequences replaced.
pub fn show(path: &[u8]) -> String {
    if path.is_empty() {
        ".".to_string()
    } else {
        String::from_utf8_lossy(path).into_owned()
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    if !parent.is_empty() {
        p.extend_from_slice(parent);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// The real-time clock now.
fn now() -> (i64, u64) {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_secs() as i64, u64::from(t.subsec_nanos()))
}

/// The names in directory `dir`, sorted, `.` and `..` left out.
pub(crate) fn names(dir: &OwnedFd) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(name.to_vec());
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Opens directory `name` of `dir` for reading, never following a symlink.
pub(crate) fn open_dir(dir: &OwnedFd, name: &[u8]) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        OsStr::from_bytes(name),
        flags,
        Mode::empty(),
    )?)
}

/// Opens the regular file `name` of `dir` for reading, never following a
/// symlink; `O_NONBLOCK` keeps a fifo swapped in from hanging the open.
pub(crate) fn open_file(dir: &OwnedFd, name: &[u8]) -> io::Result<File> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::openat(dir, OsStr::from_bytes(name), flags, Mode::empty())?;
    Ok(File::from(fd))
}

/// sha256 of everything `src` yields.
pub fn hash_reader(src: &mut impl Read) -> io::Result<(Hash, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
        total += n as u64;
    }
    Ok((h.finalize().into(), total))
}

#[cfg(test)]
mod tests;
