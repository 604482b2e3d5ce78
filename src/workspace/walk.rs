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

/// A walk in progress: its bounds and what it holds.
struct Walk<'a, 'v> {
    rules: Rules<'a>,
    visit: &'v mut dyn FnMut(&RelPath, &OwnedFd, &str) -> io::Result<Flow>,
    /// Directory entries listed and not yet done with.
    held: usize,
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
    let mut walk = Walk {
        rules: Rules {
            stack: Vec::new(),
            limits,
            files_read: 0,
            rules_compiled: 0,
        },
        visit,
        held: 0,
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
                    if name == ".git" || depth >= MAX_DEPTH || self.rules.ignored(&child, true) {
                        continue;
                    }
                    let sub = match open_child_dir(dir, name) {
                        Ok(fd) => fd,
                        // Swapped or removed since the listing: skip it.
                        Err(_) => continue,
                    };
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
                    if let Flow::Stop = (self.visit)(&child, dir, name)? {
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
mod tests {
    use super::*;

    fn walk(root: &Path, start: &str, limits: &WalkLimits) -> Result<Vec<String>, WalkError> {
        let root = Root::at(root).unwrap();
        let start = root.rel(start).unwrap();
        let mut found = Vec::new();
        walk_files(&root, &start, limits, &mut |file, _, name| {
            if name != ".gitignore" {
                found.push(file.as_str().to_string());
            }
            Ok(Flow::Continue)
        })?;
        Ok(found)
    }

    fn refusal(result: Result<Vec<String>, WalkError>) -> (String, WalkLimit, u64) {
        match result {
            Err(WalkError::Limit { path, what, limit }) => (path.to_string(), what, limit),
            other => panic!("expected a limit refusal, got {other:?}"),
        }
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn rules(n: usize) -> String {
        (0..n).map(|i| format!("*.gen{i}\n")).collect()
    }

    #[test]
    fn an_ignore_file_over_the_byte_bound_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "a.rs", "");
        write(tmp.path(), "src/.gitignore", &"#".repeat(2000));
        let limits = WalkLimits {
            ignore_file_max_bytes: 1000,
            ..WalkLimits::default()
        };
        let got = refusal(walk(tmp.path(), "", &limits));
        assert_eq!(
            got,
            ("src/.gitignore".into(), WalkLimit::IgnoreFileBytes, 1000)
        );
        // Exactly at the bound it is read.
        write(tmp.path(), "src/.gitignore", &"#".repeat(1000));
        assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["a.rs"]);
    }

    #[test]
    fn an_ignore_file_with_too_many_rules_is_refused_and_comments_do_not_count() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "keep.rs", "");
        write(tmp.path(), "x.gen3", "");
        let limits = WalkLimits {
            ignore_file_max_rules: 10,
            ..WalkLimits::default()
        };
        let with_comments = format!("{}{}", "# note\n\n   \n".repeat(100), rules(10));
        write(tmp.path(), ".gitignore", &with_comments);
        assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["keep.rs"]);
        write(tmp.path(), ".gitignore", &rules(11));
        let got = refusal(walk(tmp.path(), "", &limits));
        assert_eq!(got, (".gitignore".into(), WalkLimit::IgnoreFileRules, 10));
    }

    #[test]
    fn rules_past_the_walk_total_are_refused_at_the_file_that_crosses_it() {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["a", "b", "c"] {
            write(tmp.path(), &format!("{dir}/.gitignore"), &rules(4));
            write(tmp.path(), &format!("{dir}/f.rs"), "");
        }
        let limits = WalkLimits {
            ignore_walk_max_rules: 10,
            ..WalkLimits::default()
        };
        // Siblings are not in force together, but each costs its compile.
        let got = refusal(walk(tmp.path(), "", &limits));
        assert_eq!(got, ("c/.gitignore".into(), WalkLimit::IgnoreWalkRules, 10));
        // A narrower walk stays within the bound.
        assert_eq!(walk(tmp.path(), "b", &limits).unwrap(), ["b/f.rs"]);
    }

    #[test]
    fn ignore_files_past_the_walk_count_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(tmp.path(), &format!("d{i}/.gitignore"), "");
        }
        let limits = WalkLimits {
            ignore_walk_max_files: 4,
            ..WalkLimits::default()
        };
        let got = refusal(walk(tmp.path(), "", &limits));
        assert_eq!(got, ("d4/.gitignore".into(), WalkLimit::IgnoreWalkFiles, 4));
    }

    #[test]
    fn ignore_files_nested_past_the_bound_are_refused_from_the_start_path_too() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = String::new();
        for _ in 0..4 {
            write(tmp.path(), &format!("{dir}.gitignore"), "*.o\n");
            dir.push_str("n/");
        }
        write(tmp.path(), &format!("{dir}f.rs"), "");
        let limits = WalkLimits {
            ignore_max_nesting: 3,
            ..WalkLimits::default()
        };
        let want = ("n/n/n/.gitignore".to_string(), WalkLimit::IgnoreNesting, 3);
        assert_eq!(refusal(walk(tmp.path(), "", &limits)), want);
        // The rules above a start path are in force for it as well.
        assert_eq!(refusal(walk(tmp.path(), "n/n/n", &limits)), want);
    }

    #[test]
    fn an_ignored_directory_is_not_entered_so_its_ignore_file_costs_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), ".gitignore", "vendor/\n");
        write(tmp.path(), "vendor/.gitignore", &rules(50));
        write(tmp.path(), "main.rs", "");
        let limits = WalkLimits {
            ignore_file_max_rules: 10,
            ..WalkLimits::default()
        };
        assert_eq!(walk(tmp.path(), "", &limits).unwrap(), ["main.rs"]);
    }

    #[test]
    fn a_walk_holding_too_many_entries_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..6 {
            write(tmp.path(), &format!("top{i}"), "");
        }
        for i in 0..5 {
            write(tmp.path(), &format!("sub/f{i}"), "");
        }
        let limits = WalkLimits {
            max_held_entries: 10,
            ..WalkLimits::default()
        };
        // 7 entries at the top are held while `sub` (5 more) is walked.
        let got = refusal(walk(tmp.path(), "", &limits));
        assert_eq!(got, ("sub".into(), WalkLimit::HeldEntries, 10));
        assert_eq!(walk(tmp.path(), "sub", &limits).unwrap().len(), 5);
    }

    #[test]
    fn list_keeps_the_first_names_in_order_and_says_there_are_more() {
        let tmp = tempfile::tempdir().unwrap();
        for i in (0..50).rev() {
            write(tmp.path(), &format!("f{i:02}"), "x");
        }
        let dir = open_child_dir(Root::at(tmp.path()).unwrap().fd(), ".").unwrap();
        let (entries, more) = list(&dir, 5).unwrap();
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["f00", "f01", "f02", "f03", "f04"]);
        assert!(more);
        assert_eq!(entries[0].size, 1);
        let (entries, more) = list(&dir, 50).unwrap();
        assert_eq!(entries.len(), 50);
        assert!(!more);
    }

    /// Builds `depth` nested directories `d` under `top` through fds (the
    /// path is far past PATH_MAX), with a file `f` at each listed depth.
    fn deep_chain(top: &Path, depth: usize, files_at: &[usize]) {
        let mut dir = open_child_dir(Root::at(top).unwrap().fd(), ".").unwrap();
        for level in 0..=depth {
            if files_at.contains(&level) {
                let flags = OFlags::WRONLY | OFlags::CREATE;
                rustix::fs::openat(&dir, "f", flags, Mode::from_raw_mode(0o644)).unwrap();
            }
            if level < depth {
                rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
                dir = open_child_dir(&dir, "d").unwrap();
            }
        }
    }

    #[test]
    fn a_30000_deep_tree_is_walked_to_the_depth_bound_and_no_further() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("ws");
        std::fs::create_dir(&top).unwrap();
        deep_chain(&top, 30_000, &[0, 1, MAX_DEPTH, MAX_DEPTH + 1, 30_000]);
        let walked = top.clone();
        // A small stack: the walk's recursion is bounded by MAX_DEPTH, not
        // by the tree.
        let found = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || walk(&walked, "", &WalkLimits::default()))
            .unwrap()
            .join();
        // TempDir's own removal recurses per level (it would overflow the
        // stack, also while unwinding from a failed assert); this does not.
        super::super::remove::remove_tree(&top).unwrap();
        let depth_of = |p: &String| p.matches('/').count();
        let depths: Vec<usize> = found.unwrap().unwrap().iter().map(depth_of).collect();
        // Sorted depth-first: "d" before "f" at every level.
        assert_eq!(depths, [MAX_DEPTH, 1, 0]);
    }
}
