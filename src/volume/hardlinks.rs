//! The hard-link check of a lent directory: a regular file linked from
//! outside the tree is the same file there, where others may reach it, so
//! such a tree is refused (and so is one holding a service's state).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::Error;

/// Entries of a lent directory checked for outside links at most.
const MAX_CHECKED_ENTRIES: u64 = 2_000_000;

/// One directory on the way down.
struct Level {
    /// Device and inode: how the way back up is checked.
    id: (u64, u64),
    /// Its name in its parent (empty for the root).
    name: CString,
    /// Subdirectories left to enter.
    pending: Vec<CString>,
}

/// Each file linked more than once: where it was first seen, its link
/// count, and how many of its links are in the tree.
type Linked = HashMap<(u64, u64), (PathBuf, u64, u64)>;

/// Refuses a tree holding a regular file with more links than the tree
/// itself holds. Walked by descriptor, one component at a time (`openat`,
/// never a path, so a tree of any depth is walked and a path swapped
/// meanwhile cannot redirect it), without following symbolic links, with an
/// explicit stack and two descriptors open at most: the way back up is the
/// `..` of the directory just finished, checked to be the directory it was
/// entered from (a tree moved under the walk is refused as unchecked).
pub(super) fn linked_outside(root: &OwnedFd) -> Result<(), Error> {
    let io = |path: PathBuf| move |e: rustix::io::Errno| unchecked(path, e.to_string());
    let mut current =
        rustix::fs::openat(root, ".", DIR, Mode::empty()).map_err(io(PathBuf::new()))?;
    let st = rustix::fs::fstat(&current).map_err(io(PathBuf::new()))?;
    let mut inside = Linked::new();
    let mut entries: u64 = 1;
    let mut stack = vec![Level {
        id: (st.st_dev, st.st_ino),
        name: CString::default(),
        pending: Vec::new(),
    }];
    let mut fresh = true;
    loop {
        let here: PathBuf = stack
            .iter()
            .skip(1)
            .map(|l| OsStr::from_bytes(l.name.as_bytes()))
            .collect();
        let depth = stack.len();
        let Some(level) = stack.last_mut() else {
            break;
        };
        if fresh {
            level.pending = scan(&current, &here, &mut entries, &mut inside)?;
        }
        if let Some(name) = level.pending.pop() {
            let path = here.join(OsStr::from_bytes(name.as_bytes()));
            match rustix::fs::openat(&current, &name, DIR, Mode::empty()) {
                Ok(fd) => {
                    let st = rustix::fs::fstat(&fd).map_err(io(path))?;
                    stack.push(Level {
                        id: (st.st_dev, st.st_ino),
                        name,
                        pending: Vec::new(),
                    });
                    current = fd;
                    fresh = true;
                }
                // Removed meanwhile: nothing in it to check.
                Err(rustix::io::Errno::NOENT) => fresh = false,
                Err(e) => return Err(unchecked(path, e.to_string())),
            }
            continue;
        }
        // This directory is done: back up to the one it was entered from,
        // or the walk is over.
        if depth == 1 {
            break;
        }
        stack.pop();
        let up_path = here.parent().map(Path::to_path_buf).unwrap_or_default();
        let up =
            rustix::fs::openat(&current, "..", DIR, Mode::empty()).map_err(io(up_path.clone()))?;
        let st = rustix::fs::fstat(&up).map_err(io(up_path.clone()))?;
        if stack.last().map(|l| l.id) != Some((st.st_dev, st.st_ino)) {
            return Err(unchecked(
                up_path,
                "the tree was moved while it was checked".into(),
            ));
        }
        current = up;
        fresh = false;
    }
    match inside.into_values().find(|(_, links, seen)| seen < links) {
        Some((path, links, _)) => Err(Error::LinkedOutside { path, links }),
        None => Ok(()),
    }
}

/// How every directory of the walk is opened.
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

fn unchecked(path: PathBuf, why: String) -> Error {
    Error::Unchecked { path, why }
}

