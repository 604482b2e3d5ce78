//! Tar archives in and out of a workspace.
//!
//! **In** ([`upload`]): the archive (plain tar or gzip, told apart by its
//! first bytes) is read once, as it streams, and every entry is checked and
//! staged in a directory of the service's own inside the workspace before
//! anything lands. Refused, with the entry named: absolute paths and `..`;
//! an entry below a symlink or a file (of the archive or of the workspace);
//! a hard link to anything but a file earlier in the archive; device nodes,
//! fifos and other special types; duplicate names, names that are not
//! UTF-8 or are too long; and archives past the ceilings on bytes, entries,
//! a file's size, or the ratio of expanded to compressed bytes (a gzip
//! bomb is stopped within a megabyte of output past the ratio). A cut-off
//! stream (no end-of-archive block, or a gzip stream without its trailer)
//! is refused too. Extension records (GNU long names and links, PAX
//! headers) are bounded before they are read (see `read`). Set-id and
//! sticky bits are dropped; owners are the
//! workspace's. Only once the whole archive is staged and checked do its
//! entries land, each by a rename (see [`restore::land`]): a failure there
//! is undone. A refused archive changes nothing.
//!
//! Where staged entries land, checked against the workspace and the
//! policy, is the `plan` module's job; archives out are [`download`]'s.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Timestamps, Uid};

mod download;
mod plan;
mod read;

pub use download::{DownloadError, DownloadOptions, Downloaded, MAX_SKIPPED_LISTED, download};
pub use read::{Extension, MAX_PAX_BYTES};

use super::tree::intent::Intents;
use super::tree::restore::{self, Stage, Step};
use super::tree::show;
use plan::{PlannedStep, plan};

/// Most levels of an entry's path.
pub const MAX_DEPTH: usize = 256;

/// Ceilings of one upload.
#[derive(Debug, Clone, Copy)]
pub struct UploadLimits {
    /// Most bytes of file contents, all entries together.
    pub max_bytes: u64,
    /// Largest single file.
    pub max_file_bytes: u64,
    /// Most entries.
    pub max_entries: u64,
    /// Longest entry path, in bytes.
    pub max_path_bytes: usize,
    /// Most bytes of tar per compressed byte, once past a megabyte.
    pub max_ratio: u64,
}

impl Default for UploadLimits {
    fn default() -> Self {
        UploadLimits {
            max_bytes: 1 << 30,
            max_file_bytes: 512 << 20,
            max_entries: 200_000,
            max_path_bytes: 4096,
            max_ratio: 200,
        }
    }
}

/// What an upload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uploaded {
    /// Regular files (hard links included).
    pub files: u64,
    /// Directories listed in the archive.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Bytes of file contents.
    pub bytes: u64,
    /// Entries whose set-id or sticky bits were dropped.
    pub stripped: u64,
    /// Files and symlinks that replaced ones already in the workspace.
    pub replaced: u64,
}

/// Why an archive entry is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsafe {
    /// An absolute path.
    Absolute,
    /// A `..` component.
    DotDot,
    /// Below a symlink (of the archive, or of the workspace).
    ThroughSymlink(String),
    /// Below something that is not a directory.
    BelowFile(String),
    /// A hard link to something that is not a file earlier in the archive.
    HardLinkOutside(String),
    /// A device node, fifo or other special type.
    Special(&'static str),
}

/// Why an archive entry's name is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadName {
    /// The name appeared before.
    Duplicate,
    /// Not UTF-8.
    NotUtf8,
    /// Longer than the ceiling.
    TooLong(usize),
    /// More levels than the ceiling.
    TooDeep(usize),
    /// Nothing left once `.` and `/` are dropped.
    Empty,
}

/// Which ceiling an upload passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ceiling {
    /// [`UploadLimits::max_bytes`]
    Bytes,
    /// [`UploadLimits::max_file_bytes`]
    FileBytes,
    /// [`UploadLimits::max_entries`]
    Entries,
}

