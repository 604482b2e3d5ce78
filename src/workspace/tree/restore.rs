//! Bringing a workspace back to a picture, all or nothing.
//!
//! Only what differs is touched. First every file and symlink to be
//! written is staged, from the store, in a directory of the service's own
//! inside the workspace (same filesystem, so a rename places it): a restore
//! that fails there (no space, a content missing) has changed nothing.
//! Then come the steps that change the tree, each one a rename, mkdir or
//! chmod recorded with its inverse: what is removed is renamed into the
//! staging directory, what is replaced is exchanged with its staged copy
//! (`RENAME_EXCHANGE`). If a step fails, the steps done are undone in
//! reverse, and the workspace is as it was. The staging directory, with
//! everything removed or replaced, is deleted at the end.
//!
//! Every step works through directory fds opened one component at a time
//! without following symlinks: a process that swaps a directory for a
//! symlink meanwhile makes the restore fail (and undo), never write outside.
//!
//! A landing given a place for records ([`Intents`]) records itself before
//! it begins, so that one cut short by a crash of the service is finished
//! at the next start ([`resume`], see [`super::intent`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, RenameFlags, Uid};

pub use super::chmod::chmod_nofollow;
use super::intent::Intents;
use super::store::Store;
use super::{Manifest, Node, open_dir, show};

mod plan;

use crate::workspace::remove::remove_tree_at;
use plan::plan;
pub use plan::touched;

/// An entry to stage: its path and what it is to hold.
type Staged<'a> = (&'a [u8], &'a Node);

/// What a restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files and symlinks written (created or replaced).
    pub written: u64,
    /// Entries removed (a directory counts once, with all it held).
    pub removed: u64,
    /// Directories created.
    pub dirs_made: u64,
    /// Entries whose mode alone changed.
    pub modes: u64,
}

/// Why a restore changed nothing.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {path}: {source}")]
pub struct Error {
    /// The step that failed.
    pub op: &'static str,
    /// Workspace-relative path.
    pub path: String,
    /// The OS error.
    pub source: io::Error,
    /// Set when a step could not be undone (something swapped a directory
    /// meanwhile): the workspace-relative staging directory, kept and given
    /// to the workspace's owner, where what could not be put back lies.
    pub left_in: Option<String>,
}

impl Error {
    /// An error of `op` on `path`, before anything was changed.
    pub fn new(op: &'static str, path: &str, source: io::Error) -> Error {
        Error {
            op,
            path: path.to_string(),
            source,
            left_in: None,
        }
    }
}

fn fail<'p>(op: &'static str, path: &'p [u8]) -> impl FnOnce(io::Error) -> Error + 'p {
    move |source| Error::new(op, &show(path), source)
}

fn errno<'p>(op: &'static str, path: &'p [u8]) -> impl FnOnce(rustix::io::Errno) -> Error + 'p {
    move |e| fail(op, path)(e.into())
}

