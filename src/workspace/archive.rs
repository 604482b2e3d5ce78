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
//! is refused too. Set-id and sticky bits are dropped; owners are the
//! workspace's. Only once the whole archive is staged and checked do its
//! entries land, each by a rename (see [`restore::land`]): a failure there
//! is undone. A refused archive changes nothing.
//!
//! **Out** ([`download`]): a tar stream of a directory (or file) of the
//! workspace, written as it is walked. Symlinks are stored as symlinks and
//! never followed; special files are left out; a directory deeper than the
//! depth bound, or a name that is not UTF-8 in `.gitignore` mode, is left
//! out and reported, so any tree a command can make is walked in bounded
//! memory and fds. Past the size ceiling the download stops with an error.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Timestamps, Uid};

use super::tree::restore::{self, Stage, Step};
use super::tree::{open_dir, open_file, show};

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

/// Marks a read error that is the ratio guard's, not the stream's.
#[derive(Debug)]
struct RatioPassed;

impl std::fmt::Display for RatioPassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the archive expands past the ratio ceiling")
    }
}

impl std::error::Error for RatioPassed {}

/// Counts what passes through; remembers whether the end was reached.
struct Counted<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
    eof: bool,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// The expanded stream, refusing to go past `ratio` times the compressed
/// bytes read (once past a megabyte).
struct Ratio<R> {
    inner: R,
    out: u64,
    compressed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ratio: u64,
    eof: bool,
}

impl<R: Read> Read for Ratio<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        self.out += n as u64;
        let compressed = self
            .compressed
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1);
        if self.out > (1 << 20) && self.out > compressed.saturating_mul(self.ratio) {
            return Err(io::Error::other(RatioPassed));
        }
        Ok(n)
    }
}

fn read_err(e: io::Error, ratio: u64) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<RatioPassed>()) {
        return Error::Bomb { ratio };
    }
    match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::Malformed("the stream ends inside an entry".into()),
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::Other => {
            Error::Malformed(e.to_string())
        }
        _ => Error::Read(e),
    }
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
    dest: &str,
    src: impl Read,
    limits: UploadLimits,
    owner: Option<(u32, u32)>,
    allow: &dyn Fn(&str) -> Result<(), crate::policy::Denial>,
) -> Result<Uploaded, Error> {
    let dest = normalise_dest(dest)?;
    let stage = Stage::new(root, "upload")?;
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
    if trimmed.trim_matches('/').is_empty() {
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
    let compressed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut raw = BufReader::with_capacity(
        256 * 1024,
        Counted {
            inner: src,
            count: std::sync::Arc::clone(&compressed),
            eof: false,
        },
    );
    let head = raw.fill_buf().map_err(Error::Read)?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        return Err(Error::Malformed(
            "zstd is not accepted: send a plain or gzip-compressed tar".into(),
        ));
    }
    let decoded: Box<dyn Read> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(raw))
    } else {
        Box::new(raw)
    };
    let mut expanded = Ratio {
        inner: decoded,
        out: 0,
        compressed,
        ratio: limits.max_ratio,
        eof: false,
    };
    let mut entries: HashMap<String, Staged> = HashMap::new();
    let mut order = Vec::new();
    let mut stats = Uploaded::default();
    let mut count = 0u64;
    {
        let mut archive = tar::Archive::new(&mut expanded);
        let iter = archive
            .entries()
            .map_err(|e| read_err(e, limits.max_ratio))?;
        for entry in iter {
            let mut entry = entry.map_err(|e| read_err(e, limits.max_ratio))?;
            count += 1;
            let raw_path = entry.path_bytes().into_owned();
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
                            StageError::Read(e) => read_err(e, limits.max_ratio),
                            StageError::Write(e) => Error::Land(e),
                        },
                    )?;
                    stats.files += 1;
                    stats.bytes += size;
                    Staged::Entry { n, symlink: false }
                }
                tar::EntryType::Symlink => {
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
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
                    let target = entry.link_name_bytes().unwrap_or_default().into_owned();
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
                // Metadata of the archive itself, not entries.
                tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
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
    io::copy(&mut expanded, &mut io::sink()).map_err(|e| read_err(e, limits.max_ratio))?;
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

/// A step of the landing plan, owning its path.
enum PlannedStep {
    MakeDir(Vec<u8>),
    Place(Vec<u8>, usize),
    Exchange(Vec<u8>, usize),
    Chmod(Vec<u8>, u32),
}

impl PlannedStep {
    fn as_step(&self) -> Step<'_> {
        match self {
            PlannedStep::MakeDir(p) => Step::MakeDir(p),
            PlannedStep::Place(p, n) => Step::Place(p, *n),
            PlannedStep::Exchange(p, n) => Step::Exchange(p, *n),
            PlannedStep::Chmod(p, m) => Step::Chmod(p, *m),
        }
    }
}

