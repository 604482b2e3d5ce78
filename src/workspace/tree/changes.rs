//! What changed between two pictures: each file or symlink added, modified
//! or deleted, with its hashes before and after, and a unified patch in
//! git's format that `git apply` accepts on the older tree.
//!
//! Git's view is kept: directories are not listed (an empty one cannot be
//! in a patch), nor anything inside a `.git` directory but its `config` and
//! `hooks` (listed, never patched: a command that changes them changes what
//! git runs, which a reviewer must see), and of a file's mode only the
//! executable bit counts. A binary file (a NUL byte in its
//! first 8000 bytes, as git decides) or one past the size bound is listed
//! and named at the head of the patch, where `git apply` reads nothing,
//! but its bytes are not inlined. Every path in the patch, those comment
//! lines included, is quoted as git quotes it (see [`crate::workspace::quote`]):
//! a name with a newline cannot start a line of its own.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffTag, capture_diff_slices_deadline, group_diff_ops};

use super::store::Store;
use super::{Hash, Manifest, Node, open_dir, open_file};
use crate::workspace::quote::git_path;

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Absent before.
    Added,
    /// Present before and after, with other contents, type or mode.
    Modified,
    /// Absent after.
    Deleted,
}

/// One side of a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// sha256 of the contents (of the target, for a symlink).
    pub sha256: Hash,
    /// Git's mode: 100644, 100755 or 120000.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
}

/// Why a change's bytes are not in the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Omitted {
    /// Binary contents.
    Binary,
    /// Larger than [`Bounds::max_file_bytes`].
    TooLarge,
    /// The patch reached [`Bounds::max_patch_bytes`] before it.
    PatchFull,
    /// Git's own configuration or hooks, which no patch carries.
    GitInternal,
}

/// One changed path.
#[derive(Debug, Clone)]
pub struct Change {
    /// Workspace-relative path (bytes).
    pub path: Vec<u8>,
    /// How it changed.
    pub kind: Kind,
    /// Before (absent for an added path).
    pub before: Option<Side>,
    /// After (absent for a deleted path).
    pub after: Option<Side>,
    /// Set when the patch does not carry it, and why.
    pub omitted: Option<Omitted>,
}

/// Bounds of one listing and patch.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most changes listed.
    pub max_changes: usize,
    /// Most bytes of patch.
    pub max_patch_bytes: usize,
    /// Largest file whose contents are diffed.
    pub max_file_bytes: u64,
    /// Longest time spent finding one file's smallest diff; past it the
    /// diff is correct but may be larger.
    pub diff_time: Duration,
}

/// The changes between two pictures.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// Changed paths, in path order.
    pub changes: Vec<Change>,
    /// More changes exist than are listed.
    pub truncated: bool,
    /// The patch (bytes: file contents need not be UTF-8).
    pub patch: Vec<u8>,
}

impl Changes {
    /// Changes whose bytes the patch lacks.
    pub fn omitted(&self) -> usize {
        self.changes.iter().filter(|c| c.omitted.is_some()).count()
    }
}

/// Git's mode of a node; `None` for what git does not track.
fn git_mode(node: &Node) -> Option<u32> {
    match node {
        Node::File { mode, .. } if mode & 0o100 != 0 => Some(0o100755),
        Node::File { .. } => Some(0o100644),
        Node::Symlink { .. } => Some(0o120000),
        Node::Dir { .. } | Node::Special => None,
    }
}

fn side(node: &Node) -> Option<Side> {
    let mode = git_mode(node)?;
    Some(match node {
        Node::File { sha256, size, .. } => Side {
            sha256: *sha256,
            mode,
            size: *size,
        },
        Node::Symlink { target } => Side {
            sha256: super::hash_reader(&mut target.as_slice())
                .map(|(h, _)| h)
                .unwrap_or_default(),
            mode,
            size: target.len() as u64,
        },
        _ => return None,
    })
}

/// Whether `path` lies inside a `.git` directory, and if so whether it is
/// its configuration or a hook (what changes the code git runs).
fn in_git_dir(path: &[u8]) -> Option<bool> {
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let at = parts.iter().position(|c| *c == b".git")?;
    Some(matches!(
        parts.get(at + 1),
        Some(&b"config") | Some(&b"hooks")
    ))
}

/// Most bytes a listing may cost (each change its path four times, as a
/// quoted path in the patch's head may take, and 256 bytes of fields):
/// with the patch, a reply stays well under the message limit.
pub const MAX_LISTING_BYTES: usize = 4 << 20;

