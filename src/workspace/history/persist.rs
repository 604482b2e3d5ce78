//! How a history is kept on the disk, beside the store's packs, so that a
//! service that restarts finds it again: the pictures of the baseline and
//! of each checkpoint are written once, when taken, and a small index
//! (which pictures, the store's contents) after every change. Reading it
//! back trusts nothing as a scan's cache.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{Mutex, RwLock};

use super::super::Workspace;
use super::super::tree::Manifest;
use super::super::tree::store::Store;
use super::{Baseline, Checkpoint, CheckpointInfo, History, HistoryLimits, Listing, State};

impl History {
    /// The history an earlier instance of the service kept in `store_dir`
    /// (see [`History::new`]), read back: the baseline and every checkpoint
    /// whose picture and contents are whole. Refused (with why) when there
    /// is no index or it cannot be read. Blocking.
    pub fn reopen(
        workspace: Workspace,
        store_dir: OwnedFd,
        budget: u64,
        limits: HistoryLimits,
    ) -> Result<History, String> {
        let bytes = read_whole(&store_dir, INDEX).map_err(|e| format!("{INDEX}: {e}"))?;
        let kept: Kept = serde_json::from_slice(&bytes).map_err(|e| format!("{INDEX}: {e}"))?;
        let mut store = Store::reopen(store_dir, budget, &kept.store)
            .map_err(|e| format!("the kept contents: {e}"))?;
        let whole = |store: &Store, m: &Manifest| {
            m.entries.values().all(|n| match n {
                super::super::tree::Node::File {
                    sha256,
                    hashed: true,
                    ..
                } => store.contains(sha256),
                _ => true,
            })
        };
        let mut baseline_memory = 0;
        let baseline = match kept.baseline {
            None => Baseline::NotYet,
            Some(Err(why)) => Baseline::Failed(why),
            // An early one no change adopted that cannot be read back is
            // as good as none: the first change takes the baseline.
            Some(Ok(())) if kept.early && !adopted(&store) => {
                match read_picture(store.dir(), BASELINE) {
                    Ok(m) if whole(&store, &m) => {
                        store.retain(&m);
                        baseline_memory = m.memory();
                        Baseline::Taken(Arc::new(m))
                    }
                    _ => Baseline::NotYet,
                }
            }
            Some(Ok(())) => match read_picture(store.dir(), BASELINE) {
                Ok(m) if whole(&store, &m) => {
                    store.retain(&m);
                    baseline_memory = m.memory();
                    Baseline::Taken(Arc::new(m))
                }
                Ok(_) => Baseline::Failed("its kept contents are incomplete".into()),
                Err(e) => Baseline::Failed(format!("its picture cannot be read back ({e})")),
            },
        };
        let mut checkpoints = Vec::new();
        for c in kept.checkpoints {
            match read_picture(store.dir(), &picture_name(&c.id)) {
                Ok(m) if whole(&store, &m) => {
                    store.retain(&m);
                    checkpoints.push(Checkpoint {
                        info: CheckpointInfo {
                            id: c.id,
                            label: c.label,
                            created: c.created,
                            files: c.files,
                            bytes: c.bytes,
                            own_bytes: 0,
                            digest: c.digest,
                        },
                        memory: m.memory(),
                        manifest: Arc::new(m),
                    });
                }
                Ok(_) => {
                    tracing::warn!(checkpoint = %c.id, "a checkpoint's kept contents are incomplete; it is dropped")
                }
                Err(e) => {
                    tracing::warn!(checkpoint = %c.id, error = %e, "a checkpoint cannot be read back; it is dropped")
                }
            }
        }
        store.collect();
        // An early baseline no change adopted yet is still early.
        let early = kept.early && matches!(baseline, Baseline::Taken(_)) && !adopted(&store);
        let begun = !matches!(baseline, Baseline::NotYet) && !early;
        let state = State {
            store,
            baseline,
            baseline_memory,
            checkpoints,
            deleted: kept.deleted.into_iter().collect(),
            // Nothing read back is trusted as a scan's cache.
            cache: None,
            early: kept.early,
        };
        let listing = Arc::new(std::sync::Mutex::new(Listing::default()));
        super::publish(&listing, &state);
        Ok(History {
            workspace,
            limits,
            state: Arc::new(Mutex::new(state)),
            writers: Arc::new(RwLock::new(())),
            begun: Arc::new(std::sync::atomic::AtomicBool::new(begun)),
            early: Arc::new(std::sync::atomic::AtomicBool::new(early)),
            listing,
        })
    }
}