/// Why an upload was refused. The workspace is as it was.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An entry is unsafe to extract.
    #[error("entry {entry}: unsafe ({why:?})")]
    Unsafe {
        /// The entry's path as in the archive.
        entry: String,
        /// Why.
        why: Unsafe,
    },
    /// An entry's name cannot be used.
    #[error("entry {entry}: bad name ({why:?})")]
    BadName {
        /// The entry's path as in the archive.
        entry: String,
        /// Why.
        why: BadName,
    },
    /// A ceiling was passed.
    #[error("past the {what:?} ceiling of {limit}")]
    TooLarge {
        /// Which.
        what: Ceiling,
        /// Its value.
        limit: u64,
        /// The entry that passed it.
        entry: String,
    },
    /// The archive expands more than the ratio allows.
    #[error("expands more than {ratio}:1")]
    Bomb {
        /// The ratio allowed.
        ratio: u64,
    },
    /// An extension record (long name, long link, PAX) is larger than its
    /// bound: refused from its header, before any of it is read.
    #[error("a {what} of {size} bytes is past its bound of {limit} bytes")]
    HeaderTooLarge {
        /// Which kind of record.
        what: Extension,
        /// The size its header gives.
        size: u64,
        /// The bound.
        limit: u64,
    },
    /// Not a tar archive, a corrupt one, or one cut short.
    #[error("malformed archive: {0}")]
    Malformed(String),
    /// An entry would land on something it may not replace.
    #[error("{path}: {why}")]
    Conflict {
        /// Workspace-relative path.
        path: String,
        /// Why.
        why: &'static str,
    },
    /// The destination is not a usable workspace path.
    #[error("destination {0:?} is not a path inside the workspace")]
    Destination(String),
    /// The session's policy refuses a write where an entry lands.
    #[error("refused by policy: {0:?}")]
    Denied(crate::policy::Denial),
    /// Staging or landing failed (and was undone).
    #[error(transparent)]
    Land(#[from] restore::Error),
    /// Reading the stream failed.
    #[error("read the archive: {0}")]
    Read(io::Error),
}

/// An entry staged, waiting to land.
enum Staged {
    Dir { mode: u32 },
    Entry { n: usize, symlink: bool },
}

/// Normalises an entry's path: `./` and empty components dropped; refused
/// if absolute, with `..`, not UTF-8, empty or too long.
fn normalise(raw: &[u8], max: usize) -> Result<String, Error> {
    let shown = show(raw);
    if raw.first() == Some(&b'/') {
        return Err(Error::Unsafe {
            entry: shown,
            why: Unsafe::Absolute,
        });
    }
    let mut parts = Vec::new();
    for c in raw.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                return Err(Error::Unsafe {
                    entry: shown,
                    why: Unsafe::DotDot,
                });
            }
            c => parts.push(c),
        }
    }
    let bad = |why| Error::BadName {
        entry: shown.clone(),
        why,
    };
    if parts.is_empty() {
        return Err(bad(BadName::Empty));
    }
    let joined = parts.join(&b'/');
    if joined.len() > max || parts.iter().any(|p| p.len() > 255) {
        return Err(bad(BadName::TooLong(max)));
    }
    // Checkpoints and changes picture no deeper tree.
    if parts.len() > MAX_DEPTH {
        return Err(bad(BadName::TooDeep(MAX_DEPTH)));
    }
    String::from_utf8(joined).map_err(|_| bad(BadName::NotUtf8))
}

fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// Reads the archive from `src` into `dest` (a workspace-relative
/// directory, made if missing) under `root`, all or nothing. `allow` is
/// asked about every path an entry lands on (the session's policy).
pub fn upload(
    root: &OwnedFd,
    intents: Option<&Intents>,
    dest: &str,
    src: impl Read,
    limits: UploadLimits,
    owner: Option<(u32, u32)>,
    allow: &dyn Fn(&str) -> Result<(), crate::policy::Denial>,
) -> Result<Uploaded, Error> {
    let dest = normalise_dest(dest)?;
    let stage = Stage::new(root, "upload", intents)?;
    let result = (|| {
        let (entries, order, stats) = extract(src, stage.fd(), limits, owner)?;
        let steps_owned = plan(root, &dest, &entries, &order, allow)?;
        let steps: Vec<Step<'_>> = steps_owned.iter().map(PlannedStep::as_step).collect();
        let replaced = steps
            .iter()
            .filter(|s| matches!(s, Step::Exchange(..)))
            .count() as u64;
        restore::land(root, &stage, &steps, owner)?;
        Ok(Uploaded { replaced, ..stats })
    })();
    stage.remove(root);
    result
}

