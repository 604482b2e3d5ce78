//! Host-side file tools over one workspace directory: read, create, edit,
//! list, find and search. Owns path confinement ([`path`]), the edit engine
//! ([`edit`]), atomic writes ([`mod@write`]), per-file write queues ([`lock`]),
//! confined and bounded walks ([`walk`]) and the removal of whole trees
//! however deep ([`remove`]). Blocking file I/O runs on tokio's blocking
//! pool; walks also wait for a slot of their workspace and of the service.

pub mod edit;
pub mod lock;
pub mod path;
pub mod remove;
pub mod walk;
pub mod write;

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use rustix::fs::{FileType, Mode, OFlags, Stat};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use edit::{EditError, EditSpec, LineEndings};
use lock::PathLocks;
use path::{RelPath, Root};
use walk::{DirEntry, Flow, WalkError};
pub use walk::{WalkLimit, WalkLimits};

use crate::policy::Policy;
use write::Target;

/// Why a file tool refused or failed. Every refusal leaves files unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path is malformed (NUL byte, not UTF-8, names the root, too long).
    #[error("invalid path {path:?}: {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The path leaves the workspace, by `..`, an absolute path or a symlink.
    #[error("{path} is outside the workspace")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path.
    #[error("{path} does not exist")]
    NotFound {
        /// Workspace-relative path.
        path: String,
    },
    /// The path is a directory or a special file where a file was needed.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// Workspace-relative path.
        path: String,
    },
    /// The path (or one of its parents) is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// Workspace-relative path.
        path: String,
    },
    /// CreateFile found the path taken.
    #[error("{path} already exists")]
    Exists {
        /// Workspace-relative path.
        path: String,
    },
    /// The file or content is over the size ceiling.
    #[error("{path} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Workspace-relative path.
        path: String,
        /// Actual size.
        size: u64,
        /// Configured ceiling.
        limit: u64,
    },
    /// The file is binary or not UTF-8.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// Workspace-relative path.
        path: String,
    },
    /// expected_sha256 does not match the file as stored.
    #[error("{path} changed since it was read")]
    Stale {
        /// Workspace-relative path.
        path: String,
        /// Hash the caller expected.
        expected: String,
        /// Hash of the file now.
        actual: String,
    },
    /// ReadFile's offset is past the last line.
    #[error("line {offset} is past the end of {path} ({total} lines)")]
    LineOutOfRange {
        /// Workspace-relative path.
        path: String,
        /// Requested first line.
        offset: u64,
        /// Lines in the file.
        total: u64,
    },
    /// A glob or regular expression does not parse.
    #[error("invalid pattern {pattern:?}: {why}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// Parser message.
        why: String,
    },
    /// The edit engine refused the edits.
    #[error("{path}: {source}")]
    Edit {
        /// Workspace-relative path.
        path: String,
        /// Engine refusal.
        source: EditError,
    },
    /// A walk met one of its bounds (a command planted a huge or deeply
    /// nested `.gitignore`, or a directory of too many entries).
    #[error("{path}: walk limit {what:?} of {limit} exceeded")]
    WalkLimit {
        /// The tool that walked ("FindFiles", "SearchFiles").
        tool: &'static str,
        /// Workspace-relative path of the file or directory concerned.
        path: String,
        /// The bound met.
        what: WalkLimit,
        /// Its value.
        limit: u64,
    },
    /// Session policy refuses the write.
    #[error("write refused by policy: {0:?}")]
    Denied(crate::policy::Denial),
    /// An unexpected I/O failure.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Workspace-relative path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
}

impl Error {
    /// Classifies an OS error met while working on `path`.
    fn from_io(op: &'static str, path: &RelPath, source: io::Error) -> Error {
        use rustix::io::Errno;
        let path = path.to_string();
        match Errno::from_io_error(&source) {
            Some(Errno::NOENT) => Error::NotFound { path },
            Some(Errno::XDEV) => Error::OutsideWorkspace { path },
            Some(Errno::LOOP) => Error::InvalidPath {
                path,
                why: "it is a symbolic link that cannot be followed safely here, or a link loop",
            },
            Some(Errno::NOTDIR) => Error::NotADirectory { path },
            Some(Errno::ISDIR) => Error::NotAFile { path },
            Some(Errno::EXIST) => Error::Exists { path },
            Some(Errno::NAMETOOLONG) => Error::InvalidPath {
                path,
                why: "it is too long",
            },
            _ => Error::Io { op, path, source },
        }
    }
}

