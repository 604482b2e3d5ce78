//! A workspace's past: the picture of where the session began (its
//! baseline), the checkpoints taken since, and the store keeping their
//! contents. Answers what changed since either, and brings the workspace
//! back to a checkpoint.
//!
//! The baseline is taken just before the first change of the session (an
//! edit, a created file, a command, a restore): whatever the workspace held
//! until then, an uploaded repository included, is where the session
//! began, so its changes are the work done on it. A fresh workspace's is
//! taken when the session opens and adopted by the first change while the
//! workspace is still empty (`early`), off the first command's path.
//! Taking it never fails a call: if it cannot be kept (a tree past the bounds or the budget), the
//! changes since the start say why, and checkpoints still work.
//!
//! One lock orders everything of one history; the file work runs on the
//! blocking pool. The last picture taken is the cache of the next scan
//! (see [`tree`](super::tree)), so a scan of an unchanged tree costs a
//! `stat` per entry.
//!
//! Every scan is bounded in bytes read, memory and time (see
//! [`ScanLimits`]), and one made for a caller stops when the caller goes
//! away (its future dropped): a client that gives up stops the work it
//! asked for. What closing a session or asking for a checkpoint needs (the
//! listing of checkpoints) is kept apart from that lock, so it never waits
//! for a scan.
//!
//! The history is kept beside the store's packs, so that a service that
//! restarts finds it again ([`History::reopen`], in [`persist`]).

mod baseline;
mod early;
mod persist;

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Mutex, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use super::tree::changes::{self, Bounds, Changes};
use super::tree::restore::{self, Restored};
use super::tree::store::Store;
use super::tree::{Manifest, ScanError, ScanLimits, scan_until, show};
use super::{Cancel, Workspace};
use crate::policy::Policy;
use persist::{persist, picture_name};

/// Bounds of a history.
#[derive(Debug, Clone, Copy)]
pub struct HistoryLimits {
    /// Most checkpoints kept at once.
    pub max_checkpoints: usize,
    /// Most memory the pictures of the checkpoints and the baseline take
    /// together.
    pub max_memory: usize,
    /// Bounds of every scan.
    pub scan: ScanLimits,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        HistoryLimits {
            max_checkpoints: 100,
            max_memory: 256 << 20,
            scan: ScanLimits::default(),
        }
    }
}

