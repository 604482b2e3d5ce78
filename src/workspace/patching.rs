//! ApplyPatch over a workspace: every file of the patch resolved, checked
//! against the policy and locked (in one order, so two patches never wait
//! for each other), read and patched in memory; then the new contents are
//! staged and land together (see [`super::tree::restore::land`]): all the
//! files change, or none does.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use rustix::fs::{Gid, Mode, OFlags, Uid};

use super::patch::{self, Action, FilePatch};
use super::path::RelPath;
use super::tree::restore::{self, Stage, Step};
use super::{Error, Inner, Workspace, blocking, sha256_hex, walk};
use crate::policy::Policy;

/// One file a patch changed.
#[derive(Debug, Clone)]
pub struct PatchedFile {
    /// What was done.
    pub action: Action,
    /// Where it lives now (its real workspace-relative path); for a
    /// deletion, where it lived.
    pub path: String,
    /// For a rename, where it lived.
    pub old_path: Option<String>,
    /// Hex sha256 before (`None`: it did not exist).
    pub sha256_before: Option<String>,
    /// Hex sha256 after (`None`: it was deleted).
    pub sha256_after: Option<String>,
    /// Hunks applied.
    pub hunks: u64,
    /// Lines after minus lines before.
    pub line_delta: i64,
}

/// A file of the patch, resolved.
struct Target {
    patch: FilePatch,
    /// Real path of the file patched (modify, delete, rename's source).
    old: Option<RelPath>,
    /// Where the result lands (create, rename's target); for a modify,
    /// the same as `old`.
    new: Option<RelPath>,
}

impl Workspace {
    /// Applies a unified diff of one or more files, all or nothing, where
    /// `policy` allows every write.
    pub async fn apply_patch(
        &self,
        text: &str,
        policy: &Arc<Policy>,
    ) -> Result<Vec<PatchedFile>, Error> {
        let files = patch::parse(text)?;
        let inner = Arc::clone(&self.inner);
        let policy_c = Arc::clone(policy);
        let targets = blocking(move || resolve(&inner, files, &policy_c)).await?;
        let mut keys: Vec<std::path::PathBuf> = targets
            .iter()
            .flat_map(|t| [&t.old, &t.new])
            .flatten()
            .map(|p| self.inner.key(p))
            .collect();
        keys.sort();
        keys.dedup();
        let mut guards = Vec::with_capacity(keys.len());
        for key in keys {
            guards.push(self.inner.locks.lock(key).await);
        }
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let _guards = guards;
            apply_locked(&inner, targets)
        })
        .await
    }
}

/// Resolves every path of the patch inside the workspace and checks it
/// against the policy.
fn resolve(inner: &Inner, files: Vec<FilePatch>, policy: &Policy) -> Result<Vec<Target>, Error> {
    let mut out = Vec::with_capacity(files.len());
    for patch in files {
        let old = match &patch.old_path {
            Some(p) => {
                let rel = inner.root.rel(p)?;
                Some(
                    inner
                        .root
                        .real(&rel)
                        .map_err(|e| Error::from_io("resolve", &rel, e))?,
                )
            }
            None => None,
        };
        let new = match (&patch.action, &patch.new_path) {
            (Action::Modify, _) => old.clone(),
            (_, Some(p)) => {
                let rel = inner.root.rel(p)?;
                Some(
                    inner
                        .root
                        .landing(&rel)
                        .map_err(|e| Error::from_io("resolve", &rel, e))?,
                )
            }
            (_, None) => None,
        };
        for p in [&old, &new].into_iter().flatten() {
            policy
                .check_write("ApplyPatch", p.as_str())
                .map_err(Error::Denied)?;
        }
        out.push(Target { patch, old, new });
    }
    Ok(out)
}

/// What a file becomes.
struct Planned {
    target: usize,
    before: Option<(Vec<u8>, rustix::fs::Stat)>,
    after: Option<Vec<u8>>,
    line_delta: i64,
}

fn apply_locked(inner: &Inner, targets: Vec<Target>) -> Result<Vec<PatchedFile>, Error> {
    // Everything is read and patched before anything is written.
    let mut planned = Vec::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        let before = match &t.old {
            Some(old) => {
                let (bytes, st) = read(inner, old)?;
                // Binary as git sees it (a NUL byte), or not UTF-8.
                if bytes.contains(&0) || std::str::from_utf8(&bytes).is_err() {
                    return Err(Error::NotText {
                        path: old.to_string(),
                    });
                }
                Some((bytes, st))
            }
            None => None,
        };
        if let (Action::Create | Action::Rename, Some(new)) = (&t.patch.action, &t.new)
            && inner
                .root
                .open(new, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty())
                .is_ok()
        {
            return Err(Error::Exists {
                path: new.to_string(),
            });
        }
        let shown = t
            .new
            .as_ref()
            .or(t.old.as_ref())
            .map(RelPath::to_string)
            .unwrap_or_default();
        let old_bytes = before
            .as_ref()
            .map(|(b, _)| b.as_slice())
            .unwrap_or_default();
        let applied = patch::apply(old_bytes, &t.patch.hunks).map_err(|error| Error::Hunk {
            path: shown.clone(),
            error,
        })?;
        if applied.bytes.len() as u64 > inner.limits.max_file_bytes {
            return Err(Error::TooLarge {
                path: shown,
                size: applied.bytes.len() as u64,
                limit: inner.limits.max_file_bytes,
            });
        }
        let after = match t.patch.action {
            Action::Delete if !applied.bytes.is_empty() => {
                return Err(Error::DeleteIncomplete { path: shown });
            }
            Action::Delete => None,
            _ => Some(applied.bytes),
        };
        planned.push(Planned {
            target: i,
            before,
            after,
            line_delta: applied.line_delta,
        });
    }
    land(inner, &targets, &planned)?;
    Ok(planned
        .into_iter()
        .map(|p| {
            let t = &targets[p.target];
            PatchedFile {
                action: t.patch.action.clone(),
                path: t
                    .new
                    .as_ref()
                    .or(t.old.as_ref())
                    .map(RelPath::to_string)
                    .unwrap_or_default(),
                old_path: (t.patch.action == Action::Rename)
                    .then(|| t.old.as_ref().map(RelPath::to_string))
                    .flatten(),
                sha256_before: p.before.as_ref().map(|(b, _)| sha256_hex(b)),
                sha256_after: p.after.as_ref().map(|b| sha256_hex(b)),
                hunks: t.patch.hunks.len() as u64,
                line_delta: p.line_delta,
            }
        })
        .collect())
}

