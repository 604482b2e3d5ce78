//! Taking a picture of a tree: the walk through directory fds, the hashing
//! of the files it finds, and every bound on what that costs.
//!
//! A command builds the tree, so every cost of a scan is bounded whatever
//! it built ([`ScanLimits`]): depth, entries, the bytes of names held (the
//! picture and the listings being walked), the bytes read to hash, and the
//! time taken. Past a bound the scan is refused, naming the bound; nothing
//! is held past it. A file whose apparent size is past
//! [`ScanLimits::max_file_bytes`] is never read at all (a sparse 1 TiB file
//! costs a `stat`): it is recorded unread, by its stamp (see
//! [`Node::File::hashed`](super::Node)). A scan is also stopped, between
//! files and between chunks of one file, when its caller raises the cancel
//! flag (a client that hung up, a session that closed).
//!
//! Timestamps: the cache trusts a recorded hash only when the file's ctime
//! was settled before the earlier scan began (see the parent module). Where
//! a filesystem stamps whole seconds (ext4 with 128-byte inodes, some lent
//! filesystems), a ctime has no nanoseconds, and a write in the same second
//! as the scan carries the same ctime as one before it: such a ctime is
//! settled only once a whole second (plus the clock tick) lies between it
//! and the scan.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType};
use sha2::{Digest, Sha256};

use super::store::{self, Store};
use super::{Hash, KEPT_MODE, Manifest, Node, Stamp, join, now, open_dir, open_file, show};

/// How long before a scan a file's ctime must lie for the scan's hash of
/// it to be trusted later: well over the kernel's coarse clock tick (at
/// most 10 ms, HZ=100), by which the ctime of a write after the scan began
/// may lag the scan's own clock.
pub const SETTLED: Duration = Duration::from_millis(100);

/// The granularity assumed of a ctime without nanoseconds: the filesystem
/// stamps whole seconds.
pub const COARSE: Duration = Duration::from_secs(1);

/// A file's ctime is settled when it lies [`SETTLED`] before `scan`: no
/// write after the scan began can have left it that old. A ctime of whole
/// seconds (a coarse filesystem, see the module's docs) must lie a further
/// [`COARSE`] before it.
pub(super) fn settled(ctime: (i64, u64), scan: (i64, u64)) -> bool {
    let ns = |(s, n): (i64, u64)| i128::from(s) * 1_000_000_000 + i128::from(n);
    let mut margin = SETTLED.as_nanos() as i128;
    if ctime.1 == 0 {
        margin += COARSE.as_nanos() as i128;
    }
    ns(ctime) + margin <= ns(scan)
}

/// Bounds of one scan.
#[derive(Debug, Clone, Copy)]
pub struct ScanLimits {
    /// Deepest directory level entered (the root is level 0).
    pub max_depth: usize,
    /// Most entries of the whole tree.
    pub max_entries: usize,
    /// Longest path, in bytes: a picture holds every path, so a tree of
    /// long names would otherwise cost the service its size in memory.
    pub max_path_bytes: usize,
    /// Most memory one picture takes (see [`Manifest::memory`]), the names
    /// of the directories being walked counted with it.
    pub max_memory: usize,
    /// Largest file read: one whose apparent size is past it is recorded
    /// unread (a checkpoint, which must keep contents, refuses it).
    pub max_file_bytes: u64,
    /// Most bytes read (to hash or keep) by one scan; files whose hashes
    /// the cache gives are not read.
    pub max_read_bytes: u64,
    /// Longest time one scan takes.
    pub max_time: Duration,
}

impl Default for ScanLimits {
    /// Sized for this machine's rates (sha256 and a copy at ~500 MB/s):
    /// 4 GiB to read is ~10 s, well within the minute; a picture of 64 MiB
    /// holds ~400,000 entries of 60-byte paths.
    fn default() -> Self {
        ScanLimits {
            max_depth: 256,
            max_entries: 1_000_000,
            max_path_bytes: 4096,
            max_memory: 64 << 20,
            max_file_bytes: 1 << 30,
            max_read_bytes: 4 << 30,
            max_time: Duration::from_secs(60),
        }
    }
}