fn normalise_dest(dest: &str) -> Result<String, Error> {
    let trimmed = dest
        .strip_prefix(super::path::CONTAINER_WORKSPACE)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .map(|rest| rest.trim_start_matches('/'))
        .unwrap_or(dest);
    // `.`, `./` and `/workspace/.` name the root, as in every other tool.
    if trimmed.split('/').all(|c| c.is_empty() || c == ".") {
        return Ok(String::new());
    }
    normalise(trimmed.as_bytes(), 4096).map_err(|_| Error::Destination(dest.to_string()))
}

type Extracted = (HashMap<String, Staged>, Vec<String>, Uploaded);

/// Reads every entry, checks it and stages it.
fn extract(
    src: impl Read,
    stage: &OwnedFd,
    limits: UploadLimits,
    owner: Option<(u32, u32)>,
) -> Result<Extracted, Error> {
    let ratio = limits.max_ratio;
    let mut expanded = read::open(src, ratio)?;
    let mut entries: HashMap<String, Staged> = HashMap::new();
    let mut order = Vec::new();
    let mut stats = Uploaded::default();
    let mut count = 0u64;
    {
        let mut archive = tar::Archive::new(&mut expanded);
        let mut iter =
            read::Entries::new(&mut archive, limits.max_path_bytes, limits.max_bytes, ratio)?;
        while let Some(read::Entry {
            inner: mut entry,
            path: raw_path,
            link,
        }) = iter.next_entry()?
        {
            count += 1;
            if count > limits.max_entries {
                return Err(Error::TooLarge {
                    what: Ceiling::Entries,
                    limit: limits.max_entries,
                    entry: show(&raw_path),
                });
            }
            let header = entry.header();
            let kind = header.entry_type();
            // `tar -C dir -c .` starts with `./`: the destination itself.
            if kind == tar::EntryType::Directory
                && raw_path
                    .split(|b| *b == b'/')
                    .all(|c| c.is_empty() || c == b".")
            {
                continue;
            }
            let path = normalise(&raw_path, limits.max_path_bytes)?;
            check_parents(&path, &entries)?;
            let mode = header.mode().unwrap_or(0o644);
            if mode & 0o7000 != 0 {
                stats.stripped += 1;
            }
            let mode = mode & 0o777;
            let n = order.len();
            let staged = match kind {
                tar::EntryType::Directory => {
                    match entries.get(&path) {
                        // A directory listed twice is the same directory.
                        Some(Staged::Dir { .. }) => continue,
                        Some(_) => return Err(duplicate(&path)),
                        None => {}
                    }
                    stats.dirs += 1;
                    Staged::Dir { mode }
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let size = entry.size();
                    if size > limits.max_file_bytes {
                        return Err(Error::TooLarge {
                            what: Ceiling::FileBytes,
                            limit: limits.max_file_bytes,
                            entry: path,
                        });
                    }
                    if stats.bytes + size > limits.max_bytes {
                        return Err(Error::TooLarge {
                            what: Ceiling::Bytes,
                            limit: limits.max_bytes,
                            entry: path,
                        });
                    }
                    let mtime = header.mtime().ok();
                    stage_file(stage, n, &mut entry, mode, mtime, owner, &path).map_err(
                        |e| match e {
                            StageError::Read(e) => read::read_err(e, ratio),
                            StageError::Write(e) => Error::Land(e),
                        },
                    )?;
                    stats.files += 1;
                    stats.bytes += size;
                    Staged::Entry { n, symlink: false }
                }
                tar::EntryType::Symlink => {
                    let target = link.clone();
                    if target.is_empty() || target.contains(&0) {
                        return Err(Error::Malformed(format!("symlink {path} has no target")));
                    }
                    rustix::fs::symlinkat(
                        OsStr::from_bytes(&target),
                        stage,
                        n.to_string().as_str(),
                    )
                    .map_err(|e| stage_err(&path, e.into()))?;
                    if let Some((uid, gid)) = owner {
                        rustix::fs::chownat(
                            stage,
                            n.to_string().as_str(),
                            Some(Uid::from_raw(uid)),
                            Some(Gid::from_raw(gid)),
                            AtFlags::SYMLINK_NOFOLLOW,
                        )
                        .map_err(|e| stage_err(&path, e.into()))?;
                    }
                    stats.symlinks += 1;
                    Staged::Entry { n, symlink: true }
                }
                tar::EntryType::Link => {
                    let target = link.clone();
                    let outside = || Error::Unsafe {
                        entry: path.clone(),
                        why: Unsafe::HardLinkOutside(show(&target)),
                    };
                    let to = normalise(&target, limits.max_path_bytes).map_err(|_| outside())?;
                    let Some(Staged::Entry {
                        n: to,
                        symlink: false,
                    }) = entries.get(&to)
                    else {
                        return Err(outside());
                    };
                    rustix::fs::linkat(
                        stage,
                        to.to_string().as_str(),
                        stage,
                        n.to_string().as_str(),
                        AtFlags::empty(),
                    )
                    .map_err(|e| stage_err(&path, e.into()))?;
                    stats.files += 1;
                    Staged::Entry { n, symlink: false }
                }
                tar::EntryType::Char => return Err(special(&path, "a character device")),
                tar::EntryType::Block => return Err(special(&path, "a block device")),
                tar::EntryType::Fifo => return Err(special(&path, "a fifo")),
                tar::EntryType::GNUSparse => return Err(special(&path, "a sparse file")),
                _ => return Err(special(&path, "an entry of an unknown type")),
            };
            if entries.contains_key(&path) {
                return Err(duplicate(&path));
            }
            entries.insert(path.clone(), staged);
            order.push(path);
        }
    }
    // The iteration also ends at the end of the stream: without the zero
    // block that ends a tar archive, it was cut short.
    if expanded.eof {
        return Err(Error::Malformed(
            "the stream ends before the end-of-archive block: it was cut short (or is empty)"
                .into(),
        ));
    }
    // What follows the end (padding, the gzip trailer) is read through, so
    // a gzip stream cut short or corrupt is refused too.
    io::copy(&mut expanded, &mut io::sink()).map_err(|e| read::read_err(e, ratio))?;
    Ok((entries, order, stats))
}