/// Why a history call was refused or failed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such checkpoint in this workspace's history.
    #[error("no checkpoint {id} in this session")]
    NotFound {
        /// The id asked for.
        id: String,
        /// It existed and was deleted.
        deleted: bool,
    },
    /// As many checkpoints as allowed are kept.
    #[error("the session keeps {limit} checkpoints already")]
    TooMany {
        /// The bound.
        limit: usize,
    },
    /// The checkpoints' pictures would take more memory than allowed.
    #[error("the checkpoints would take {bytes} bytes of memory, over {limit}")]
    TooLarge {
        /// What they would take.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The workspace could not be pictured.
    #[error(transparent)]
    Scan(#[from] ScanError),
    /// The restore failed and was undone.
    #[error(transparent)]
    Restore(#[from] restore::Error),
    /// The restore would write or remove a file the session's policy
    /// refuses; nothing was changed.
    #[error("restore refused by policy: {0:?}")]
    Denied(crate::policy::Denial),
    /// The session's starting point could not be kept.
    #[error("the session's starting point could not be kept: {0}")]
    NoBaseline(String),
    /// Reading the workspace or the store failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Writes or commands still run, and did not end in time.
    #[error("writes or commands still run in the workspace")]
    Busy,
}

/// A checkpoint as callers see it.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    /// Its id.
    pub id: String,
    /// The caller's label.
    pub label: String,
    /// When it was taken.
    pub created: SystemTime,
    /// Regular files in it.
    pub files: u64,
    /// Bytes those files hold.
    pub bytes: u64,
    /// Bytes of contents no other picture of the session holds.
    pub own_bytes: u64,
    /// Digest of the tree (see [`Manifest::digest`]).
    pub digest: String,
}

struct Checkpoint {
    info: CheckpointInfo,
    manifest: Arc<Manifest>,
    /// What its picture holds in memory ([`Manifest::memory`], counted
    /// once: it walks every entry).
    memory: usize,
}

/// A checkpoint just taken.
#[derive(Debug, Clone)]
pub struct Created {
    /// The checkpoint.
    pub checkpoint: CheckpointInfo,
    /// Bytes of contents the store had to copy for it.
    pub copied_bytes: u64,
    /// Bytes the store keeps now, and its budget.
    pub store_bytes: u64,
    /// The store's budget.
    pub store_budget: u64,
    /// How long it took.
    pub duration: Duration,
}

/// A restore done.
#[derive(Debug, Clone)]
pub struct RestoreOutput {
    /// The checkpoint restored.
    pub checkpoint: CheckpointInfo,
    /// What it changed.
    pub restored: Restored,
    /// Digest of the workspace after the restore.
    pub digest: String,
    /// How long it took.
    pub duration: Duration,
}

/// The changes since a point.
#[derive(Debug, Clone)]
pub struct ChangesOutput {
    /// The checkpoint compared with; empty for the session's start.
    pub since: String,
    /// The changes.
    pub changes: Changes,
    /// Digest of the workspace now (empty when nothing has changed since
    /// the start and no picture was taken).
    pub digest: String,
    /// How long it took.
    pub duration: Duration,
}

enum Baseline {
    NotYet,
    Taken(Arc<Manifest>),
    Failed(String),
}

/// What callers may read without waiting for a scan: the checkpoints as
/// they see them, and those deleted.
#[derive(Default)]
struct Listing {
    checkpoints: Vec<CheckpointInfo>,
    deleted: HashSet<String>,
}

struct State {
    store: Store,
    baseline: Baseline,
    /// What the baseline's picture holds in memory (0 until taken).
    baseline_memory: usize,
    checkpoints: Vec<Checkpoint>,
    deleted: HashSet<String>,
    /// The last picture taken: the cache of the next scan.
    cache: Option<Arc<Manifest>>,
    /// The baseline was taken early (see `early`), as written to the disk.
    early: bool,
}

/// One workspace's history. Cheap to clone.
#[derive(Clone)]
pub struct History {
    workspace: Workspace,
    limits: HistoryLimits,
    state: Arc<Mutex<State>>,
    /// Writers (file tools, commands) hold it shared; a restore holds it
    /// alone.
    writers: Arc<RwLock<()>>,
    /// The baseline was taken (or could not be): the fast path of `begin`.
    begun: Arc<AtomicBool>,
    /// An early baseline stands, not yet adopted by a first change (see
    /// `early`).
    early: Arc<AtomicBool>,
    /// A copy of the checkpoints' listing, updated under `state`'s lock
    /// whenever they change, read without it.
    listing: Arc<std::sync::Mutex<Listing>>,
}

/// Publishes the checkpoints of `st` (with what each alone holds) to
/// `listing`.
fn publish(listing: &std::sync::Mutex<Listing>, st: &State) {
    let checkpoints = st
        .checkpoints
        .iter()
        .map(|c| {
            let mut info = c.info.clone();
            info.own_bytes = st.store.own_bytes(&c.manifest);
            info
        })
        .collect();
    let mut l = listing.lock().unwrap_or_else(|e| e.into_inner());
    l.checkpoints = checkpoints;
    l.deleted = st.deleted.clone();
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").finish_non_exhaustive()
    }
}

impl History {
    /// The history of `workspace`, keeping contents in the empty directory
    /// `store_dir` (the service's own, opened for reading), at most
    /// `budget` bytes of them.
    pub fn new(
        workspace: Workspace,
        store_dir: OwnedFd,
        budget: u64,
        limits: HistoryLimits,
    ) -> History {
        History {
            workspace,
            limits,
            state: Arc::new(Mutex::new(State {
                store: Store::new(store_dir, budget),
                baseline: Baseline::NotYet,
                baseline_memory: 0,
                checkpoints: Vec::new(),
                deleted: HashSet::new(),
                cache: None,
                early: false,
            })),
            writers: Arc::new(RwLock::new(())),
            begun: Arc::new(AtomicBool::new(false)),
            early: Arc::new(AtomicBool::new(false)),
            listing: Arc::default(),
        }
    }

    /// A scan's turn: scans hold up to [`ScanLimits::max_depth`] directory
    /// fds, so they share the service's walk slots.
    pub(super) async fn scan_turn(
        &self,
    ) -> Result<
        (
            tokio::sync::OwnedSemaphorePermit,
            tokio::sync::OwnedSemaphorePermit,
        ),
        Error,
    > {
        self.workspace.walk_turn().await.map_err(|e| Error::Io {
            op: "wait for a walk slot",
            source: std::io::Error::other(e.to_string()),
        })
    }

    /// A writer's turn: held while a file is written or a command runs;
    /// a restore waits for every turn to end.
    pub async fn write_turn(&self) -> OwnedRwLockReadGuard<()> {
        Arc::clone(&self.writers).read_owned().await
    }