/// What is at a workspace path now, never following a symlink.
#[derive(Clone, Copy, PartialEq, Eq)]
enum There {
    Nothing,
    Dir,
    Symlink,
    Other,
}

/// Looks at workspace paths one component at a time, never following a
/// symlink, keeping the directories of the last path open: entries come in
/// path order, so most lookups open nothing.
struct Looker {
    base: OwnedFd,
    /// Open directories below `base`, by name, outermost first.
    chain: Vec<(String, OwnedFd)>,
}

impl Looker {
    fn new(root: &OwnedFd) -> Result<Looker, Error> {
        Ok(Looker {
            base: open_dir(root, b".").map_err(|e| stage_err("", e))?,
            chain: Vec::new(),
        })
    }

    /// What is at `path`. An ancestor that is a symlink or not a directory
    /// is refused (`entry` would be written through or below it).
    fn there(&mut self, path: &str, entry: &str) -> Result<There, Error> {
        let parts: Vec<&str> = path.split('/').collect();
        let (last, dirs) = parts.split_last().expect("split yields one part");
        let keep = self
            .chain
            .iter()
            .zip(dirs)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.chain.truncate(keep);
        for (i, name) in dirs.iter().enumerate().skip(keep) {
            let dir = self.chain.last().map_or(&self.base, |(_, fd)| fd);
            let at = || parts[..=i].join("/");
            match Self::kind(dir, name, path)? {
                There::Nothing => return Ok(There::Nothing),
                There::Dir => {}
                There::Symlink => {
                    return Err(Error::Unsafe {
                        entry: entry.to_string(),
                        why: Unsafe::ThroughSymlink(at()),
                    });
                }
                There::Other => {
                    return Err(Error::Unsafe {
                        entry: entry.to_string(),
                        why: Unsafe::BelowFile(at()),
                    });
                }
            }
            let fd = open_dir(dir, name.as_bytes()).map_err(|e| stage_err(path, e))?;
            self.chain.push((name.to_string(), fd));
        }
        let dir = self.chain.last().map_or(&self.base, |(_, fd)| fd);
        Self::kind(dir, last, path)
    }

    fn kind(dir: &OwnedFd, name: &str, path: &str) -> Result<There, Error> {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => There::Dir,
                FileType::Symlink => There::Symlink,
                _ => There::Other,
            }),
            Err(rustix::io::Errno::NOENT) => Ok(There::Nothing),
            Err(e) => Err(stage_err(path, e.into())),
        }
    }
}

/// The steps that land the staged entries under `dest`, checked against
/// the workspace and the policy first.
fn plan(
    root: &OwnedFd,
    dest: &str,
    entries: &HashMap<String, Staged>,
    order: &[String],
    allow: &dyn Fn(&str) -> Result<(), crate::policy::Denial>,
) -> Result<Vec<PlannedStep>, Error> {
    let at = |p: &str| {
        if dest.is_empty() {
            p.to_string()
        } else {
            format!("{dest}/{p}")
        }
    };
    let mut steps = Vec::new();
    let mut made: HashSet<String> = HashSet::new();
    let mut modes = Vec::new();
    let mut looker = Looker::new(root)?;
    // The destination and every directory an entry needs, made if missing.
    let mut ensure_dir = |looker: &mut Looker,
                          path: &str,
                          entry: &str,
                          steps: &mut Vec<PlannedStep>| {
        if path.is_empty() || made.contains(path) {
            return Ok(false);
        }
        let kind = looker.there(path, entry)?;
        let new = match kind {
            There::Dir => false,
            There::Nothing => {
                steps.push(PlannedStep::MakeDir(path.as_bytes().to_vec()));
                true
            }
            // Something below it is to be written: through the symlink.
            There::Symlink if path != entry => {
                return Err(Error::Unsafe {
                    entry: entry.to_string(),
                    why: Unsafe::ThroughSymlink(path.to_string()),
                });
            }
            _ => {
                return Err(Error::Conflict {
                    path: path.to_string(),
                    why: "a directory of the archive would replace a file or symlink of the workspace",
                });
            }
        };
        made.insert(path.to_string());
        Ok(new)
    };
    let mut sorted: Vec<&String> = order.iter().collect();
    sorted.sort();
    for p in [dest]
        .into_iter()
        .flat_map(|d| ancestors(d).chain((!d.is_empty()).then_some(d)))
    {
        // Anything written there is written through it.
        if ensure_dir(&mut looker, p, &format!("{dest}/"), &mut steps)? {
            modes.push((p.to_string(), 0o755));
        }
    }
    for rel in sorted {
        let path = at(rel);
        for a in ancestors(rel) {
            let full = at(a);
            if ensure_dir(&mut looker, &full, &path, &mut steps)? && !entries.contains_key(a) {
                modes.push((full, 0o755));
            }
        }
        match &entries[rel] {
            Staged::Dir { mode } => {
                if ensure_dir(&mut looker, &path, &path, &mut steps)? {
                    modes.push((path, *mode));
                }
            }
            Staged::Entry { n, .. } => {
                allow(&path).map_err(Error::Denied)?;
                match looker.there(&path, &path)? {
                    There::Nothing => steps.push(PlannedStep::Place(path.into_bytes(), *n)),
                    There::Dir => {
                        return Err(Error::Conflict {
                            path,
                            why: "a file of the archive would replace a directory of the workspace",
                        });
                    }
                    There::Symlink | There::Other => {
                        steps.push(PlannedStep::Exchange(path.into_bytes(), *n))
                    }
                }
            }
        }
    }
    // Modes of new directories last, deepest first.
    modes.sort_by(|a, b| b.0.cmp(&a.0));
    steps.extend(
        modes
            .into_iter()
            .map(|(p, m)| PlannedStep::Chmod(p.into_bytes(), m)),
    );
    Ok(steps)
}