fn duplicate(path: &str) -> Error {
    Error::BadName {
        entry: path.to_string(),
        why: BadName::Duplicate,
    }
}

fn special(path: &str, what: &'static str) -> Error {
    Error::Unsafe {
        entry: path.to_string(),
        why: Unsafe::Special(what),
    }
}

fn stage_err(path: &str, source: io::Error) -> Error {
    Error::Land(restore::Error::new("stage", path, source))
}

/// No entry lies below a symlink or a file of the archive itself.
fn check_parents(path: &str, entries: &HashMap<String, Staged>) -> Result<(), Error> {
    for a in ancestors(path) {
        match entries.get(a) {
            Some(Staged::Entry { symlink: true, .. }) => {
                return Err(Error::Unsafe {
                    entry: path.to_string(),
                    why: Unsafe::ThroughSymlink(a.to_string()),
                });
            }
            Some(Staged::Entry { symlink: false, .. }) => {
                return Err(Error::Unsafe {
                    entry: path.to_string(),
                    why: Unsafe::BelowFile(a.to_string()),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

enum StageError {
    Read(io::Error),
    Write(restore::Error),
}

fn stage_file(
    stage: &OwnedFd,
    n: usize,
    src: &mut impl Read,
    mode: u32,
    mtime: Option<u64>,
    owner: Option<(u32, u32)>,
    path: &str,
) -> Result<(), StageError> {
    let w = |e: io::Error| StageError::Write(restore::Error::new("stage", path, e));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(
        stage,
        n.to_string().as_str(),
        flags,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| w(e.into()))?;
    let mut file = File::from(fd);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let got = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StageError::Read(e)),
        };
        file.write_all(&buf[..got]).map_err(w)?;
    }
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(|e| w(e.into()))?;
    }
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(|e| w(e.into()))?;
    if let Some(secs) = mtime {
        let t = rustix::fs::Timespec {
            tv_sec: i64::try_from(secs).unwrap_or(i64::MAX),
            tv_nsec: 0,
        };
        let times = Timestamps {
            last_access: t,
            last_modification: t,
        };
        rustix::fs::futimens(&file, &times).map_err(|e| w(e.into()))?;
    }
    Ok(())
}