    async fn exclusive(&self, wait: Duration) -> Result<OwnedRwLockWriteGuard<()>, Error> {
        tokio::time::timeout(wait, Arc::clone(&self.writers).write_owned())
            .await
            .map_err(|_| Error::Busy)
    }

    /// Takes a checkpoint of the workspace now.
    pub async fn create(&self, label: String) -> Result<Created, Error> {
        let started = Instant::now();
        let mut state = Arc::clone(&self.state).lock_owned().await;
        if state.checkpoints.len() >= self.limits.max_checkpoints {
            return Err(Error::TooMany {
                limit: self.limits.max_checkpoints,
            });
        }
        let turn = self.scan_turn().await?;
        let (ws, limits) = (self.workspace.clone(), self.limits);
        let (cancel, listing) = (Cancel::default(), Arc::clone(&self.listing));
        let stop = cancel.flag();
        let _cancel = cancel;
        blocking(move || {
            let _turn = turn;
            let st = &mut *state;
            let before = st.store.bytes();
            let cache = st.cache.clone();
            let m = match scan_until(
                ws.root_fd(),
                cache.as_deref(),
                limits.scan,
                Some(&mut st.store),
                &stop,
            ) {
                Ok(m) => m,
                Err(e) => {
                    st.store.collect();
                    return Err(e.into());
                }
            };
            // A checkpoint is for restoring: a file it cannot keep makes it
            // one that would not restore.
            if let Some((path, size)) = m.unread() {
                let e = ScanError::FileTooLarge {
                    path: super::tree::show(path),
                    size,
                    limit: limits.scan.max_file_bytes,
                };
                st.store.collect();
                return Err(e.into());
            }
            let held: usize =
                st.baseline_memory + st.checkpoints.iter().map(|c| c.memory).sum::<usize>();
            let memory = m.memory();
            if held + memory > limits.max_memory {
                st.store.collect();
                return Err(Error::TooLarge {
                    bytes: held + memory,
                    limit: limits.max_memory,
                });
            }
            st.store.retain(&m);
            st.store.seal();
            let copied_bytes = st.store.bytes() - before;
            let m = Arc::new(m);
            st.cache = Some(Arc::clone(&m));
            let (files, bytes) = m.file_totals();
            let info = CheckpointInfo {
                id: new_id(),
                label,
                created: SystemTime::now(),
                files,
                bytes,
                own_bytes: st.store.own_bytes(&m),
                digest: m.digest(),
            };
            let name = picture_name(&info.id);
            st.checkpoints.push(Checkpoint {
                info: info.clone(),
                manifest: Arc::clone(&m),
                memory,
            });
            persist(st, Some((&name, &m)));
            publish(&listing, st);
            Ok(Created {
                checkpoint: info,
                copied_bytes,
                store_bytes: st.store.bytes(),
                store_budget: st.store.budget(),
                duration: started.elapsed(),
            })
        })
        .await
    }