/// What a download wrote, and what it left out.
#[derive(Debug, Clone, Default)]
pub struct Downloaded {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Bytes of file contents.
    pub bytes: u64,
    /// Paths left out, and why (at most [`MAX_SKIPPED_LISTED`]).
    pub skipped: Vec<(String, &'static str)>,
    /// Paths left out in all.
    pub skipped_count: u64,
}

/// Most left-out paths a download names.
pub const MAX_SKIPPED_LISTED: usize = 100;

/// Options of one download.
#[derive(Debug, Clone, Copy)]
pub struct DownloadOptions {
    /// Most bytes of file contents; past it the download fails.
    pub max_bytes: u64,
    /// Deepest directory level entered below the start.
    pub max_depth: usize,
    /// Leave out what `.gitignore` files ignore, and `.git`.
    pub gitignore: bool,
}

/// Why a download failed.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// The start path is not in the workspace, or not there.
    #[error(transparent)]
    Path(#[from] super::Error),
    /// Past the size ceiling.
    #[error("the files hold more than {limit} bytes")]
    TooLarge {
        /// The ceiling.
        limit: u64,
    },
    /// Reading the workspace failed.
    #[error("read {path}: {source}")]
    Read {
        /// Workspace-relative path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// The receiver went away or the stream could not be written.
    #[error("write the archive: {0}")]
    Write(io::Error),
    /// A walk bound (`.gitignore` mode).
    #[error(transparent)]
    Walk(#[from] super::walk::WalkError),
}

/// Writes a tar archive of `start` (a workspace-relative directory or
/// file) under `root` to `out`: a directory's entries are named relative
/// to it, a file by its own name.
pub fn download(
    root: &super::path::Root,
    start: &super::path::RelPath,
    opts: DownloadOptions,
    walk_limits: &super::walk::WalkLimits,
    out: impl Write,
) -> Result<Downloaded, DownloadError> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let mut done = Downloaded::default();
    let mut writer = Writer {
        tar: &mut tar,
        done: &mut done,
        max_bytes: opts.max_bytes,
    };
    // The start, opened one component at a time.
    let parent_and_name = start.split_last();
    let mut dir = open_dir(root.fd(), b".").map_err(|e| read_err_at("", e))?;
    if let Some((parent, name)) = &parent_and_name {
        for c in parent.as_str().split('/').filter(|c| !c.is_empty()) {
            dir = open_dir(&dir, c.as_bytes()).map_err(|e| read_err_at(parent.as_str(), e))?;
        }
        let st = rustix::fs::statat(&dir, *name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| read_err_at(start.as_str(), e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            writer.entry(&dir, name.as_bytes(), name.as_bytes(), &st)?;
            tar.finish().map_err(DownloadError::Write)?;
            return Ok(done);
        }
        dir = open_dir(&dir, name.as_bytes()).map_err(|e| read_err_at(start.as_str(), e))?;
    }
    if opts.gitignore {
        let mut visit = |rel: &super::path::RelPath,
                         dir: &OwnedFd,
                         name: &str,
                         kind: super::walk::Kind|
         -> io::Result<super::walk::Flow> {
            let inner = rel
                .as_str()
                .strip_prefix(start.as_str())
                .unwrap_or(rel.as_str())
                .trim_start_matches('/');
            let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(super::walk::Flow::Continue),
                Err(e) => return Err(e.into()),
            };
            let _ = kind;
            writer
                .entry(dir, name.as_bytes(), inner.as_bytes(), &st)
                .map_err(|e| match e {
                    DownloadError::Write(e) => e,
                    other => io::Error::other(other.to_string()),
                })?;
            Ok(super::walk::Flow::Continue)
        };
        super::walk::walk_all(root, start, walk_limits, opts.max_depth, &mut visit)?;
    } else {
        writer.tree(dir, opts.max_depth)?;
    }
    tar.finish().map_err(DownloadError::Write)?;
    Ok(done)
}

fn read_err_at(path: &str, source: io::Error) -> DownloadError {
    DownloadError::Read {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        source,
    }
}

struct Writer<'a, W: Write> {
    tar: &'a mut tar::Builder<W>,
    done: &'a mut Downloaded,
    max_bytes: u64,
}

impl<W: Write> Writer<'_, W> {
    fn skip(&mut self, path: &[u8], why: &'static str) {
        self.done.skipped_count += 1;
        if self.done.skipped.len() < MAX_SKIPPED_LISTED {
            self.done.skipped.push((show(path), why));
        }
    }