/// One step that changes the tree; paths are workspace-relative.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    /// Move the entry (a whole tree, for a directory) out of the way.
    Remove(&'a [u8]),
    /// Make a directory, mode 0700 until a `Chmod` says otherwise.
    MakeDir(&'a [u8]),
    /// Place the staged entry `n` at the path (nothing is there).
    Place(&'a [u8], usize),
    /// Swap the staged entry `n` with what is at the path.
    Exchange(&'a [u8], usize),
    /// Set the permission bits.
    Chmod(&'a [u8], u32),
}

/// A directory of the service's own at the workspace root, where entries
/// are staged (named by number) before they are placed, and where what is
/// removed or replaced goes until the end.
pub struct Stage {
    name: String,
    what: String,
    fd: OwnedFd,
    /// An undo failed: what it holds must stay for its owner.
    keep: std::cell::Cell<bool>,
    /// Where the landing is recorded, if anywhere.
    intents: Option<Intents>,
}

impl Stage {
    /// Makes a fresh staging directory under `root`, named for `what`.
    /// With `intents`, it is recorded first, and so is the landing later:
    /// a crash in between is undone or finished at the next start.
    pub fn new(root: &OwnedFd, what: &str, intents: Option<&Intents>) -> Result<Stage, Error> {
        let name = format!(".sandboxd-{what}.{:016x}", rand_u64());
        if let Some(intents) = intents {
            intents
                .staging(what, &name)
                .map_err(fail("record the landing into", b"."))?;
        }
        let made = rustix::fs::mkdirat(root, name.as_str(), Mode::from_raw_mode(0o700))
            .map_err(errno("create the staging directory", name.as_bytes()))
            .and_then(|()| {
                open_dir(root, name.as_bytes()).map_err(|e| {
                    let _ = remove_tree_at(root, OsStr::new(&name));
                    fail("open the staging directory", name.as_bytes())(e)
                })
            });
        match made {
            Ok(fd) => Ok(Stage {
                name,
                what: what.to_string(),
                fd,
                keep: std::cell::Cell::new(false),
                intents: intents.cloned(),
            }),
            Err(e) => {
                if let Some(intents) = intents {
                    intents.over(&name);
                }
                Err(e)
            }
        }
    }

    /// The directory, for `*at` calls; entry `n` is named `n`.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Removes the directory and all it holds, unless an undo failed: then
    /// it stays, with what could not be put back.
    pub fn remove(self, root: &OwnedFd) {
        if !self.keep.get() {
            drop(self.fd);
            if let Err(e) = remove_tree_at(root, OsStr::new(&self.name)) {
                tracing::warn!(error = %e, "cannot remove a staging directory");
            }
        }
        // Removed or kept for its owner, the landing is over.
        if let Some(intents) = &self.intents {
            intents.over(&self.name);
        }
    }

    /// Records the landing of `steps` before it begins.
    pub(super) fn record(
        &self,
        steps: &[Step<'_>],
        owner: Option<(u32, u32)>,
    ) -> Result<(), Error> {
        let Some(intents) = &self.intents else {
            return Ok(());
        };
        let staged = steps.iter().filter_map(|s| match s {
            Step::Place(_, n) | Step::Exchange(_, n) => Some(*n),
            _ => None,
        });
        let mut inodes = vec![0u64; staged.clone().max().map_or(0, |n| n + 1)];
        for n in staged {
            let st =
                rustix::fs::statat(&self.fd, n.to_string().as_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(errno("record the landing into", b"."))?;
            inodes[n] = st.st_ino;
        }
        intents
            .landing(&self.what, &self.name, steps, &inodes, owner)
            .map_err(fail("record the landing into", b"."))
    }
}

/// Takes `steps` in order, with entries staged in `stage`; if one fails,
/// those done are undone, newest first, and the tree is as it was.
pub fn land(
    root: &OwnedFd,
    stage: &Stage,
    steps: &[Step<'_>],
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    stage.record(steps, owner)?;
    let mut undo = Vec::new();
    let applied = apply(root, &stage.fd, steps, owner, None, &mut undo);
    if let Err(mut e) = applied {
        if rollback(root, &stage.fd, undo) > 0 {
            // What could not be put back lies in the staging directory:
            // it stays, its owner's, and the caller is told where.
            stage.keep.set(true);
            give(&stage.fd, owner);
            e.left_in = Some(stage.name.clone());
        }
        return Err(e);
    }
    Ok(())
}

/// Finishes a landing of `steps` from `stage` that a crash cut short: the
/// steps not yet done are taken (`inodes[n]` is the inode staged entry `n`
/// had, which tells an exchange done). If one fails, every step done is
/// undone, newest first, but modes; `left_in` is set when something could
/// not be put back (the staging directory is then given to `owner`).
pub fn resume(
    root: &OwnedFd,
    stage: &OwnedFd,
    steps: &[Step<'_>],
    inodes: &[u64],
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    let mut undo = Vec::new();
    let applied = apply(root, stage, steps, owner, Some(inodes), &mut undo);
    if let Err(mut e) = applied {
        if rollback(root, stage, undo) > 0 {
            give(stage, owner);
            e.left_in = Some(String::new());
        }
        return Err(e);
    }
    Ok(())
}

fn give(fd: &OwnedFd, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        let _ = rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
    }
}

/// A step done, and how to undo it.
pub(super) enum Done {
    Trashed { path: Vec<u8>, trash: String },
    Made { path: Vec<u8> },
    Placed { path: Vec<u8>, staged: String },
    Exchanged { path: Vec<u8>, staged: String },
    Chmod { path: Vec<u8>, mode: u32 },
}

/// Brings the tree under `root` (whose picture is `current`, just taken)
/// to `target` (a kept picture whose contents are all in `store`). New
/// entries are owned by `owner` when given.
pub fn restore(
    root: &OwnedFd,
    current: &Manifest,
    target: &Manifest,
    store: &Store,
    owner: Option<(u32, u32)>,
    intents: Option<&Intents>,
) -> Result<Restored, Error> {
    let (steps, staged, mut stats) = plan(current, target);
    if steps.is_empty() {
        return Ok(stats);
    }
    let stage = Stage::new(root, "restore", intents)?;
    let result = staged
        .iter()
        .enumerate()
        .try_for_each(|(n, (path, node))| stage_one(stage.fd(), n, path, node, store, owner))
        .and_then(|()| land(root, &stage, &steps, owner));
    // Everything removed or replaced now lives there; a failed restore
    // left only staged copies.
    stage.remove(root);
    result?;
    stats.written = staged.len() as u64;
    Ok(stats)
}

fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b"", path),
    }
}

/// Opens directory `path` beneath `root`, one component at a time, never
/// following a symlink.
fn open_path(root: &OwnedFd, path: &[u8]) -> io::Result<OwnedFd> {
    let mut dir = open_dir(root, b".")?;
    for name in path.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
        dir = open_dir(&dir, name)?;
    }
    Ok(dir)
}

/// The parent directories of consecutive steps are mostly the same one:
/// it is opened once.
struct Parents<'r> {
    root: &'r OwnedFd,
    last: Option<(Vec<u8>, OwnedFd)>,
}

impl Parents<'_> {
    fn of<'p>(&mut self, path: &'p [u8]) -> io::Result<(&OwnedFd, &'p [u8])> {
        let (parent, name) = split(path);
        let hit = matches!(&self.last, Some((p, _)) if p == parent);
        if !hit {
            self.last = Some((parent.to_vec(), open_path(self.root, parent)?));
        }
        let fd = &self.last.as_ref().expect("set above").1;
        Ok((fd, name))
    }

    /// Forgets the cached directory (after a step that may have replaced it).
    fn forget(&mut self) {
        self.last = None;
    }
}