    /// The checkpoint `id`.
    /// Never waits for a scan.
    pub async fn info(&self, id: &str) -> Result<CheckpointInfo, Error> {
        let l = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        l.checkpoints
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                id: id.to_string(),
                deleted: l.deleted.contains(id),
            })
    }

    /// The checkpoints kept, oldest first. Never waits for a scan.
    pub async fn list(&self) -> Vec<CheckpointInfo> {
        let l = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        l.checkpoints.clone()
    }

    fn find<'s>(state: &'s State, id: &str) -> Result<&'s Checkpoint, Error> {
        state
            .checkpoints
            .iter()
            .find(|c| c.info.id == id)
            .ok_or_else(|| Error::NotFound {
                id: id.to_string(),
                deleted: state.deleted.contains(id),
            })
    }

    /// Deletes a checkpoint; contents no other picture holds are freed.
    pub async fn delete(&self, id: &str) -> Result<CheckpointInfo, Error> {
        let mut state = Arc::clone(&self.state).lock_owned().await;
        Self::find(&state, id)?;
        let (id, listing) = (id.to_string(), Arc::clone(&self.listing));
        blocking(move || {
            let st = &mut *state;
            let at = st
                .checkpoints
                .iter()
                .position(|c| c.info.id == id)
                .expect("found above");
            let gone = st.checkpoints.remove(at);
            st.store.release(&gone.manifest);
            st.deleted.insert(id);
            persist(st, None);
            publish(&listing, st);
            let _ = rustix::fs::unlinkat(
                st.store.dir(),
                picture_name(&gone.info.id).as_str(),
                rustix::fs::AtFlags::empty(),
            );
            Ok(gone.info)
        })
        .await
    }

    /// Brings the workspace back to checkpoint `id`, all or nothing, if
    /// `policy` allows RestoreCheckpoint every file it would write or
    /// remove. Waits up to `wait` for writes and commands in flight to end.
    pub async fn restore(
        &self,
        id: &str,
        wait: Duration,
        policy: Arc<Policy>,
    ) -> Result<RestoreOutput, Error> {
        let started = Instant::now();
        {
            let state = self.state.lock().await;
            Self::find(&state, id)?;
        }
        let alone = self.exclusive(wait).await?;
        let mut state = Arc::clone(&self.state).lock_owned().await;
        let target = Arc::clone(&Self::find(&state, id)?.manifest);
        let info = Self::find(&state, id)?.info.clone();
        let turn = self.scan_turn().await?;
        let (ws, limits) = (self.workspace.clone(), self.limits);
        let cancel = Cancel::default();
        let stop = cancel.flag();
        let _cancel = cancel;
        blocking(move || {
            let (_alone, _turn) = (alone, turn);
            let st = &mut *state;
            let cache = st.cache.clone();
            let root = ws.root_fd();
            let current = scan_until(root, cache.as_deref(), limits.scan, None, &stop)?;
            // Checked on the picture the restore works from, while nothing
            // else may write: what is checked is what is changed.
            let denied = restore::touched(&current, &target)
                .find_map(|path| policy.check_write("RestoreCheckpoint", &show(path)).err());
            if let Some(denial) = denied {
                st.cache = Some(Arc::new(current));
                return Err(Error::Denied(denial));
            }
            let restored = restore::restore(
                root,
                &current,
                &target,
                &st.store,
                ws.new_owner(),
                ws.intents(),
            )?;
            // Read back: what the workspace holds now.
            // Not cancelled: the workspace has changed, and the cache must
            // say what it holds now.
            let never = AtomicBool::new(false);
            let after = scan_until(root, Some(&current), limits.scan, None, &never)?;
            let digest = after.digest();
            st.cache = Some(Arc::new(after));
            Ok(RestoreOutput {
                checkpoint: info,
                restored,
                digest,
                duration: started.elapsed(),
            })
        })
        .await
    }

    /// The changes since checkpoint `since` (empty: since the session
    /// began).
    pub async fn changes(&self, since: &str, bounds: Bounds) -> Result<ChangesOutput, Error> {
        let started = Instant::now();
        let mut state = Arc::clone(&self.state).lock_owned().await;
        // An early baseline no change adopted yet: the session has not
        // begun, so nothing changed since it did.
        let not_begun = self.early.load(std::sync::atomic::Ordering::Acquire);
        let base = if since.is_empty() {
            match &state.baseline {
                Baseline::Taken(m) if !not_begun => Arc::clone(m),
                Baseline::Failed(why) => return Err(Error::NoBaseline(why.clone())),
                Baseline::NotYet | Baseline::Taken(_) => {
                    return Ok(ChangesOutput {
                        since: String::new(),
                        changes: Changes::default(),
                        digest: String::new(),
                        duration: started.elapsed(),
                    });
                }
            }
        } else {
            Arc::clone(&Self::find(&state, since)?.manifest)
        };
        let turn = self.scan_turn().await?;
        let (ws, limits, since) = (self.workspace.clone(), self.limits, since.to_string());
        // A file the scan did not read (past its per-file bound) is never
        // read to be diffed either: it is listed as too large by its size.
        let mut bounds = bounds;
        bounds.max_file_bytes = bounds.max_file_bytes.min(limits.scan.max_file_bytes);
        let cancel = Cancel::default();
        let stop = cancel.flag();
        let _cancel = cancel;
        blocking(move || {
            let _turn = turn;
            let st = &mut *state;
            let cache = st.cache.clone();
            let root = ws.root_fd();
            let now = scan_until(root, cache.as_deref(), limits.scan, None, &stop)?;
            let changes =
                changes::changes(root, &base, &now, &st.store, bounds).map_err(|source| {
                    Error::Io {
                        op: "read the changed files",
                        source,
                    }
                })?;
            let digest = now.digest();
            st.cache = Some(Arc::new(now));
            Ok(ChangesOutput {
                since,
                changes,
                digest,
                duration: started.elapsed(),
            })
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Io {
            op: "run the history task",
            source: std::io::Error::other(e.to_string()),
        })?
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}