/// Size and count ceilings of the file tools.
///
/// Cloning shares [`Limits::walk_slots`]: give every workspace of a service
/// a clone of one `Limits` so that the service-wide bound holds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest file read, edited, searched or created.
    pub max_file_bytes: u64,
    /// Lines ReadFile returns when the request says 0.
    pub read_default_lines: u64,
    /// Most content bytes one ReadFile returns (whole lines only, unless a
    /// single line is longer).
    pub read_max_bytes: usize,
    /// Most entries ListDir returns.
    pub list_max_entries: usize,
    /// FindFiles results when the request says 0.
    pub find_default_limit: usize,
    /// Most FindFiles results, whatever the request says.
    pub find_max_limit: usize,
    /// SearchFiles matches when the request says 0.
    pub search_default_limit: usize,
    /// Most SearchFiles matches, whatever the request says.
    pub search_max_limit: usize,
    /// Longest matched line SearchFiles returns, in characters.
    pub search_line_chars: usize,
    /// Most bytes of file contents one SearchFiles reads; past it the
    /// search stops and its reply is marked truncated.
    pub search_scan_bytes: u64,
    /// Longest one FindFiles or SearchFiles runs; past it the walk stops
    /// and its reply is marked truncated, so no call holds a walk slot for
    /// long whatever the tree or the pattern.
    pub walk_time: std::time::Duration,
    /// Most bytes of paths and lines one FindFiles or SearchFiles reply
    /// carries; past it the reply is cut and marked truncated.
    pub reply_max_bytes: usize,
    /// Bounds of one walk (FindFiles, SearchFiles): ignore files, entries.
    pub walk: WalkLimits,
    /// Walks of one workspace that run at once; more wait their turn.
    pub walks_per_workspace: usize,
    /// Walks that run at once over the whole service; more wait their turn.
    pub walk_slots: WalkSlots,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 10 * 1024 * 1024,
            read_default_lines: 2000,
            read_max_bytes: 256 * 1024,
            list_max_entries: 5000,
            find_default_limit: 1000,
            find_max_limit: 10_000,
            search_default_limit: 200,
            search_max_limit: 2_000,
            search_line_chars: 500,
            search_scan_bytes: 256 << 20,
            walk_time: std::time::Duration::from_secs(10),
            reply_max_bytes: 4 * 1024 * 1024,
            walk: WalkLimits::default(),
            walks_per_workspace: 1,
            walk_slots: WalkSlots::new(WalkSlots::DEFAULT),
        }
    }
}

/// The service-wide budget of walks running at once, shared by every
/// workspace holding a clone (see [`Limits::walk_slots`]).
#[derive(Debug, Clone)]
pub struct WalkSlots(Arc<Semaphore>);

impl WalkSlots {
    /// Walks at once by default.
    pub const DEFAULT: usize = 4;

    /// A budget of `n` walks at once (at least one).
    pub fn new(n: usize) -> WalkSlots {
        WalkSlots(Arc::new(Semaphore::new(n.max(1))))
    }