    /// Writes the entry `name` of `dir` (stat `st`) as `path`.
    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &[u8],
        st: &rustix::fs::Stat,
    ) -> Result<(), DownloadError> {
        let mut header = tar::Header::new_gnu();
        header.set_mode(st.st_mode & 0o777);
        header.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
        let os = OsStr::from_bytes(path);
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                self.tar
                    .append_data(&mut header, os, io::empty())
                    .map_err(DownloadError::Write)?;
                self.done.dirs += 1;
            }
            FileType::Symlink => {
                let target = match rustix::fs::readlinkat(dir, OsStr::from_bytes(name), Vec::new())
                {
                    Ok(t) => t.into_bytes(),
                    Err(rustix::io::Errno::NOENT) => return Ok(()),
                    Err(e) => return Err(read_err_at(&show(path), e.into())),
                };
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                self.tar
                    .append_link(&mut header, os, OsStr::from_bytes(&target))
                    .map_err(DownloadError::Write)?;
                self.done.symlinks += 1;
            }
            FileType::RegularFile => {
                let file = match open_file(dir, name) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(read_err_at(&show(path), e)),
                };
                let st =
                    rustix::fs::fstat(&file).map_err(|e| read_err_at(&show(path), e.into()))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    self.skip(path, "not a regular file when opened");
                    return Ok(());
                }
                let size = st.st_size as u64;
                if self.done.bytes + size > self.max_bytes {
                    return Err(DownloadError::TooLarge {
                        limit: self.max_bytes,
                    });
                }
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                // Exactly `size` bytes, whatever the file does meanwhile.
                let body = Exact {
                    inner: file.take(size),
                    left: size,
                };
                self.tar
                    .append_data(&mut header, os, body)
                    .map_err(DownloadError::Write)?;
                self.done.files += 1;
                self.done.bytes += size;
            }
            _ => self.skip(path, "a special file (fifo, socket or device)"),
        }
        Ok(())
    }

    /// Writes everything below the directory `top`, iteratively, at most
    /// `max_depth` levels down.
    fn tree(&mut self, top: OwnedFd, max_depth: usize) -> Result<(), DownloadError> {
        struct Frame {
            fd: OwnedFd,
            path: Vec<u8>,
            names: std::vec::IntoIter<Vec<u8>>,
            depth: usize,
        }
        let names = |fd: &OwnedFd, path: &[u8]| -> Result<Vec<Vec<u8>>, DownloadError> {
            super::tree::names(fd).map_err(|e| read_err_at(&show(path), e))
        };
        let first = names(&top, b"")?;
        let mut stack = vec![Frame {
            fd: top,
            path: Vec::new(),
            names: first.into_iter(),
            depth: 0,
        }];
        while let Some(frame) = stack.last_mut() {
            let Some(name) = frame.names.next() else {
                stack.pop();
                continue;
            };
            let mut path = frame.path.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            let st = match rustix::fs::statat(
                &frame.fd,
                OsStr::from_bytes(&name),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(read_err_at(&show(&path), e.into())),
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                if frame.depth + 1 > max_depth {
                    self.skip(&path, "deeper than the depth bound");
                    continue;
                }
                let fd = match open_dir(&frame.fd, &name) {
                    Ok(fd) => fd,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(read_err_at(&show(&path), e)),
                };
                self.entry(&frame.fd, &name, &path, &st)?;
                let children = names(&fd, &path)?;
                let depth = frame.depth + 1;
                stack.push(Frame {
                    fd,
                    path,
                    names: children.into_iter(),
                    depth,
                });
            } else {
                let fd = &stack.last().expect("non-empty").fd;
                self.entry(fd, &name, &path, &st)?;
            }
        }
        Ok(())
    }
}

/// Yields exactly `left` bytes: the file's, then zeros if it shrank.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            buf[..want].fill(0);
            n = want;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