/// Whether a change adopted the early baseline of `store`'s history.
fn adopted(store: &Store) -> bool {
    rustix::fs::statat(store.dir(), BEGUN, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// The history's index, beside the store's packs.
pub(super) const INDEX: &str = "history.json";
/// The picture of the baseline.
pub(super) const BASELINE: &str = "baseline.json";
/// Made when the first change adopts an early baseline (see `early`).
pub(super) const BEGUN: &str = "begun";

pub(super) fn picture_name(id: &str) -> String {
    format!("checkpoint-{id}.json")
}

/// The history as written to the disk.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    /// `None`: not taken yet; `Some(Ok)`: in [`BASELINE`]; `Some(Err)`:
    /// could not be kept, and why.
    baseline: Option<Result<(), String>>,
    checkpoints: Vec<KeptCheckpoint>,
    deleted: Vec<String>,
    store: super::super::tree::store::Index,
    /// The baseline was taken early (see `early`): it is the session's
    /// starting point once [`BEGUN`] exists beside it.
    #[serde(default)]
    early: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct KeptCheckpoint {
    id: String,
    label: String,
    created: SystemTime,
    files: u64,
    bytes: u64,
    digest: String,
}

/// Writes `picture` (a new one, under its name) and then the index, each
/// whole (a temporary name renamed into place). A history that cannot be
/// written still works; it only will not come back after a restart.
pub(super) fn persist(st: &State, picture: Option<(&str, &Manifest)>) {
    let dir = st.store.dir();
    let written = (|| -> std::io::Result<()> {
        if let Some((name, m)) = picture {
            write_whole(dir, name, &serde_json::to_vec(&m.stored())?)?;
        }
        let kept = Kept {
            baseline: match &st.baseline {
                Baseline::NotYet => None,
                Baseline::Taken(_) => Some(Ok(())),
                Baseline::Failed(why) => Some(Err(why.clone())),
            },
            checkpoints: st
                .checkpoints
                .iter()
                .map(|c| KeptCheckpoint {
                    id: c.info.id.clone(),
                    label: c.info.label.clone(),
                    created: c.info.created,
                    files: c.info.files,
                    bytes: c.info.bytes,
                    digest: c.info.digest.clone(),
                })
                .collect(),
            deleted: st.deleted.iter().cloned().collect(),
            store: st.store.index(),
            early: st.early,
        };
        write_whole(dir, INDEX, &serde_json::to_vec(&kept)?)
    })();
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot write the history's index; it will not survive a restart");
    }
}

/// Writes `bytes` as the file `name` of `dir`, whole: to a temporary name,
/// then renamed over `name`.
fn write_whole(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Write;
    let tmp = format!(".{name}.tmp");
    let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    let fd = rustix::fs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    std::fs::File::from(fd).write_all(bytes)?;
    rustix::fs::renameat(dir, tmp.as_str(), dir, name)?;
    Ok(())
}

/// The file `name` of `dir`, whole.
fn read_whole(dir: &OwnedFd, name: &str) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn read_picture(dir: &OwnedFd, name: &str) -> Result<Manifest, String> {
    let bytes = read_whole(dir, name).map_err(|e| format!("{name}: {e}"))?;
    let stored = serde_json::from_slice(&bytes).map_err(|e| format!("{name}: {e}"))?;
    Manifest::from_stored(&stored).map_err(|e| format!("{name}: {e}"))
}