    /// Walks that could start now without waiting.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// A caller's count: 0 means `default`; nothing goes past `max`.
fn clamp_count(asked: u64, default: usize, max: usize) -> usize {
    if asked == 0 {
        default.min(max)
    } else {
        usize::try_from(asked).unwrap_or(usize::MAX).min(max)
    }
}

/// A window of a file's lines.
#[derive(Debug, Clone)]
pub struct ReadOutput {
    /// Workspace-relative path.
    pub path: String,
    /// The lines, endings included, BOM removed.
    pub content: String,
    /// First line in `content` (1-based; 0 for an empty file).
    pub first_line: u64,
    /// Last line in `content`.
    pub last_line: u64,
    /// Lines in the file.
    pub total_lines: u64,
    /// Hex sha256 of the stored bytes.
    pub sha256: String,
    /// Lines exist past `last_line`, or the last line was cut.
    pub truncated: bool,
    /// File size.
    pub size_bytes: u64,
    /// Summary such as "lines 1-40 of 120".
    pub message: String,
}

/// Result of CreateFile.
#[derive(Debug, Clone)]
pub struct CreateOutput {
    /// Workspace-relative path.
    pub path: String,
    /// Where the write landed: the real workspace-relative path.
    pub landed: String,
    /// Hex sha256 of the new file.
    pub sha256: String,
    /// Lines in the new file.
    pub total_lines: u64,
    /// One-line summary.
    pub message: String,
}

/// Result of EditFile.
#[derive(Debug, Clone)]
pub struct EditOutput {
    /// Workspace-relative path.
    pub path: String,
    /// Where the write landed: the real workspace-relative path.
    pub landed: String,
    /// Hex sha256 of the file before the edit.
    pub sha256_before: String,
    /// Sites replaced.
    pub replacements: u64,
    /// 1-based line of the first change.
    pub first_changed_line: u64,
    /// Lines after minus lines before.
    pub line_delta: i64,
    /// Unified diff (capped).
    pub diff: String,
    /// The diff was cut.
    pub diff_truncated: bool,
    /// Hex sha256 of the file as written.
    pub sha256: String,
    /// One-line summary.
    pub message: String,
}

/// Result of ListDir.
#[derive(Debug, Clone)]
pub struct ListOutput {
    /// Workspace-relative path of the directory.
    pub path: String,
    /// Entries sorted by name.
    pub entries: Vec<DirEntry>,
    /// More entries exist.
    pub truncated: bool,
}

/// Result of FindFiles.
#[derive(Debug, Clone)]
pub struct FindOutput {
    /// Matching workspace-relative paths, sorted.
    pub paths: Vec<String>,
    /// More matches exist.
    pub truncated: bool,
}

/// One line matching a search.
#[derive(Debug, Clone)]
pub struct SearchMatch {
    /// Workspace-relative path.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line (without its ending), cut to the configured length.
    pub text: String,
}

/// Result of SearchFiles.
#[derive(Debug, Clone)]
pub struct SearchOutput {
    /// Matches in walk order.
    pub matches: Vec<SearchMatch>,
    /// More matches exist.
    pub truncated: bool,
    /// Files whose contents were searched.
    pub files_searched: u64,
}

/// A SearchFiles request.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    /// Regular expression, matched per line.
    pub pattern: String,
    /// Directory or file to search ("" for the root).
    pub path: String,
    /// Optional glob restricting the files searched.
    pub glob: String,
    /// Match case-insensitively.
    pub case_insensitive: bool,
    /// Maximum matches (0: default).
    pub limit: u64,
}

/// The file tools over one workspace root. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Workspace {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: Root,
    locks: Arc<PathLocks>,
    limits: Limits,
    /// Owner (uid, gid) of the workspace root.
    owner: (u32, u32),
    /// Owner given to new files and directories: the root's owner, when we
    /// are privileged and differ from it (so commands can change them).
    new_owner: Option<(u32, u32)>,
    /// Walks of this workspace running at once.
    walks: Arc<Semaphore>,
}

impl Workspace {
    /// Opens the directory `host` as a workspace. `locks` is shared by all
    /// workspaces of a service.
    pub fn open(host: &Path, locks: Arc<PathLocks>, limits: Limits) -> io::Result<Workspace> {
        let root = Root::at(host)?;
        let st = rustix::fs::fstat(root.fd())?;
        let owner = (st.st_uid, st.st_gid);
        let euid = rustix::process::geteuid();
        let new_owner = (euid.is_root() && owner.0 != euid.as_raw()).then_some(owner);
        let walks = Arc::new(Semaphore::new(limits.walks_per_workspace.max(1)));
        Ok(Workspace {
            inner: Arc::new(Inner {
                root,
                locks,
                limits,
                owner,
                new_owner,
                walks,
            }),
        })
    }

    /// Owner (uid, gid) of the workspace root directory.
    pub fn owner(&self) -> (u32, u32) {
        self.inner.owner
    }

    /// Resolves `path` to an existing directory inside the workspace and
    /// returns its real workspace-relative path ("" for the root).
    pub async fn real_dir(&self, path: &str) -> Result<String, Error> {
        let inner = Arc::clone(&self.inner);
        let path = path.to_string();
        blocking(move || {
            let rel = inner.root.rel(&path)?;
            let real = inner
                .root
                .real(&rel)
                .map_err(|e| Error::from_io("resolve", &rel, e))?;
            inner.open_dir(&real)?;
            Ok(real.as_str().to_string())
        })
        .await
    }

    /// Where `path` lands (or would land): its real workspace-relative path,
    /// symlinks inside the workspace resolved, for paths that may not exist.
    pub async fn landing(&self, path: &str) -> Result<String, Error> {
        let inner = Arc::clone(&self.inner);
        let rel = inner.root.rel(path)?;
        blocking(move || {
            inner
                .root
                .landing(&rel)
                .map(|p| p.as_str().to_string())
                .map_err(|e| Error::from_io("resolve", &rel, e))
        })
        .await
    }

    /// The directory fd of the workspace root (`O_PATH`).
    pub fn root_fd(&self) -> &OwnedFd {
        self.inner.root.fd()
    }

