//! Directory listing and recursive walks that never leave the workspace.
//!
//! Every directory is opened relative to its parent's fd with `O_NOFOLLOW`,
//! one component at a time, so a symlink swapped in by a command is never
//! followed. Symlinks are listed but not descended into. `.git` is skipped and
//! `.gitignore` files (from the root down) are honoured the way git does:
//! the deepest matching rule wins and an ignored directory is not entered.
//!
//! A walk is bounded whatever a command built: [`MAX_DEPTH`] levels (so as
//! many stack frames and open fds at most), and [`WalkLimits`] on ignore
//! files and on the directory entries held at once. Past a bound the walk
//! is refused with [`WalkError::Limit`], naming the file or directory.

use std::collections::BinaryHeap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::path::{RelPath, Root};

/// Deepest directory level a walk enters below its start (level 0),
/// whatever the tree's depth: at most this many + 1 directories are open,
/// and as many stack frames live, at once.
pub const MAX_DEPTH: usize = 128;

/// Kind of a directory entry, symlinks not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (never followed).
    Symlink,
    /// Anything else (fifo, socket, device).
    Other,
}

/// One entry of a directory.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// Entry name.
    pub name: String,
    /// Entry kind.
    pub kind: Kind,
    /// Size in bytes (of the link itself for symlinks).
    pub size: u64,
}