/// The paths changed from `base` to `now`, in path order: at most `max`,
/// and at most [`MAX_LISTING_BYTES`] of them.
pub fn list(base: &Manifest, now: &Manifest, max: usize) -> (Vec<Change>, bool) {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut paths: Vec<&Vec<u8>> = base.entries.keys().chain(now.entries.keys()).collect();
    paths.sort_unstable();
    paths.dedup();
    for path in paths {
        let git = in_git_dir(path);
        if git == Some(false) {
            continue;
        }
        let before = base.entries.get(path).and_then(side);
        let after = now.entries.get(path).and_then(side);
        let kind = match (&before, &after) {
            (None, None) => continue,
            (None, Some(_)) => Kind::Added,
            (Some(_), None) => Kind::Deleted,
            (Some(b), Some(a)) if b == a => continue,
            (Some(_), Some(_)) => Kind::Modified,
        };
        bytes += 4 * path.len() + 256;
        if out.len() == max || bytes > MAX_LISTING_BYTES {
            return (out, true);
        }
        out.push(Change {
            path: path.clone(),
            kind,
            before,
            after,
            omitted: git.map(|_| Omitted::GitInternal),
        });
    }
    (out, false)
}

/// The changes from `base` (contents in `store`) to `now` (contents read
/// from the tree under `root`), listed and as a patch within `bounds`.
pub fn changes(
    root: &OwnedFd,
    base: &Manifest,
    now: &Manifest,
    store: &Store,
    bounds: Bounds,
) -> io::Result<Changes> {
    let (mut listed, truncated) = list(base, now, bounds.max_changes);
    let mut body = Vec::new();
    for change in &mut listed {
        if change.omitted.is_some() {
            continue;
        }
        // Once the patch is full, nothing more is read or diffed.
        if body.len() >= bounds.max_patch_bytes {
            change.omitted = Some(Omitted::PatchFull);
            continue;
        }
        let old = match base.entries.get(&change.path) {
            Some(node) if change.before.is_some() => Some(contents(
                node,
                || match node {
                    Node::File { sha256, .. } => store.read(sha256),
                    _ => Ok(Vec::new()),
                },
                bounds,
            )?),
            _ => None,
        };
        let new = match now.entries.get(&change.path) {
            Some(node) if change.after.is_some() => Some(contents(
                node,
                || read_now(root, &change.path, bounds),
                bounds,
            )?),
            _ => None,
        };
        let (old, new) = match (old, new) {
            (Some(Contents::Omitted(why)), _) | (_, Some(Contents::Omitted(why))) => {
                change.omitted = Some(why);
                continue;
            }
            (Some(Contents::Bytes(o)), n) => (Some(o), n.map(Contents::into_bytes)),
            (None, n) => (None, n.map(Contents::into_bytes)),
        };
        // The file may have changed again since the scan: the patch and
        // the listing say what was read.
        if let (Some(after), Some(bytes)) = (&mut change.after, &new)
            && after.mode != 0o120000
        {
            let (hash, size) = super::hash_reader(&mut bytes.as_slice())?;
            after.sha256 = hash;
            after.size = size;
        }
        let text = file_patch(change, old.as_deref(), new.as_deref(), bounds.diff_time);
        if body.len() + text.len() > bounds.max_patch_bytes {
            change.omitted = Some(Omitted::PatchFull);
            continue;
        }
        body.extend_from_slice(&text);
    }
    let mut patch = Vec::new();
    let omitted: Vec<&Change> = listed.iter().filter(|c| c.omitted.is_some()).collect();
    if !omitted.is_empty() {
        patch.extend_from_slice(b"# Not in this patch (git apply ignores these lines):\n");
        for c in omitted {
            let why = match c.omitted {
                Some(Omitted::Binary) => "binary",
                Some(Omitted::TooLarge) => "too large to diff",
                Some(Omitted::GitInternal) => "git configuration or hook: review it by hand",
                _ => "past the patch size bound",
            };
            let hashes = |s: &Option<Side>| {
                s.as_ref()
                    .map(|s| hex::encode(s.sha256))
                    .unwrap_or_else(|| "-".into())
            };
            patch.extend_from_slice(
                format!(
                    "#   {} ({why}, {:?}): sha256 {} -> {}\n",
                    // Quoted as in the rest of the patch: a name's newline
                    // would end this comment and start patch lines.
                    git_path("", &c.path),
                    c.kind,
                    hashes(&c.before),
                    hashes(&c.after)
                )
                .as_bytes(),
            );
        }
    }
    patch.extend_from_slice(&body);
    Ok(Changes {
        changes: listed,
        truncated,
        patch,
    })
}

enum Contents {
    Bytes(Vec<u8>),
    Omitted(Omitted),
}

impl Contents {
    fn into_bytes(self) -> Vec<u8> {
        match self {
            Contents::Bytes(b) => b,
            Contents::Omitted(_) => Vec::new(),
        }
    }
}