    /// Canonical host path of the workspace.
    pub fn host_path(&self) -> &Path {
        self.inner.root.host()
    }

    /// Reads lines `offset..offset+limit` (1-based; 0 means defaults).
    pub async fn read(&self, path: &str, offset: u64, limit: u64) -> Result<ReadOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let path = path.to_string();
        blocking(move || inner.read(&path, offset, limit)).await
    }

    /// Creates a new file with `content`, and missing parent directories,
    /// if `policy` allows a write where it would land.
    pub async fn create(
        &self,
        path: &str,
        content: String,
        policy: &Arc<Policy>,
    ) -> Result<CreateOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let rel = inner.root.rel(path)?;
        let Some((parent, name)) = rel.split_last() else {
            return Err(Error::InvalidPath {
                path: path.to_string(),
                why: "it names the workspace root, not a file",
            });
        };
        let name = name.to_string();
        if content.len() as u64 > inner.limits.max_file_bytes {
            return Err(Error::TooLarge {
                path: rel.to_string(),
                size: content.len() as u64,
                limit: inner.limits.max_file_bytes,
            });
        }
        let real_parent = {
            let inner = Arc::clone(&inner);
            let (parent, name) = (parent.clone(), name.clone());
            let policy = Arc::clone(policy);
            blocking(move || {
                // Decided before any directory is made, so a refused create
                // leaves nothing behind; decided again under the lock. The
                // last component is created, never followed.
                let landing = inner
                    .root
                    .landing(&parent)
                    .map_err(|e| Error::from_io("resolve", &parent, e))?
                    .join(&name);
                policy
                    .check_write("CreateFile", landing.as_str())
                    .map_err(Error::Denied)?;
                inner
                    .root
                    .create_dirs(&parent, inner.new_owner)
                    .and_then(|()| inner.root.real(&parent))
                    .map_err(|e| Error::from_io("create directories for", &parent, e))
            })
            .await?
        };
        let _guard = inner.locks.lock(inner.key(&real_parent.join(&name))).await;
        let policy = Arc::clone(policy);
        blocking(move || {
            inner.create_locked(&rel, &real_parent, &name, content.as_bytes(), &policy)
        })
        .await
    }

    /// Applies `edits` to the file at `path`, all or nothing, if `policy`
    /// allows a write where it lands.
    pub async fn edit(
        &self,
        path: &str,
        edits: Vec<EditSpec>,
        expected_sha256: Option<String>,
        policy: &Arc<Policy>,
    ) -> Result<EditOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let rel = inner.root.rel(path)?;
        edit::validate(&edits).map_err(|source| Error::Edit {
            path: rel.to_string(),
            source,
        })?;
        let real = {
            let inner = Arc::clone(&inner);
            let rel = rel.clone();
            let policy = Arc::clone(policy);
            blocking(move || {
                // A denied path is refused as such even when it does not
                // exist; decided again under the lock. An existing file is
                // resolved once: its real path is where it lands.
                let resolve = |e| Error::from_io("resolve", &rel, e);
                let (landing, real) = match inner.root.real(&rel) {
                    Ok(real) => (real.clone(), Ok(real)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        (inner.root.landing(&rel).map_err(resolve)?, Err(resolve(e)))
                    }
                    Err(e) => return Err(resolve(e)),
                };
                policy
                    .check_write("EditFile", landing.as_str())
                    .map_err(Error::Denied)?;
                real
            })
            .await?
        };
        let _guard = inner.locks.lock(inner.key(&real)).await;
        let policy = Arc::clone(policy);
        blocking(move || {
            inner.edit_locked(&rel, &real, &edits, expected_sha256.as_deref(), &policy)
        })
        .await
    }

    /// Lists one directory.
    pub async fn list_dir(&self, path: &str) -> Result<ListOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let path = path.to_string();
        blocking(move || inner.list_dir(&path)).await
    }

    /// Finds files whose workspace-relative path matches the glob `pattern`.
    /// Waits while too many walks run (of this workspace or the service).
    pub async fn find(&self, pattern: &str, path: &str, limit: u64) -> Result<FindOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let (pattern, path) = (pattern.to_string(), path.to_string());
        let turn = self.walk_turn().await?;
        let cancel = Cancel::default();
        let stop = cancel.flag();
        blocking(move || {
            let _turn = turn;
            inner.find(&pattern, &path, limit, &stop)
        })
        .await
    }

    /// Searches file contents line by line with a regular expression.
    /// Waits while too many walks run (of this workspace or the service).
    pub async fn search(&self, query: SearchQuery) -> Result<SearchOutput, Error> {
        let inner = Arc::clone(&self.inner);
        let turn = self.walk_turn().await?;
        let cancel = Cancel::default();
        let stop = cancel.flag();
        blocking(move || {
            let _turn = turn;
            inner.search(&query, &stop)
        })
        .await
    }

    /// Waits for a walk's turn: a slot of this workspace, then one of the
    /// service. The permits move into the blocking task, so a caller that
    /// goes away does not free them before its walk has ended.
    async fn walk_turn(&self) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), Error> {
        let closed = |_| Error::Io {
            op: "wait for a walk slot",
            path: String::new(),
            source: io::Error::other("the walk slots are closed"),
        };
        let mine = Arc::clone(&self.inner.walks)
            .acquire_owned()
            .await
            .map_err(closed)?;
        let service = Arc::clone(&self.inner.limits.walk_slots.0)
            .acquire_owned()
            .await
            .map_err(closed)?;
        Ok((mine, service))
    }
}

