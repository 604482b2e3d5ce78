//! Host-side file tools over one workspace directory: read, create, edit,
//! list, find and search. Owns path confinement ([`path`]), the edit engine
//! ([`edit`]), atomic writes ([`mod@write`]), per-file write queues ([`lock`]),
//! confined and bounded walks ([`walk`]) and the removal of whole trees
//! however deep ([`remove`]). Blocking file I/O runs on tokio's blocking
//! pool; walks also wait for a slot of their workspace and of the service.

pub mod archive;
pub mod edit;
mod error;
pub mod history;
pub mod lock;
mod ops;
mod outputs;
pub mod patch;
mod patching;
pub mod path;
pub mod quote;
pub mod remove;
pub mod tree;
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
use walk::{Flow, WalkError};
pub use walk::{WalkLimit, WalkLimits};

pub use error::Error;
pub use outputs::{
    CreateOutput, EditOutput, FindOutput, ListOutput, ReadOutput, SearchMatch, SearchOutput,
    SearchQuery,
};
pub use patching::PatchedFile;

use crate::policy::Policy;
use write::Target;

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
    /// Where landings (uploads, patches, restores) are recorded before
    /// they begin, once the service has given a place (see
    /// [`Workspace::record_landings_in`]).
    intents: std::sync::OnceLock<tree::intent::Intents>,
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
                intents: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Owner (uid, gid) of the workspace root directory.
    pub fn owner(&self) -> (u32, u32) {
        self.inner.owner
    }

    /// Owner given to the files and directories the service makes here:
    /// the root's owner, when the service is privileged and differs from
    /// it (so commands can change them).
    pub fn new_owner(&self) -> Option<(u32, u32)> {
        self.inner.new_owner
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

    /// `path` as the workspace names it, normalised by its text alone
    /// (`./a//b` is `a/b`; `..` out of the workspace, absolute paths
    /// outside it and NUL bytes refused), no link followed: the name a
    /// caller means, whatever a command has planted there since.
    pub fn normalised(&self, path: &str) -> Result<String, Error> {
        Ok(self.inner.root.rel(path)?.as_str().to_string())
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

    /// Extracts the tar archive `src` into the directory `dest`, all or
    /// nothing (see [`archive::upload`]), every file landing where `policy`
    /// allows a write. Blocking: run it off the async threads.
    pub fn upload_blocking(
        &self,
        dest: &str,
        src: impl Read,
        limits: archive::UploadLimits,
        policy: &Policy,
    ) -> Result<archive::Uploaded, archive::Error> {
        let allow = |path: &str| policy.check_write("UploadArchive", path);
        archive::upload(
            self.inner.root.fd(),
            self.inner.intents.get(),
            dest,
            src,
            limits,
            self.inner.new_owner,
            &allow,
        )
    }

    /// From now on, records every landing (an upload, a patch, a restore)
    /// in `dir`, a directory of the service's own out of every command's
    /// reach (see [`tree::intent`]). A workspace is given its place once;
    /// a second is ignored.
    pub fn record_landings_in(&self, dir: OwnedFd) {
        let _ = self.inner.intents.set(tree::intent::Intents::new(dir));
    }

    /// Finishes what a crash left recorded in `dir` (see
    /// [`Workspace::record_landings_in`]): landings cut short are finished
    /// (or undone, if they cannot be), staging directories removed. Run
    /// before any command can run in the workspace again. Blocking.
    pub fn finish_landings(&self, dir: OwnedFd) -> io::Result<Vec<tree::intent::Finished>> {
        tree::intent::finish(self.inner.root.fd(), &tree::intent::Intents::new(dir))
    }

    /// Where landings are recorded, if anywhere.
    pub fn intents(&self) -> Option<&tree::intent::Intents> {
        self.inner.intents.get()
    }

    /// Writes a tar archive of `path` to `out` (see [`archive::download`]).
    /// Blocking: run it off the async threads, holding a walk turn.
    pub fn download_blocking(
        &self,
        path: &str,
        opts: archive::DownloadOptions,
        out: impl std::io::Write,
    ) -> Result<archive::Downloaded, archive::DownloadError> {
        let rel = self.inner.root.rel(path)?;
        archive::download(&self.inner.root, &rel, opts, &self.inner.limits.walk, out)
    }

    /// Waits for a walk's turn: a slot of this workspace, then one of the
    /// service. The permits move into the blocking task, so a caller that
    /// goes away does not free them before its walk has ended.
    pub async fn walk_turn(&self) -> Result<(OwnedSemaphorePermit, OwnedSemaphorePermit), Error> {
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

    /// [`Workspace::walk_turn`] if one is free now, never waiting: for
    /// work that may as well be left for later.
    pub fn try_walk_turn(&self) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let mine = Arc::clone(&self.inner.walks).try_acquire_owned().ok()?;
        let service = Arc::clone(&self.inner.limits.walk_slots.0)
            .try_acquire_owned()
            .ok()?;
        Some((mine, service))
    }
}

/// Tells a walk or a scan on the blocking pool that its caller went away:
/// dropped with the caller's future (a client that hangs up), it raises
/// the flag the work checks between files (and a scan, between chunks).
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