/// Why a scan stopped.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// A directory lies deeper than [`ScanLimits::max_depth`].
    #[error("{path} lies deeper than {limit} directory levels")]
    TooDeep {
        /// The first directory found too deep.
        path: String,
        /// The bound.
        limit: usize,
    },
    /// A path is longer than [`ScanLimits::max_path_bytes`].
    #[error("{path}... is longer than {limit} bytes")]
    PathTooLong {
        /// The path's first bytes.
        path: String,
        /// The bound.
        limit: usize,
    },
    /// The tree holds more than [`ScanLimits::max_entries`] entries.
    #[error("the workspace holds more than {limit} files and directories")]
    TooMany {
        /// The bound.
        limit: usize,
    },
    /// The names of the tree take more than [`ScanLimits::max_memory`].
    #[error("the names of the workspace's files take more than {limit} bytes of memory")]
    TooMuchMemory {
        /// The bound.
        limit: usize,
    },
    /// A file past [`ScanLimits::max_file_bytes`] where its contents must
    /// be kept.
    #[error("{path} holds {size} bytes, over the {limit} a checkpoint keeps of one file")]
    FileTooLarge {
        /// Workspace-relative path.
        path: String,
        /// Its apparent size.
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// The scan would read more than [`ScanLimits::max_read_bytes`].
    #[error("reading the workspace's changed files would pass {limit} bytes")]
    ReadBudget {
        /// The bound.
        limit: u64,
    },
    /// The scan took longer than [`ScanLimits::max_time`].
    #[error("reading the workspace took longer than {} s", limit.as_secs())]
    TimedOut {
        /// The bound.
        limit: Duration,
    },
    /// The caller raised the cancel flag.
    #[error("the scan was cancelled")]
    Cancelled,
    /// An entry could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Workspace-relative path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// The store could not keep a file's contents.
    #[error(transparent)]
    Store(#[from] store::Error),
}

fn io_err(path: &[u8]) -> impl FnOnce(io::Error) -> ScanError + '_ {
    move |source| ScanError::Io {
        path: show(path),
        source,
    }
}

/// What a scan has spent, and what stops it: checked between entries and
/// between chunks read.
struct Meter<'a> {
    limits: ScanLimits,
    deadline: Instant,
    cancel: &'a AtomicBool,
    read: u64,
    /// Why the scan stopped inside a read (the reader's error is plain io).
    stopped: Option<ScanError>,
}

impl Meter<'_> {
    fn check(&self) -> Result<(), ScanError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(ScanError::Cancelled);
        }
        if Instant::now() > self.deadline {
            return Err(ScanError::TimedOut {
                limit: self.limits.max_time,
            });
        }
        if self.read > self.limits.max_read_bytes {
            return Err(ScanError::ReadBudget {
                limit: self.limits.max_read_bytes,
            });
        }
        Ok(())
    }

    /// The error of a failed read: the bound it reached, or the OS error.
    fn read_error(&mut self, path: &[u8], e: io::Error) -> ScanError {
        self.stopped.take().unwrap_or_else(|| io_err(path)(e))
    }
}

/// A file read under the meter: each chunk is counted, and the bounds
/// checked before the next.
struct Metered<'m, 'a, R> {
    inner: R,
    meter: &'m mut Meter<'a>,
}

impl<R: Read> Read for Metered<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Err(e) = self.meter.check() {
            self.meter.stopped = Some(e);
            return Err(io::Error::other("the scan stopped"));
        }
        let n = self.inner.read(buf)?;
        self.meter.read += n as u64;
        Ok(n)
    }
}

/// One directory being scanned.
struct Frame {
    fd: OwnedFd,
    path: Vec<u8>,
    names: std::vec::IntoIter<Vec<u8>>,
    depth: usize,
}

/// What one entry costs a picture in memory (as [`Manifest::memory`]
/// counts it).
pub(super) fn entry_memory(path: &[u8]) -> usize {
    96 + path.len()
}

/// The names in directory `dir`, sorted, `.` and `..` left out; `None` as
/// soon as they would take more than `budget` bytes (or entries), before
/// holding more.
fn names_within(dir: &OwnedFd, budget: usize) -> io::Result<Option<(Vec<Vec<u8>>, usize)>> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        bytes += entry_memory(name);
        if bytes > budget {
            return Ok(None);
        }
        out.push(name.to_vec());
    }
    out.sort_unstable();
    Ok(Some((out, bytes)))
}