/// Tells a walk on the blocking pool that its caller went away: dropped
/// with the caller's future (a client that hangs up), it raises the flag
/// the walk checks between files.
#[derive(Default)]
struct Cancel(Arc<AtomicBool>);

impl Cancel {
    fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Io {
            op: "run file task",
            path: String::new(),
            source: io::Error::other(e.to_string()),
        })?
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Inner {
    /// Write-queue key: the absolute real host path.
    fn key(&self, real: &RelPath) -> PathBuf {
        self.root.host().join(real.as_str())
    }

    /// Opens `rel` as a regular file for reading, checks its size and
    /// returns its bytes and stat.
    fn read_regular(
        &self,
        rel: &RelPath,
        fd: io::Result<OwnedFd>,
    ) -> Result<(Vec<u8>, Stat), Error> {
        let fd = fd.map_err(|e| Error::from_io("open", rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::from_io("stat", rel, e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::NotAFile {
                path: rel.to_string(),
            });
        }
        let limit = self.limits.max_file_bytes;
        if st.st_size as u64 > limit {
            return Err(Error::TooLarge {
                path: rel.to_string(),
                size: st.st_size as u64,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(st.st_size as usize);
        // take() guards against a file that grows while we read it.
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::from_io("read", rel, e))?;
        if bytes.len() as u64 > limit {
            return Err(Error::TooLarge {
                path: rel.to_string(),
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok((bytes, st))
    }

    fn read(&self, path: &str, offset: u64, limit: u64) -> Result<ReadOutput, Error> {
        let rel = self.root.rel(path)?;
        let fd = self
            .root
            .open(&rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty());
        let (bytes, _) = self.read_regular(&rel, fd)?;
        let sha256 = sha256_hex(&bytes);
        let text = edit::decode(&bytes)
            .map_err(|_| Error::NotText {
                path: rel.to_string(),
            })?
            .text;
        let total = edit::count_lines(text) as u64;
        let first = offset.max(1);
        let limit = if limit == 0 {
            self.limits.read_default_lines
        } else {
            limit
        };
        if total == 0 && first == 1 {
            return Ok(ReadOutput {
                path: rel.to_string(),
                content: String::new(),
                first_line: 0,
                last_line: 0,
                total_lines: 0,
                sha256,
                truncated: false,
                size_bytes: bytes.len() as u64,
                message: format!("{rel} is empty"),
            });
        }
        if first > total {
            return Err(Error::LineOutOfRange {
                path: rel.to_string(),
                offset: first,
                total,
            });
        }
        let mut content = String::new();
        let mut last = first - 1;
        let mut cut_line = false;
        for line in text
            .split_inclusive('\n')
            .skip((first - 1) as usize)
            .take(limit as usize)
        {
            if content.len() + line.len() > self.limits.read_max_bytes {
                if content.is_empty() {
                    // One line longer than the whole budget: return its head.
                    let mut end = self.limits.read_max_bytes;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    content.push_str(&line[..end]);
                    last += 1;
                    cut_line = true;
                }
                break;
            }
            content.push_str(line);
            last += 1;
        }
        let truncated = last < total || cut_line;
        let mut message = format!("lines {first}-{last} of {total} in {rel}");
        if cut_line {
            message.push_str(&format!(
                "; line {last} is longer than {} bytes and was cut",
                self.limits.read_max_bytes
            ));
        } else if truncated {
            message.push_str(&format!("; continue with offset {}", last + 1));
        }
        Ok(ReadOutput {
            path: rel.to_string(),
            content,
            first_line: first,
            last_line: last,
            total_lines: total,
            sha256,
            truncated,
            size_bytes: bytes.len() as u64,
            message,
        })
    }

    fn create_locked(
        &self,
        rel: &RelPath,
        real_parent: &RelPath,
        name: &str,
        bytes: &[u8],
        policy: &Policy,
    ) -> Result<CreateOutput, Error> {
        let dir = self
            .root
            .open(real_parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", real_parent, e))?;
        let landed = self
            .root
            .real_of(&dir)
            .map_err(|e| Error::from_io("resolve", real_parent, e))?
            .join(name);
        policy
            .check_write("CreateFile", landed.as_str())
            .map_err(Error::Denied)?;
        write::write_atomic(&dir, name, bytes, Target::CreateNew(self.new_owner))
            .map_err(|e| Error::from_io("create", rel, e))?;
        let total_lines = std::str::from_utf8(bytes).map_or(0, edit::count_lines) as u64;
        Ok(CreateOutput {
            path: rel.to_string(),
            landed: landed.as_str().to_string(),
            sha256: sha256_hex(bytes),
            total_lines,
            message: format!(
                "created {rel}: {}, {}",
                plural(total_lines, "line", "lines"),
                plural(bytes.len() as u64, "byte", "bytes")
            ),
        })
    }

    fn edit_locked(
        &self,
        rel: &RelPath,
        real: &RelPath,
        edits: &[EditSpec],
        expected: Option<&str>,
        policy: &Policy,
    ) -> Result<EditOutput, Error> {
        let (parent, name) = real.split_last().ok_or_else(|| Error::NotAFile {
            path: rel.to_string(),
        })?;
        let dir = self
            .root
            .open(&parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", &parent, e))?;
        // The directory fd's own path: where the write will really land.
        let landed = self
            .root
            .real_of(&dir)
            .map_err(|e| Error::from_io("resolve", &parent, e))?
            .join(name);
        policy
            .check_write("EditFile", landed.as_str())
            .map_err(Error::Denied)?;
        let fd = walk::open_child_file(&dir, name);
        let (bytes, st) = self.read_regular(rel, fd)?;
        // The journal records it; ~0.7 ms per MB.
        let before = sha256_hex(&bytes);
        if let Some(expected) = expected
            && !expected.eq_ignore_ascii_case(&before)
        {
            return Err(Error::Stale {
                path: rel.to_string(),
                expected: expected.to_string(),
                actual: before,
            });
        }
        let applied = edit::apply(&bytes, edits, rel.as_str(), self.limits.max_file_bytes)
            .map_err(|source| match source {
                EditError::NotText => Error::NotText {
                    path: rel.to_string(),
                },
                source => Error::Edit {
                    path: rel.to_string(),
                    source,
                },
            })?;
        write::write_atomic(&dir, name, &applied.bytes, Target::Replace(&st))
            .map_err(|e| Error::from_io("write", rel, e))?;
        let replacements = applied.replacements as u64;
        let message = format!(
            "changed {rel}: {} from line {}, line delta {:+}",
            plural(replacements, "replacement", "replacements"),
            applied.first_changed_line,
            applied.line_delta
        );
        Ok(EditOutput {
            path: rel.to_string(),
            landed: landed.as_str().to_string(),
            sha256_before: before,
            replacements,
            first_changed_line: applied.first_changed_line as u64,
            line_delta: applied.line_delta,
            diff: applied.diff,
            diff_truncated: applied.diff_truncated,
            sha256: sha256_hex(&applied.bytes),
            message,
        })
    }

    fn open_dir(&self, rel: &RelPath) -> Result<OwnedFd, Error> {
        self.root
            .open(rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::from_io("open directory", rel, e))
    }

    fn list_dir(&self, path: &str) -> Result<ListOutput, Error> {
        let rel = self.root.rel(path)?;
        let dir = self.open_dir(&rel)?;
        let (entries, truncated) = walk::list(&dir, self.limits.list_max_entries)
            .map_err(|e| Error::from_io("list", &rel, e))?;
        Ok(ListOutput {
            path: rel.to_string(),
            entries,
            truncated,
        })
    }

    fn find(
        &self,
        pattern: &str,
        path: &str,
        limit: u64,
        stop: &AtomicBool,
    ) -> Result<FindOutput, Error> {
        let glob = compile_glob(pattern)?;
        let rel = self.root.rel(path)?;
        self.open_dir(&rel)?;
        let limit = clamp_count(
            limit,
            self.limits.find_default_limit,
            self.limits.find_max_limit,
        );
        let mut paths = Vec::new();
        let mut bytes = 0;
        let mut truncated = false;
        let deadline = std::time::Instant::now() + self.limits.walk_time;
        walk::walk_files(&self.root, &rel, &self.limits.walk, &mut |file, _, _| {
            if stop.load(Ordering::Relaxed) {
                return Ok(Flow::Stop);
            }
            if std::time::Instant::now() > deadline {
                truncated = true;
                return Ok(Flow::Stop);
            }
            if glob.is_match(file.as_str()) {
                let cost = file.as_str().len() + REPLY_ITEM_OVERHEAD;
                if paths.len() == limit || bytes + cost > self.limits.reply_max_bytes {
                    truncated = true;
                    return Ok(Flow::Stop);
                }
                bytes += cost;
                paths.push(file.as_str().to_string());
            }
            Ok(Flow::Continue)
        })
        .map_err(|e| walk_error("FindFiles", &rel, e))?;
        Ok(FindOutput { paths, truncated })
    }

    /// Reads a file for searching: `None` for anything that is not
    /// searchable text (unreadable, special, oversized, binary). The head is
    /// checked for NUL bytes before the rest is read, so a large binary or
    /// sparse file costs one small read.
    fn searchable(&self, dir: &OwnedFd, name: &str) -> Option<Vec<u8>> {
        const HEAD: usize = 8192;
        let fd = walk::open_child_file(dir, name).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_size as u64 > self.limits.max_file_bytes
        {
            return None;
        }
        let mut file = File::from(fd).take(self.limits.max_file_bytes + 1);
        let mut bytes = Vec::with_capacity((st.st_size as usize).min(HEAD));
        (&mut file).take(HEAD as u64).read_to_end(&mut bytes).ok()?;
        if bytes.contains(&0) {
            return None;
        }
        file.read_to_end(&mut bytes).ok()?;
        (bytes.len() as u64 <= self.limits.max_file_bytes).then_some(bytes)
    }

    fn search(&self, q: &SearchQuery, stop: &AtomicBool) -> Result<SearchOutput, Error> {
        // One pattern for both the whole-file prefilter and the per-line
        // match: multi-line, so `^` and `$` mean a line's start and end in
        // either (and `$` ignores a CRLF's `\r`). Whatever matches a line
        // then matches the file too, so the prefilter never skips a file
        // with a matching line. A pattern that anchors to the whole text
        // (`\A`, `\z`) or changes flags inline could disagree: the
        // prefilter is not used for it.
        let re = RegexBuilder::new(&q.pattern)
            .case_insensitive(q.case_insensitive)
            .multi_line(true)
            .crlf(true)
            .size_limit(16 * 1024 * 1024)
            .build()
            .map_err(|e| Error::InvalidPattern {
                pattern: q.pattern.clone(),
                why: e.to_string(),
            })?;
        let prefilter = !["\\A", "\\z", "(?"].iter().any(|s| q.pattern.contains(s));
        let glob = if q.glob.is_empty() {
            None
        } else {
            Some(compile_glob(&q.glob)?)
        };
        let rel = self.root.rel(&q.path)?;
        let limit = clamp_count(
            q.limit,
            self.limits.search_default_limit,
            self.limits.search_max_limit,
        );
        let mut out = SearchOutput {
            matches: Vec::new(),
            truncated: false,
            files_searched: 0,
        };
        let mut bytes = 0;
        // Bytes read so far: one call scans at most `search_scan_bytes`.
        let mut scanned = 0u64;
        let deadline = std::time::Instant::now() + self.limits.walk_time;
        // Whether the call must end now: its caller left, or its time is up.
        let over = |out: &mut SearchOutput| {
            if stop.load(Ordering::Relaxed) {
                return true;
            }
            let late = std::time::Instant::now() > deadline;
            out.truncated |= late;
            late
        };
        let mut visit = |file: &RelPath, dir: &OwnedFd, name: &str| -> io::Result<Flow> {
            if over(&mut out) {
                return Ok(Flow::Stop);
            }
            if glob.as_ref().is_some_and(|g| !g.is_match(file.as_str())) {
                return Ok(Flow::Continue);
            }
            // Unreadable, oversized or binary files are not searchable text.
            let Some(bytes_read) = self.searchable(dir, name) else {
                return Ok(Flow::Continue);
            };
            scanned += bytes_read.len() as u64;
            if scanned > self.limits.search_scan_bytes {
                out.truncated = true;
                return Ok(Flow::Stop);
            }
            let Ok(text) = std::str::from_utf8(&bytes_read) else {
                return Ok(Flow::Continue);
            };
            out.files_searched += 1;
            if prefilter && !re.is_match(text) {
                return Ok(Flow::Continue);
            }
            for (i, line) in text.lines().enumerate() {
                if i % 4096 == 4095 && over(&mut out) {
                    return Ok(Flow::Stop);
                }
                if re.is_match(line) {
                    let text = cut_chars(line, self.limits.search_line_chars);
                    let cost = file.as_str().len() + text.len() + REPLY_ITEM_OVERHEAD;
                    if out.matches.len() == limit || bytes + cost > self.limits.reply_max_bytes {
                        out.truncated = true;
                        return Ok(Flow::Stop);
                    }
                    bytes += cost;
                    out.matches.push(SearchMatch {
                        path: file.as_str().to_string(),
                        line: i as u64 + 1,
                        text,
                    });
                }
            }
            Ok(Flow::Continue)
        };
        match self.open_dir(&rel) {
            Ok(_) => walk::walk_files(&self.root, &rel, &self.limits.walk, &mut visit)
                .map_err(|e| walk_error("SearchFiles", &rel, e))?,
            // A single file: search just that one.
            Err(Error::NotADirectory { .. }) => {
                let (parent, name) = rel.split_last().ok_or_else(|| Error::NotADirectory {
                    path: rel.to_string(),
                })?;
                let dir = self.open_dir(&parent)?;
                visit(&rel, &dir, name).map_err(|e| Error::from_io("search", &rel, e))?;
            }
            Err(e) => return Err(e),
        }
        Ok(out)
    }
}

/// Bytes counted per path or match of a reply beyond its text (field tags,
/// lengths, the line number), so the byte bound holds for the encoded reply.
const REPLY_ITEM_OVERHEAD: usize = 16;

/// A walk's failure as the tool's error.
fn walk_error(tool: &'static str, rel: &RelPath, e: WalkError) -> Error {
    match e {
        WalkError::Io(e) => Error::from_io("walk", rel, e),
        WalkError::Limit { path, what, limit } => Error::WalkLimit {
            tool,
            path: path.to_string(),
            what,
            limit,
        },
    }
}

/// Compiles a glob over workspace-relative paths; one without `/` matches a
/// file name at any depth.
fn compile_glob(pattern: &str) -> Result<GlobMatcher, Error> {
    let full = if pattern.contains('/') {
        pattern.trim_start_matches("./").to_string()
    } else {
        format!("**/{pattern}")
    };
    GlobBuilder::new(&full)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidPattern {
            pattern: pattern.to_string(),
            why: e.kind().to_string(),
        })
}

/// `s` cut to at most `max` characters, marked with "…" when cut.
fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[test]
    fn counts_from_the_caller_are_clamped_to_the_ceiling() {
        assert_eq!(clamp_count(0, 200, 2000), 200);
        assert_eq!(clamp_count(0, 5000, 2000), 2000);
        assert_eq!(clamp_count(7, 200, 2000), 7);
        assert_eq!(clamp_count(u64::MAX, 200, 2000), 2000);
    }

    /// Walk turns are taken without running a walk: whether a turn is free
    /// shows on the first poll, so nothing here depends on timing.
    #[tokio::test]
    async fn walks_wait_for_a_slot_of_their_workspace_and_of_the_service() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let limits = Limits {
            walks_per_workspace: 2,
            walk_slots: WalkSlots::new(3),
            ..Limits::default()
        };
        let locks = Arc::new(PathLocks::default());
        let ws_a = Workspace::open(a.path(), Arc::clone(&locks), limits.clone()).unwrap();
        let ws_b = Workspace::open(b.path(), locks, limits.clone()).unwrap();
        let a1 = ws_a.walk_turn().now_or_never().unwrap().unwrap();
        let _a2 = ws_a.walk_turn().now_or_never().unwrap().unwrap();
        // A third walk of the same workspace waits...
        assert!(ws_a.walk_turn().now_or_never().is_none());
        // ...while another workspace still gets the service's last slot.
        let _b1 = ws_b.walk_turn().now_or_never().unwrap().unwrap();
        assert_eq!(limits.walk_slots.available(), 0);
        // The service is full: b's second walk waits though b has room.
        assert!(ws_b.walk_turn().now_or_never().is_none());
        drop(a1);
        assert!(ws_b.walk_turn().now_or_never().is_some());
    }
}
