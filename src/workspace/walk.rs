//! Directory listing and recursive walks that never leave the workspace.
//!
//! Every directory is opened relative to its parent's fd with `O_NOFOLLOW`,
//! one component at a time, so a symlink swapped in by a command is never
//! followed. Symlinks are listed but not descended into. `.git` is skipped and
//! `.gitignore` files (from the root down) are honoured the way git does:
//! the deepest matching rule wins and an ignored directory is not entered.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::path::{RelPath, Root};

/// Deepest directory level a walk enters.
const MAX_DEPTH: usize = 128;

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

/// Lists the directory `dir_fd` (opened for reading), sorted by name.
/// Names that are not UTF-8 are skipped: no tool could address them.
pub fn list(dir_fd: &OwnedFd) -> io::Result<Vec<DirEntry>> {
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir_fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let st = match rustix::fs::statat(dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed between readdir and stat: it is simply gone.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        };
        entries.push(DirEntry {
            name: name.to_string(),
            kind,
            size: st.st_size as u64,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
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

/// The gitignore rules in force for one directory, deepest last.
struct Rules {
    stack: Vec<(RelPath, Gitignore)>,
}

impl Rules {
    fn load(&mut self, dir: &OwnedFd, rel: &RelPath) {
        let Ok(fd) = open_child_file(dir, ".gitignore") else {
            return;
        };
        let Ok(text) = read_small(fd, 1 << 20) else {
            return;
        };
        let mut builder = GitignoreBuilder::new(".");
        for line in text.lines() {
            // A malformed line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        if let Ok(gi) = builder.build() {
            self.stack.push((rel.clone(), gi));
        }
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

/// Walks the regular files beneath `start` (a directory) in sorted
/// depth-first order. `visit` receives each file's path, its directory fd and
/// its name, and says whether to go on.
pub fn walk_files(
    root: &Root,
    start: &RelPath,
    visit: &mut dyn FnMut(&RelPath, &OwnedFd, &str) -> io::Result<Flow>,
) -> io::Result<()> {
    let mut rules = Rules { stack: Vec::new() };
    // Rules of the directories above `start` apply to it too.
    let mut dir = open_child_dir(root.fd(), ".")?;
    rules.load(&dir, &RelPath::root());
    for ancestor in start.ancestors_inclusive() {
        let Some((_, name)) = ancestor.split_last() else {
            continue;
        };
        if name == ".git" || rules.ignored(&ancestor, true) {
            return Ok(());
        }
        dir = open_child_dir(&dir, name)?;
        rules.load(&dir, &ancestor);
    }
    walk_dir(&dir, start, &mut rules, visit, 0).map(|_| ())
}

fn walk_dir(
    dir: &OwnedFd,
    rel: &RelPath,
    rules: &mut Rules,
    visit: &mut dyn FnMut(&RelPath, &OwnedFd, &str) -> io::Result<Flow>,
    depth: usize,
) -> io::Result<Flow> {
    for entry in list(dir)? {
        let child = rel.join(&entry.name);
        match entry.kind {
            Kind::Dir => {
                if entry.name == ".git" || depth >= MAX_DEPTH || rules.ignored(&child, true) {
                    continue;
                }
                let sub = match open_child_dir(dir, &entry.name) {
                    Ok(fd) => fd,
                    // Swapped or removed since the listing: skip it.
                    Err(_) => continue,
                };
                let before = rules.stack.len();
                rules.load(&sub, &child);
                let flow = walk_dir(&sub, &child, rules, visit, depth + 1)?;
                rules.stack.truncate(before);
                if let Flow::Stop = flow {
                    return Ok(Flow::Stop);
                }
            }
            Kind::File => {
                if rules.ignored(&child, false) {
                    continue;
                }
                if let Flow::Stop = visit(&child, dir, &entry.name)? {
                    return Ok(Flow::Stop);
                }
            }
            Kind::Symlink | Kind::Other => {}
        }
    }
    Ok(Flow::Continue)
}

/// `name` as an `OsStr`, for APIs that want one.
pub fn os(name: &str) -> &OsStr {
    OsStr::from_bytes(name.as_bytes())
}