fn stage_one(
    stage: &OwnedFd,
    n: usize,
    path: &[u8],
    node: &Node,
    store: &Store,
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    let name = n.to_string();
    let chown = |fd: &File| -> io::Result<()> {
        if let Some((uid, gid)) = owner {
            rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
        }
        Ok(())
    };
    match node {
        Node::File { mode, sha256, .. } => {
            let mut src = store
                .open(sha256)
                .map_err(fail("find the kept contents of", path))?;
            let flags =
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(stage, name.as_str(), flags, Mode::from_raw_mode(0o600))
                .map_err(errno("stage", path))?;
            let mut dst = File::from(fd);
            io::copy(&mut src, &mut dst).map_err(fail("stage", path))?;
            chown(&dst).map_err(fail("give its owner to", path))?;
            rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode & super::KEPT_MODE))
                .map_err(errno("set the mode of", path))?;
        }
        Node::Symlink { target } => {
            rustix::fs::symlinkat(OsStr::from_bytes(target), stage, name.as_str())
                .map_err(errno("stage", path))?;
            if let Some((uid, gid)) = owner {
                rustix::fs::chownat(
                    stage,
                    name.as_str(),
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(errno("give its owner to", path))?;
            }
        }
        Node::Dir { .. } | Node::Special => {}
    }
    Ok(())
}