fn contents(
    node: &Node,
    read: impl FnOnce() -> io::Result<Vec<u8>>,
    bounds: Bounds,
) -> io::Result<Contents> {
    match node {
        Node::Symlink { target } => Ok(Contents::Bytes(target.clone())),
        Node::File { size, .. } if *size > bounds.max_file_bytes => {
            Ok(Contents::Omitted(Omitted::TooLarge))
        }
        _ => {
            let bytes = read()?;
            if bytes.len() as u64 > bounds.max_file_bytes {
                return Ok(Contents::Omitted(Omitted::TooLarge));
            }
            if bytes[..bytes.len().min(8000)].contains(&0) {
                return Ok(Contents::Omitted(Omitted::Binary));
            }
            Ok(Contents::Bytes(bytes))
        }
    }
}

/// Reads the file `path` beneath `root` as it is now (empty if it went
/// away since the scan), at most one byte past the bound.
fn read_now(root: &OwnedFd, path: &[u8], bounds: Bounds) -> io::Result<Vec<u8>> {
    let (parent, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    };
    let opened = (|| {
        let mut dir = open_dir(root, b".")?;
        for c in parent.split(|b| *b == b'/').filter(|c| !c.is_empty()) {
            dir = open_dir(&dir, c)?;
        }
        open_file(&dir, name)
    })();
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    file.take(bounds.max_file_bytes + 1).read_to_end(&mut out)?;
    Ok(out)
}

/// Lines of `text`, each with its `\n` (the last may lack one).
fn lines(text: &[u8]) -> Vec<&[u8]> {
    text.split_inclusive(|b| *b == b'\n').collect()
}

/// The patch of one change, in git's format.
fn file_patch(change: &Change, old: Option<&[u8]>, new: Option<&[u8]>, time: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let (a, b) = (git_path("a/", &change.path), git_path("b/", &change.path));
    let (before, after) = (change.before.as_ref(), change.after.as_ref());
    // A file that became a symlink (or back) is, to git, one deleted and
    // one added.
    if let (Some(bf), Some(af)) = (before, after)
        && (bf.mode == 0o120000) != (af.mode == 0o120000)
    {
        let mut gone = change.clone();
        gone.kind = Kind::Deleted;
        gone.after = None;
        let mut made = change.clone();
        made.kind = Kind::Added;
        made.before = None;
        out.extend(file_patch(&gone, old, None, time));
        out.extend(file_patch(&made, None, new, time));
        return out;
    }
    out.extend_from_slice(format!("diff --git {a} {b}\n").as_bytes());
    match (before, after) {
        (None, Some(af)) => {
            out.extend_from_slice(format!("new file mode {:o}\n", af.mode).as_bytes())
        }
        (Some(bf), None) => {
            out.extend_from_slice(format!("deleted file mode {:o}\n", bf.mode).as_bytes())
        }
        (Some(bf), Some(af)) if bf.mode != af.mode => out.extend_from_slice(
            format!("old mode {:o}\nnew mode {:o}\n", bf.mode, af.mode).as_bytes(),
        ),
        _ => {}
    }
    let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
    if old == new {
        return out;
    }
    let from = if before.is_some() {
        a
    } else {
        "/dev/null".into()
    };
    let to = if after.is_some() {
        b
    } else {
        "/dev/null".into()
    };
    // Git ends these lines with a tab when the name holds a space, so
    // that readers that stop at whitespace (GNU patch) read it whole.
    let tab = |name: &str| if name.contains(' ') { "\t" } else { "" };
    out.extend_from_slice(format!("--- {from}{}\n+++ {to}{}\n", tab(&from), tab(&to)).as_bytes());
    hunks(&mut out, old, new, time);
    out
}

/// Unified hunks (three lines of context) from `old` to `new`.
fn hunks(out: &mut Vec<u8>, old: &[u8], new: &[u8], time: Duration) {
    let (ol, nl) = (lines(old), lines(new));
    let ops = capture_diff_slices_deadline(Algorithm::Myers, &ol, &nl, Some(Instant::now() + time));
    for group in group_diff_ops(ops, 3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let o = first.old_range().start..last.old_range().end;
        let n = first.new_range().start..last.new_range().end;
        let start = |r: &std::ops::Range<usize>| if r.is_empty() { r.start } else { r.start + 1 };
        out.extend_from_slice(
            format!(
                "@@ -{},{} +{},{} @@\n",
                start(&o),
                o.len(),
                start(&n),
                n.len()
            )
            .as_bytes(),
        );
        for op in &group {
            let (tag, or, nr) = op.as_tag_tuple();
            let mut emit = |mark: u8, line: &[u8]| {
                out.push(mark);
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.extend_from_slice(b"\n\\ No newline at end of file\n");
                }
            };
            match tag {
                DiffTag::Equal => or.clone().for_each(|i| emit(b' ', ol[i])),
                DiffTag::Delete => or.clone().for_each(|i| emit(b'-', ol[i])),
                DiffTag::Insert => nr.clone().for_each(|i| emit(b'+', nl[i])),
                DiffTag::Replace => {
                    or.clone().for_each(|i| emit(b'-', ol[i]));
                    nr.clone().for_each(|i| emit(b'+', nl[i]));
                }
            }
        }
    }
}