fn read(inner: &Inner, rel: &RelPath) -> Result<(Vec<u8>, rustix::fs::Stat), Error> {
    let (parent, name) = rel.split_last().ok_or_else(|| Error::NotAFile {
        path: rel.to_string(),
    })?;
    let dir = inner
        .root
        .open(&parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
        .map_err(|e| Error::from_io("open directory", &parent, e))?;
    inner.read_regular(rel, walk::open_child_file(&dir, name))
}

/// Stages the new contents and lands every change together.
fn land(inner: &Inner, targets: &[Target], planned: &[Planned]) -> Result<(), Error> {
    let root = inner.root.fd();
    let io = |e: restore::Error| Error::Io {
        op: "apply the patch to",
        path: e.path,
        source: match e.left_in {
            None => e.source,
            Some(dir) => std::io::Error::other(format!(
                "{}; something changed the workspace meanwhile and not every step could be undone: \
                 what could not be put back is in {dir}",
                e.source
            )),
        },
    };
    let stage = Stage::new(root, "patch", inner.intents.get()).map_err(io)?;
    let result = (|| {
        let mut steps_owned: Vec<(u8, Vec<u8>, usize, u32)> = Vec::new();
        let mut made = std::collections::HashSet::new();
        for (n, p) in planned.iter().enumerate() {
            let t = &targets[p.target];
            let old_mode = p.before.as_ref().map(|(_, st)| st.st_mode & 0o777);
            let mode = t.patch.new_mode.or(old_mode).unwrap_or(0o644);
            if let Some(after) = &p.after {
                // A replaced file keeps its owner; a new one gets the
                // workspace's.
                let owner = match &p.before {
                    Some((_, st)) => Some((st.st_uid, st.st_gid)),
                    None => inner.new_owner,
                };
                stage_bytes(stage.fd(), n, after, mode, owner).map_err(|e| Error::Io {
                    op: "stage",
                    path: t.new.as_ref().map(RelPath::to_string).unwrap_or_default(),
                    source: e,
                })?;
            }
            match t.patch.action {
                Action::Modify => {
                    let old = t.old.as_ref().expect("a modify has an old path");
                    steps_owned.push((b'x', old.as_str().as_bytes().to_vec(), n, 0));
                }
                Action::Delete => {
                    let old = t.old.as_ref().expect("a delete has an old path");
                    steps_owned.push((b'r', old.as_str().as_bytes().to_vec(), 0, 0));
                }
                Action::Create | Action::Rename => {
                    if let Some(old) = &t.old {
                        steps_owned.push((b'r', old.as_str().as_bytes().to_vec(), 0, 0));
                    }
                    let new = t.new.as_ref().expect("a create has a new path");
                    for dir in new.ancestors_inclusive().filter(|a| a != new) {
                        let exists = inner
                            .root
                            .open(&dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
                            .is_ok();
                        if !exists && made.insert(dir.clone()) {
                            steps_owned.push((b'd', dir.as_str().as_bytes().to_vec(), 0, 0));
                            steps_owned.push((b'm', dir.as_str().as_bytes().to_vec(), 0, 0o755));
                        }
                    }
                    steps_owned.push((b'p', new.as_str().as_bytes().to_vec(), n, 0));
                }
            }
        }
        // Removals first (a rename's source), directories before what
        // goes in them, their modes last, deepest first.
        let of = |kind: u8| steps_owned.iter().filter(move |(k, ..)| *k == kind);
        let mut dirs: Vec<_> = of(b'd').collect();
        dirs.sort_by(|a, b| a.1.cmp(&b.1));
        let mut modes: Vec<_> = of(b'm').collect();
        modes.sort_by(|a, b| b.1.cmp(&a.1));
        let files = steps_owned
            .iter()
            .filter(|(k, ..)| *k == b'x' || *k == b'p');
        let steps: Vec<Step<'_>> = of(b'r')
            .chain(dirs)
            .chain(files)
            .chain(modes)
            .map(|(k, p, n, m)| match k {
                b'x' => Step::Exchange(p, *n),
                b'r' => Step::Remove(p),
                b'd' => Step::MakeDir(p),
                b'm' => Step::Chmod(p, *m),
                _ => Step::Place(p, *n),
            })
            .collect();
        restore::land(root, &stage, &steps, inner.new_owner).map_err(io)
    })();
    stage.remove(root);
    result
}

/// Stages `bytes` as entry `n` of the staging directory, with `mode` and
/// `owner`, synced.
fn stage_bytes(
    stage: &std::os::fd::OwnedFd,
    n: usize,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(
        stage,
        OsStr::new(&n.to_string()),
        flags,
        Mode::from_raw_mode(0o600),
    )?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    if let Some((uid, gid)) = owner {
        match rustix::fs::fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))) {
            Ok(()) | Err(rustix::io::Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777))?;
    file.sync_all()
}