/// Scans the tree under `root` (a directory fd, `O_PATH` is enough); see
/// [`scan_until`].
pub fn scan(
    root: &OwnedFd,
    cache: Option<&Manifest>,
    limits: ScanLimits,
    store: Option<&mut Store>,
) -> Result<Manifest, ScanError> {
    scan_until(root, cache, limits, store, &AtomicBool::new(false))
}

/// Scans the tree under `root` (a directory fd, `O_PATH` is enough),
/// stopping with [`ScanError::Cancelled`] once `cancel` is raised.
///
/// `cache` is an earlier picture whose hashes may be reused (see the
/// module's docs). With a `store`, the contents of every file read are
/// kept in it, and the picture returned is the kept one (special files
/// dropped).
pub fn scan_until(
    root: &OwnedFd,
    cache: Option<&Manifest>,
    limits: ScanLimits,
    mut store: Option<&mut Store>,
    cancel: &AtomicBool,
) -> Result<Manifest, ScanError> {
    let mut meter = Meter {
        limits,
        deadline: Instant::now() + limits.max_time,
        cancel,
        read: 0,
        stopped: None,
    };
    let top = open_dir(root, b".").map_err(io_err(b""))?;
    // A page written through a shared mapping while it is dirty changes
    // neither mtime nor ctime; once written back, the next write faults and
    // stamps ctime again. So the cache can only be trusted for what was
    // written back before the scan began.
    if cache.is_some() {
        let _ = rustix::fs::syncfs(&top);
    }
    let started = now();
    let mut entries = BTreeMap::new();
    let root_dev = rustix::fs::fstat(&top)
        .map_err(|e| io_err(b"")(e.into()))?
        .st_dev;
    let too_much = || ScanError::TooMuchMemory {
        limit: limits.max_memory,
    };
    let (first, first_bytes) = names_within(&top, limits.max_memory)
        .map_err(io_err(b""))?
        .ok_or_else(too_much)?;
    let mut stack = vec![Frame {
        names: first.into_iter(),
        fd: top,
        path: Vec::new(),
        depth: 0,
    }];
    let mut held = stack[0].names.len();
    // Memory of the picture so far plus the names listed, not yet taken.
    let mut memory = first_bytes;
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.next() else {
            stack.pop();
            continue;
        };
        meter.check()?;
        held -= 1;
        memory -= entry_memory(&name);
        if entries.len() >= limits.max_entries {
            return Err(ScanError::TooMany {
                limit: limits.max_entries,
            });
        }
        let path = join(&frame.path, &name);
        if path.len() > limits.max_path_bytes {
            return Err(ScanError::PathTooLong {
                path: show(&path[..200.min(path.len())]),
                limit: limits.max_path_bytes,
            });
        }
        memory += entry_memory(&path);
        if memory > limits.max_memory {
            return Err(too_much());
        }
        let st = match rustix::fs::statat(
            &frame.fd,
            OsStr::from_bytes(&name),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            // Removed since the listing: it is not in the picture.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(io_err(&path)(e.into())),
        };
        let node = match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                // Another filesystem mounted inside (only the host can do
                // that) is not the workspace's: left out, never entered.
                if st.st_dev != root_dev {
                    continue;
                }
                if frame.depth + 1 > limits.max_depth {
                    return Err(ScanError::TooDeep {
                        path: show(&path),
                        limit: limits.max_depth,
                    });
                }
                let fd = match open_dir(&frame.fd, &name) {
                    Ok(fd) => fd,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err(&path)(e)),
                };
                let st = rustix::fs::fstat(&fd).map_err(|e| io_err(&path)(e.into()))?;
                let (children, bytes) = names_within(&fd, limits.max_memory - memory)
                    .map_err(io_err(&path))?
                    .ok_or_else(too_much)?;
                memory += bytes;
                held += children.len();
                if held + entries.len() > limits.max_entries.saturating_mul(2) {
                    return Err(ScanError::TooMany {
                        limit: limits.max_entries,
                    });
                }
                let depth = frame.depth + 1;
                entries.insert(
                    path.clone(),
                    Node::Dir {
                        mode: st.st_mode & KEPT_MODE,
                    },
                );
                stack.push(Frame {
                    fd,
                    path,
                    names: children.into_iter(),
                    depth,
                });
                continue;
            }
            FileType::RegularFile => {
                match file_node(
                    &frame.fd,
                    &name,
                    &path,
                    &st,
                    cache,
                    store.as_deref_mut(),
                    &mut meter,
                )? {
                    Some(node) => node,
                    None => continue,
                }
            }
            FileType::Symlink => {
                match rustix::fs::readlinkat(&frame.fd, OsStr::from_bytes(&name), Vec::new()) {
                    Ok(target) => {
                        memory += target.as_bytes().len();
                        if memory > limits.max_memory {
                            return Err(too_much());
                        }
                        Node::Symlink {
                            target: target.into_bytes(),
                        }
                    }
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(io_err(&path)(e.into())),
                }
            }
            _ => Node::Special,
        };
        entries.insert(path, node);
    }
    let manifest = Manifest { entries, started };
    Ok(if store.is_some() {
        manifest.kept()
    } else {
        manifest
    })
}