/// Reads the directory `dir` (at `here` in the tree): counts its entries
/// against the bound, notes its files linked more than once, refuses a
/// service's state marker, and returns its subdirectories.
fn scan(
    dir: &OwnedFd,
    here: &Path,
    entries: &mut u64,
    inside: &mut Linked,
) -> Result<Vec<CString>, Error> {
    let io = |e: rustix::io::Errno| unchecked(here.to_path_buf(), e.to_string());
    let mut subdirs = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        *entries += 1;
        if *entries > MAX_CHECKED_ENTRIES {
            return Err(unchecked(
                PathBuf::new(),
                format!("it holds more than {MAX_CHECKED_ENTRIES} entries"),
            ));
        }
        if name.to_bytes() == crate::state::MARKER.as_bytes() {
            return Err(Error::HoldsState {
                path: Path::new(".").join(here),
            });
        }
        let path = || here.join(OsStr::from_bytes(name.to_bytes()));
        let kind = match entry.file_type() {
            FileType::Unknown | FileType::RegularFile => {
                match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => {
                        let kind = FileType::from_raw_mode(st.st_mode);
                        if kind == FileType::RegularFile && st.st_nlink > 1 {
                            let seen = inside
                                .entry((st.st_dev, st.st_ino))
                                .or_insert_with(|| (path(), st.st_nlink, 0));
                            seen.2 += 1;
                        }
                        kind
                    }
                    // Removed meanwhile: it links nothing.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(unchecked(path(), e.to_string())),
                }
            }
            other => other,
        };
        if kind == FileType::Directory {
            subdirs.push(name.to_owned());
        }
    }
    Ok(subdirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_with_a_file_linked_from_outside_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let tree = top.path().join("tree");
        std::fs::create_dir_all(tree.join("deep/er")).unwrap();
        std::fs::write(tree.join("deep/er/a"), "a").unwrap();
        // Links inside the tree only: fine.
        std::fs::hard_link(tree.join("deep/er/a"), tree.join("a-again")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", tree.join("link")).unwrap();
        let open = || {
            rustix::fs::open(
                &tree,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        linked_outside(&open()).unwrap();
        // One more link, outside: refused, naming the file.
        std::fs::hard_link(tree.join("deep/er/a"), top.path().join("outside")).unwrap();
        match linked_outside(&open()) {
            Err(Error::LinkedOutside { path, links: 3 }) => {
                assert!(
                    path == Path::new("a-again") || path == Path::new("deep/er/a"),
                    "{path:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(top.path().join("outside")).unwrap();
        linked_outside(&open()).unwrap();
    }

    /// Makes `depth` nested directories `d` under `top` (by descriptor: the
    /// path is longer than a path may be) and returns the deepest, open.
    fn deep(top: &Path, depth: usize) -> OwnedFd {
        let mut fd =
            rustix::fs::open(top, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o700)).unwrap();
            fd = rustix::fs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                .unwrap();
        }
        fd
    }

    /// A tree deeper than any path can name (3,000 levels) is checked all
    /// the way down: clean, it passes; a file at the bottom linked from
    /// outside, or a state marker there, is found; non-UTF-8 names too.
    #[test]
    fn a_tree_deeper_than_a_path_is_checked_to_its_bottom_by_descriptor() {
        let top = tempfile::tempdir().unwrap();
        let tree = top.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        let bottom = deep(&tree, 3000);
        let name = std::ffi::OsStr::from_bytes(b"f\xff\nname");
        let file = rustix::fs::openat(
            &bottom,
            name,
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        drop(file);
        let open = || {
            rustix::fs::open(
                &tree,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        linked_outside(&open()).unwrap();
        // A second link inside the tree, at the top: still fine.
        rustix::fs::linkat(&bottom, name, open_dir(&tree), "inside", AtFlags::empty()).unwrap();
        linked_outside(&open()).unwrap();
        // A third, outside: refused, naming the deep file or its top link.
        rustix::fs::linkat(
            &bottom,
            name,
            open_dir(top.path()),
            "outside",
            AtFlags::empty(),
        )
        .unwrap();
        match linked_outside(&open()) {
            Err(Error::LinkedOutside { path, links: 3 }) => {
                let deep_path = std::iter::repeat_n("d", 3000)
                    .collect::<PathBuf>()
                    .join(name);
                assert!(
                    path == Path::new("inside") || path == deep_path,
                    "{}",
                    path.display()
                )
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(top.path().join("outside")).unwrap();
        linked_outside(&open()).unwrap();
        // A service's state at the bottom is found.
        drop(
            rustix::fs::openat(
                &bottom,
                crate::state::MARKER,
                OFlags::CREATE | OFlags::WRONLY,
                Mode::from_raw_mode(0o600),
            )
            .unwrap(),
        );
        match linked_outside(&open()) {
            Err(Error::HoldsState { path }) => assert_eq!(path.components().count(), 3001),
            other => panic!("{other:?}"),
        }
        crate::workspace::remove::remove_tree(&tree).unwrap();
    }

    fn open_dir(path: &Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }
}