/// Takes `steps` in order, recording each done in `undo`. When resuming
/// (`inodes` given: see [`resume`]), a step already done is only recorded.
pub(super) fn apply(
    root: &OwnedFd,
    stage: &OwnedFd,
    steps: &[Step<'_>],
    owner: Option<(u32, u32)>,
    inodes: Option<&[u64]>,
    undo: &mut Vec<Done>,
) -> Result<(), Error> {
    let mut parents = Parents { root, last: None };
    let mut trash = 0usize;
    let resuming = inodes.is_some();
    let present = |dir: &OwnedFd, name: &[u8]| {
        rustix::fs::statat(dir, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW).ok()
    };
    for step in steps {
        match *step {
            Step::Remove(path) => {
                trash += 1;
                let to = format!("trash.{trash}");
                let done = Done::Trashed {
                    path: path.to_vec(),
                    trash: to.clone(),
                };
                if resuming && present(stage, to.as_bytes()).is_some() {
                    undo.push(done);
                    continue;
                }
                let (dir, name) = parents
                    .of(path)
                    .map_err(fail("open the directory of", path))?;
                match rustix::fs::renameat(dir, OsStr::from_bytes(name), stage, to.as_str()) {
                    Ok(()) => undo.push(done),
                    // Gone already: removed, and its trash with the rest.
                    Err(rustix::io::Errno::NOENT) if resuming => {}
                    Err(e) => return Err(errno("remove", path)(e)),
                }
                // A removed directory may have been the cached parent.
                parents.forget();
            }
            Step::MakeDir(path) => {
                let (dir, name) = parents
                    .of(path)
                    .map_err(fail("open the directory of", path))?;
                let made = resuming
                    && present(dir, name).is_some_and(|st| {
                        rustix::fs::FileType::from_raw_mode(st.st_mode)
                            == rustix::fs::FileType::Directory
                    });
                let name = OsStr::from_bytes(name);
                if !made {
                    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
                        .map_err(errno("create the directory", path))?;
                }
                undo.push(Done::Made {
                    path: path.to_vec(),
                });
                if let Some((uid, gid)) = owner {
                    rustix::fs::chownat(
                        dir,
                        name,
                        Some(Uid::from_raw(uid)),
                        Some(Gid::from_raw(gid)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )
                    .map_err(errno("give its owner to", path))?;
                }
            }
            Step::Place(path, n) | Step::Exchange(path, n) => {
                let exchange = matches!(step, Step::Exchange(..));
                let (dir, name) = parents
                    .of(path)
                    .map_err(fail("open the directory of", path))?;
                let staged = n.to_string();
                let done = match inodes {
                    None => false,
                    // A placed entry left the staging directory; an
                    // exchanged one is at its path.
                    Some(_) if !exchange => present(stage, staged.as_bytes()).is_none(),
                    Some(inodes) => {
                        present(dir, name).map(|st| st.st_ino) == inodes.get(n).copied()
                    }
                };
                if !done {
                    let flags = if exchange {
                        RenameFlags::EXCHANGE
                    } else {
                        RenameFlags::NOREPLACE
                    };
                    rustix::fs::renameat_with(
                        stage,
                        staged.as_str(),
                        dir,
                        OsStr::from_bytes(name),
                        flags,
                    )
                    .map_err(errno("write", path))?;
                }
                let path = path.to_vec();
                undo.push(if exchange {
                    Done::Exchanged { path, staged }
                } else {
                    Done::Placed { path, staged }
                });
            }
            Step::Chmod(path, mode) => {
                let (dir, name) = parents
                    .of(path)
                    .map_err(fail("open the directory of", path))?;
                let was = chmod_nofollow(dir, name, mode).map_err(fail("set the mode of", path))?;
                undo.push(Done::Chmod {
                    path: path.to_vec(),
                    mode: was,
                });
            }
        }
    }
    Ok(())
}

/// Undoes `done`, newest first. Best effort: each inverse is a rename,
/// rmdir or chmod of what the step itself made. Returns how many steps
/// could not be undone.
pub(super) fn rollback(root: &OwnedFd, stage: &OwnedFd, done: Vec<Done>) -> usize {
    let mut failed = 0;
    let mut parents = Parents { root, last: None };
    for step in done.into_iter().rev() {
        let result: io::Result<()> = (|| match &step {
            Done::Trashed { path, trash } => {
                let (dir, name) = parents.of(path)?;
                rustix::fs::renameat(stage, trash.as_str(), dir, OsStr::from_bytes(name))?;
                Ok(())
            }
            Done::Made { path } => {
                let (dir, name) = parents.of(path)?;
                rustix::fs::unlinkat(dir, OsStr::from_bytes(name), AtFlags::REMOVEDIR)?;
                Ok(())
            }
            Done::Placed { path, staged } => {
                let (dir, name) = parents.of(path)?;
                rustix::fs::renameat(dir, OsStr::from_bytes(name), stage, staged.as_str())?;
                Ok(())
            }
            Done::Exchanged { path, staged } => {
                let (dir, name) = parents.of(path)?;
                rustix::fs::renameat_with(
                    stage,
                    staged.as_str(),
                    dir,
                    OsStr::from_bytes(name),
                    RenameFlags::EXCHANGE,
                )?;
                Ok(())
            }
            Done::Chmod { path, mode } => {
                let (dir, name) = parents.of(path)?;
                chmod_nofollow(dir, name, *mode).map(|_| ())
            }
        })();
        if let Err(e) = result {
            failed += 1;
            tracing::warn!(error = %e, "cannot undo a step of a failed restore");
        }
        parents.forget();
    }
    failed
}

fn rand_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}