/// The hash recorded for a file never read: a digest of its stamp, so that
/// it differs whenever the file may have changed (and never equals the
/// sha256 of any contents a scan read, being over a tagged input).
pub(super) fn unread_hash(stamp: &Stamp) -> Hash {
    let mut h = Sha256::new();
    h.update(b"sandboxd unread file\0");
    for n in [stamp.dev, stamp.ino, stamp.size] {
        h.update(n.to_le_bytes());
    }
    for (s, ns) in [stamp.mtime, stamp.ctime] {
        h.update(s.to_le_bytes());
        h.update(ns.to_le_bytes());
    }
    h.finalize().into()
}

/// The node of the regular file `name` (`None`: it vanished).
fn file_node(
    dir: &OwnedFd,
    name: &[u8],
    path: &[u8],
    st: &rustix::fs::Stat,
    cache: Option<&Manifest>,
    store: Option<&mut Store>,
    meter: &mut Meter<'_>,
) -> Result<Option<Node>, ScanError> {
    let stamp = Stamp::of(st);
    let mode = st.st_mode & KEPT_MODE;
    // Past the per-file bound, never opened: its size alone says so, and a
    // sparse file costs nothing whatever it claims to hold.
    if stamp.size > meter.limits.max_file_bytes {
        return Ok(Some(Node::File {
            mode,
            size: stamp.size,
            sha256: unread_hash(&stamp),
            stamp,
            hashed: false,
        }));
    }
    let cached = cache.and_then(|c| c.cached(path, &stamp));
    let sha256 = match (cached, store) {
        (Some(hash), None) => hash,
        (Some(hash), Some(store)) if store.contains(&hash) => hash,
        (_, store) => {
            let file = match open_file(dir, name) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_err(path)(e)),
            };
            // What was opened is what is described: a file swapped in since
            // the stat gets the stamp and mode of the one read.
            let st = rustix::fs::fstat(&file).map_err(|e| io_err(path)(e.into()))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Ok(Some(Node::Special));
            }
            let mut stamp = Stamp::of(&st);
            if stamp.size > meter.limits.max_file_bytes {
                return Ok(Some(Node::File {
                    mode: st.st_mode & KEPT_MODE,
                    size: stamp.size,
                    sha256: unread_hash(&stamp),
                    stamp,
                    hashed: false,
                }));
            }
            // A file that grows while read is read no further than one
            // byte past the bound (and is then recorded unread).
            let limit = meter.limits.max_file_bytes;
            let mut src = Metered {
                inner: file.take(limit.saturating_add(1)),
                meter: &mut *meter,
            };
            let read = match store {
                Some(store) => store.put(&mut src).map_err(|e| match e {
                    store::Error::Read(source) => Err(source),
                    e => Ok(ScanError::Store(e)),
                }),
                None => super::hash_reader(&mut src).map_err(Err),
            };
            let read = read.map_err(|e| match e {
                Ok(e) => e,
                Err(source) => meter.read_error(path, source),
            });
            let (hash, size) = read?;
            stamp.size = size;
            if size > limit {
                return Ok(Some(Node::File {
                    mode: st.st_mode & KEPT_MODE,
                    size,
                    sha256: unread_hash(&stamp),
                    stamp,
                    hashed: false,
                }));
            }
            return Ok(Some(Node::File {
                mode: st.st_mode & KEPT_MODE,
                size,
                sha256: hash,
                stamp,
                hashed: true,
            }));
        }
    };
    Ok(Some(Node::File {
        mode,
        size: stamp.size,
        sha256,
        stamp,
        hashed: true,
    }))
}

#[cfg(test)]
mod tests;
