//! The hard-link check of a lent directory: a regular file linked from
//! outside the tree is the same file there, where others may reach it, so
//! such a tree is refused (and so is one holding a service's state).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::{Error, proc_fd_path};

/// Entries of a lent directory checked for outside links at most.
const MAX_CHECKED_ENTRIES: u64 = 2_000_000;

/// Refuses a tree holding a regular file with more links than the tree
/// itself holds. Walked through the directory's descriptor (a path swapped
/// meanwhile cannot redirect it), without following symbolic links.
pub(super) fn linked_outside(root: &OwnedFd) -> Result<(), Error> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    let base = proc_fd_path(root);
    let mut inside: HashMap<(u64, u64), (PathBuf, u64, u64)> = HashMap::new();
    let walk = ignore::WalkBuilder::new(&base)
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .build();
    for (n, entry) in walk.enumerate() {
        let unchecked = |path: &Path, why: String| Error::Unchecked {
            path: path.strip_prefix(&base).unwrap_or(path).to_path_buf(),
            why,
        };
        if n as u64 >= MAX_CHECKED_ENTRIES {
            return Err(unchecked(
                Path::new(""),
                format!("it holds more than {MAX_CHECKED_ENTRIES} entries"),
            ));
        }
        let entry = entry.map_err(|e| unchecked(Path::new(""), e.to_string()))?;
        if entry.depth() > 0 && entry.file_name() == crate::state::MARKER {
            let state = entry.path().parent().unwrap_or(entry.path());
            let inside = state.strip_prefix(&base).unwrap_or(state);
            return Err(Error::HoldsState {
                path: Path::new(".").join(inside),
            });
        }
        let meta = entry
            .metadata()
            .map_err(|e| unchecked(entry.path(), e.to_string()))?;
        if meta.is_file() && meta.nlink() > 1 {
            let seen = inside
                .entry((meta.dev(), meta.ino()))
                .or_insert_with(|| (entry.path().to_path_buf(), meta.nlink(), 0));
            seen.2 += 1;
        }
    }
    match inside.into_values().find(|(_, links, seen)| seen < links) {
        Some((path, links, _)) => Err(Error::LinkedOutside {
            path: path.strip_prefix(&base).unwrap_or(&path).to_path_buf(),
            links,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::path::Path;

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
}