/// Lists the directory `dir_fd` (opened for reading): the first `max`
/// entries in name order, and whether there were more. Memory follows
/// `max`, not the size of the directory. Names that are not UTF-8 are
/// skipped: no tool could address them.
pub fn list(dir_fd: &OwnedFd, max: usize) -> io::Result<(Vec<DirEntry>, bool)> {
    // A max-heap of the smallest names seen so far.
    let mut kept: BinaryHeap<String> = BinaryHeap::new();
    let mut more = false;
    for entry in rustix::fs::Dir::read_from(dir_fd)? {
        let entry = entry?;
        let Some(name) = entry_name(&entry) else {
            continue;
        };
        if kept.len() < max {
            kept.push(name.to_string());
        } else {
            more = true;
            if kept.peek().is_some_and(|largest| name < largest.as_str()) {
                kept.pop();
                kept.push(name.to_string());
            }
        }
    }
    let mut entries = Vec::with_capacity(kept.len());
    for name in kept.into_sorted_vec() {
        let st = match rustix::fs::statat(dir_fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed between readdir and stat: it is simply gone.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        entries.push(DirEntry {
            name,
            kind: kind_of(FileType::from_raw_mode(st.st_mode)),
            size: st.st_size as u64,
        });
    }
    Ok((entries, more))
}

/// An entry's name, unless it is `.`, `..` or not UTF-8.
fn entry_name(entry: &rustix::fs::DirEntry) -> Option<&str> {
    let name = entry.file_name().to_bytes();
    if name == b"." || name == b".." {
        return None;
    }
    std::str::from_utf8(name).ok()
}

fn kind_of(file_type: FileType) -> Kind {
    match file_type {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// Names and kinds of a directory's entries, sorted by name, for a walk.
/// Refuses (`None`) past `budget` entries, before holding more.
fn list_kinds(dir_fd: &OwnedFd, budget: usize) -> io::Result<Option<Vec<(String, Kind)>>> {
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir_fd)? {
        let entry = entry?;
        let Some(name) = entry_name(&entry) else {
            continue;
        };
        let kind = match entry.file_type() {
            // Filesystems without d_type: ask.
            FileType::Unknown => {
                match rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => kind_of(FileType::from_raw_mode(st.st_mode)),
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            known => kind_of(known),
        };
        if entries.len() == budget {
            return Ok(None);
        }
        entries.push((name.to_string(), kind));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(entries))
}

/// Opens a child directory of `dir` without following a symlink.
pub fn open_child_dir(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Opens a regular file in `dir` for reading without following a symlink;
/// `O_NONBLOCK` keeps a planted fifo from hanging the open.
pub fn open_child_file(dir: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Whether the walk goes on after a visited file.
pub enum Flow {
    /// Keep walking.
    Continue,
    /// Stop the whole walk.
    Stop,
}

/// Bounds of one walk: what a command can plant in a workspace (a 1 MB
/// `.gitignore`, thousands of nested ones, a directory of millions of
/// entries) must not cost the service unbounded CPU or memory. Past a bound
/// the walk is refused, never silently cut short.
#[derive(Debug, Clone)]
pub struct WalkLimits {
    /// Largest `.gitignore` read, in bytes.
    pub ignore_file_max_bytes: u64,
    /// Most rules (non-blank, non-comment lines) in one `.gitignore`.
    pub ignore_file_max_rules: usize,
    /// Most rules compiled over one walk, all `.gitignore` files together.
    pub ignore_walk_max_rules: usize,
    /// Most `.gitignore` files read by one walk.
    pub ignore_walk_max_files: usize,
    /// Most `.gitignore` files in force at once (one per directory level
    /// from the root down).
    pub ignore_max_nesting: usize,
    /// Most directory entries a walk holds at once (the listings of the
    /// directories on its current path).
    pub max_held_entries: usize,
}

/// Defaults sized by measurement (release build): a compiled rule costs
/// about 12 KB and 0.04 ms (`*.ext`) to 22 KB and 0.3 ms (`**/dir/*.tmp`),
/// so the 3,000 rules a walk accepts cost at most ~65 MB and ~1 s of CPU,
/// where one 30,000-rule file cost 390-670 MB and 1.5-10 s. Real projects
/// stay far below: GitHub's templates are tens to hundreds of rules, and a
/// kernel-sized tree holds a few hundred `.gitignore` files.
impl Default for WalkLimits {
    fn default() -> Self {
        WalkLimits {
            ignore_file_max_bytes: 128 * 1024,
            ignore_file_max_rules: 1_000,
            ignore_walk_max_rules: 3_000,
            ignore_walk_max_files: 1_000,
            ignore_max_nesting: 16,
            max_held_entries: 250_000,
        }
    }
}

/// Which bound of [`WalkLimits`] a walk met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkLimit {
    /// [`WalkLimits::ignore_file_max_bytes`]
    IgnoreFileBytes,
    /// [`WalkLimits::ignore_file_max_rules`]
    IgnoreFileRules,
    /// [`WalkLimits::ignore_walk_max_rules`]
    IgnoreWalkRules,
    /// [`WalkLimits::ignore_walk_max_files`]
    IgnoreWalkFiles,
    /// [`WalkLimits::ignore_max_nesting`]
    IgnoreNesting,
    /// [`WalkLimits::max_held_entries`]
    HeldEntries,
}

/// Why a walk stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// A directory could not be opened or read.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A bound of [`WalkLimits`] was met.
    #[error("{path}: over the walk limit {what:?} of {limit}")]
    Limit {
        /// The `.gitignore` file or directory that crossed the bound.
        path: RelPath,
        /// The bound.
        what: WalkLimit,
        /// Its value.
        limit: u64,
    },
}

/// The gitignore rules in force for one directory, deepest last, and what
/// the walk has spent on them.
struct Rules<'a> {
    stack: Vec<(RelPath, Gitignore)>,
    limits: &'a WalkLimits,
    files_read: usize,
    rules_compiled: usize,
}

impl Rules<'_> {
    fn refuse(&self, path: RelPath, what: WalkLimit, limit: usize) -> WalkError {
        WalkError::Limit {
            path,
            what,
            limit: limit as u64,
        }
    }

    /// Loads `rel/.gitignore` if there is one, within the walk's bounds.
    fn load(&mut self, dir: &OwnedFd, rel: &RelPath) -> Result<(), WalkError> {
        let Ok(fd) = open_child_file(dir, ".gitignore") else {
            return Ok(());
        };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            return Ok(());
        };
        // A directory or fifo planted under that name is no ignore file.
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(());
        }
        let path = rel.join(".gitignore");
        let limits = self.limits;
        if self.files_read == limits.ignore_walk_max_files {
            return Err(self.refuse(
                path,
                WalkLimit::IgnoreWalkFiles,
                limits.ignore_walk_max_files,
            ));
        }
        if self.stack.len() == limits.ignore_max_nesting {
            return Err(self.refuse(path, WalkLimit::IgnoreNesting, limits.ignore_max_nesting));
        }
        self.files_read += 1;
        let max_bytes = limits.ignore_file_max_bytes;
        let too_big = WalkError::Limit {
            path: path.clone(),
            what: WalkLimit::IgnoreFileBytes,
            limit: max_bytes,
        };
        if st.st_size as u64 > max_bytes {
            return Err(too_big);
        }
        // take() guards against a file that grows while we read it.
        let Ok(text) = read_small(fd, max_bytes + 1) else {
            // Not UTF-8: git would read it, but no rule of ours could be
            // trusted to mean the same; it ignores nothing here.
            return Ok(());
        };
        if text.len() as u64 > max_bytes {
            return Err(too_big);
        }
        // Counted as the builder does: blank lines and comments are no rules.
        let rules = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim_end().is_empty())
            .count();
        if rules > limits.ignore_file_max_rules {
            return Err(self.refuse(
                path,
                WalkLimit::IgnoreFileRules,
                limits.ignore_file_max_rules,
            ));
        }
        if self.rules_compiled + rules > limits.ignore_walk_max_rules {
            return Err(self.refuse(
                path,
                WalkLimit::IgnoreWalkRules,
                limits.ignore_walk_max_rules,
            ));
        }
        self.rules_compiled += rules;
        let mut builder = GitignoreBuilder::new(".");
        for line in text.lines() {
            // A malformed line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        if let Ok(gi) = builder.build() {
            self.stack.push((rel.clone(), gi));
        }
        Ok(())
    }

    fn ignored(&self, rel: &RelPath, is_dir: bool) -> bool {
        for (base, gi) in self.stack.iter().rev() {
            let inner = if base.is_root() {
                rel.as_str()
            } else {
                &rel.as_str()[base.as_str().len() + 1..]
            };
            match gi.matched(Path::new(inner), is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

fn read_small(fd: OwnedFd, cap: u64) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(cap)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// What a walk visits: each entry's path, its directory's fd, its name
/// and its kind.
type Visit<'v> = &'v mut dyn FnMut(&RelPath, &OwnedFd, &str, Kind) -> io::Result<Flow>;

/// A walk in progress: its bounds and what it holds.
struct Walk<'a, 'v> {
    rules: Rules<'a>,
    visit: Visit<'v>,
    /// Directory entries listed and not yet done with.
    held: usize,
    /// Visit directories (before entering them) and symlinks too, not only
    /// regular files.
    all: bool,
    /// Deepest level entered ([`MAX_DEPTH`] at most).
    max_depth: usize,
}

/// Walks the regular files beneath `start` (a directory) in sorted
/// depth-first order, at most [`MAX_DEPTH`] levels down, within `limits`.
/// `visit` receives each file's path, its directory fd and its name, and
/// says whether to go on.
pub fn walk_files(
    root: &Root,
    start: &RelPath,
    limits: &WalkLimits,
    visit: &mut dyn FnMut(&RelPath, &OwnedFd, &str) -> io::Result<Flow>,
) -> Result<(), WalkError> {
    let mut files = |rel: &RelPath, dir: &OwnedFd, name: &str, _: Kind| visit(rel, dir, name);
    walk(root, start, limits, false, MAX_DEPTH, &mut files)
}

/// Walks like [`walk_files`], and also visits each directory (before
/// entering it) and each symlink; at most `max_depth` levels down (and no
/// deeper than [`MAX_DEPTH`]).
pub fn walk_all(
    root: &Root,
    start: &RelPath,
    limits: &WalkLimits,
    max_depth: usize,
    visit: Visit<'_>,
) -> Result<(), WalkError> {
    walk(root, start, limits, true, max_depth.min(MAX_DEPTH), visit)
}

fn walk(
    root: &Root,
    start: &RelPath,
    limits: &WalkLimits,
    all: bool,
    max_depth: usize,
    visit: Visit<'_>,
) -> Result<(), WalkError> {
    let mut walk = Walk {
        rules: Rules {
            stack: Vec::new(),
            limits,
            files_read: 0,
            rules_compiled: 0,
        },
        visit,
        held: 0,
        all,
        max_depth,
    };
    // Rules of the directories above `start` apply to it too.
    let mut dir = open_child_dir(root.fd(), ".")?;
    walk.rules.load(&dir, &RelPath::root())?;
    for ancestor in start.ancestors_inclusive() {
        let Some((_, name)) = ancestor.split_last() else {
            continue;
        };
        if name == ".git" || walk.rules.ignored(&ancestor, true) {
            return Ok(());
        }
        dir = open_child_dir(&dir, name)?;
        walk.rules.load(&dir, &ancestor)?;
    }
    walk.dir(&dir, start, 0).map(|_| ())
}

impl Walk<'_, '_> {
    /// Walks one directory. Recursion is bounded by [`MAX_DEPTH`]: at most
    /// that many frames and directory fds at once.
    fn dir(&mut self, dir: &OwnedFd, rel: &RelPath, depth: usize) -> Result<Flow, WalkError> {
        let max = self.rules.limits.max_held_entries;
        let Some(entries) = list_kinds(dir, max - self.held.min(max))? else {
            return Err(WalkError::Limit {
                path: rel.clone(),
                what: WalkLimit::HeldEntries,
                limit: max as u64,
            });
        };
        self.held += entries.len();
        let flow = self.entries(dir, rel, &entries, depth);
        self.held -= entries.len();
        flow
    }

    fn entries(
        &mut self,
        dir: &OwnedFd,
        rel: &RelPath,
        entries: &[(String, Kind)],
        depth: usize,
    ) -> Result<Flow, WalkError> {
        for (name, kind) in entries {
            let child = rel.join(name);
            match kind {
                Kind::Dir => {
                    if name == ".git" || depth >= self.max_depth || self.rules.ignored(&child, true)
                    {
                        continue;
                    }
                    let sub = match open_child_dir(dir, name) {
                        Ok(fd) => fd,
                        // Swapped or removed since the listing: skip it.
                        Err(_) => continue,
                    };
                    if self.all
                        && let Flow::Stop = (self.visit)(&child, dir, name, Kind::Dir)?
                    {
                        return Ok(Flow::Stop);
                    }
                    let before = self.rules.stack.len();
                    self.rules.load(&sub, &child)?;
                    let flow = self.dir(&sub, &child, depth + 1)?;
                    self.rules.stack.truncate(before);
                    if let Flow::Stop = flow {
                        return Ok(Flow::Stop);
                    }
                }
                Kind::File => {
                    if self.rules.ignored(&child, false) {
                        continue;
                    }
                    if let Flow::Stop = (self.visit)(&child, dir, name, Kind::File)? {
                        return Ok(Flow::Stop);
                    }
                }
                Kind::Symlink if self.all && !self.rules.ignored(&child, false) => {
                    if let Flow::Stop = (self.visit)(&child, dir, name, Kind::Symlink)? {
                        return Ok(Flow::Stop);
                    }
                }
                Kind::Symlink | Kind::Other => {}
            }
        }
        Ok(Flow::Continue)
    }
}

/// `name` as an `OsStr`, for APIs that want one.
pub fn os(name: &str) -> &OsStr {
    OsStr::from_bytes(name.as_bytes())
}

#[cfg(test)]
mod tests;
