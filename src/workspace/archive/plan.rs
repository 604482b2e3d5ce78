//! Where the staged entries of an upload land: every path checked against
//! the workspace (no entry below a symlink or a file of it, no file over a
//! directory or the reverse) and the policy, looked up one component at a
//! time through kept directory fds, and turned into the steps that
//! [`crate::workspace::tree::restore::land`] takes.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType};

use super::{Error, Staged, Unsafe, ancestors, stage_err};
use crate::workspace::tree::open_dir;
use crate::workspace::tree::restore::Step;

/// A step of the landing plan, owning its path.
pub(super) enum PlannedStep {
    MakeDir(Vec<u8>),
    Place(Vec<u8>, usize),
    Exchange(Vec<u8>, usize),
    Chmod(Vec<u8>, u32),
}

impl PlannedStep {
    pub(super) fn as_step(&self) -> Step<'_> {
        match self {
            PlannedStep::MakeDir(p) => Step::MakeDir(p),
            PlannedStep::Place(p, n) => Step::Place(p, *n),
            PlannedStep::Exchange(p, n) => Step::Exchange(p, *n),
            PlannedStep::Chmod(p, m) => Step::Chmod(p, *m),
        }
    }
}

/// What is at a workspace path now, never following a symlink.
#[derive(Clone, Copy, PartialEq, Eq)]
enum There {
    Nothing,
    Dir,
    Symlink,
    Other,
}

/// Looks at workspace paths one component at a time, never following a
/// symlink, keeping the directories of the last path open: entries come in
/// path order, so most lookups open nothing.
struct Looker {
    base: OwnedFd,
    /// Open directories below `base`, by name, outermost first.
    chain: Vec<(String, OwnedFd)>,
}

impl Looker {
    fn new(root: &OwnedFd) -> Result<Looker, Error> {
        Ok(Looker {
            base: open_dir(root, b".").map_err(|e| stage_err("", e))?,
            chain: Vec::new(),
        })
    }

    /// What is at `path`. An ancestor that is a symlink or not a directory
    /// is refused (`entry` would be written through or below it).
    fn there(&mut self, path: &str, entry: &str) -> Result<There, Error> {
        let parts: Vec<&str> = path.split('/').collect();
        let (last, dirs) = parts.split_last().expect("split yields one part");
        let keep = self
            .chain
            .iter()
            .zip(dirs)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.chain.truncate(keep);
        for (i, name) in dirs.iter().enumerate().skip(keep) {
            let dir = self.chain.last().map_or(&self.base, |(_, fd)| fd);
            let at = || parts[..=i].join("/");
            match Self::kind(dir, name, path)? {
                There::Nothing => return Ok(There::Nothing),
                There::Dir => {}
                There::Symlink => {
                    return Err(Error::Unsafe {
                        entry: entry.to_string(),
                        why: Unsafe::ThroughSymlink(at()),
                    });
                }
                There::Other => {
                    return Err(Error::Unsafe {
                        entry: entry.to_string(),
                        why: Unsafe::BelowFile(at()),
                    });
                }
            }
            let fd = open_dir(dir, name.as_bytes()).map_err(|e| stage_err(path, e))?;
            self.chain.push((name.to_string(), fd));
        }
        let dir = self.chain.last().map_or(&self.base, |(_, fd)| fd);
        Self::kind(dir, last, path)
    }

    fn kind(dir: &OwnedFd, name: &str, path: &str) -> Result<There, Error> {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => There::Dir,
                FileType::Symlink => There::Symlink,
                _ => There::Other,
            }),
            Err(rustix::io::Errno::NOENT) => Ok(There::Nothing),
            Err(e) => Err(stage_err(path, e.into())),
        }
    }
}

/// The steps that land the staged entries under `dest`, checked against
/// the workspace and the policy first.
pub(super) fn plan(
    root: &OwnedFd,
    dest: &str,
    entries: &HashMap<String, Staged>,
    order: &[String],
    allow: &dyn Fn(&str) -> Result<(), crate::policy::Denial>,
) -> Result<Vec<PlannedStep>, Error> {
    let at = |p: &str| {
        if dest.is_empty() {
            p.to_string()
        } else {
            format!("{dest}/{p}")
        }
    };
    let mut steps = Vec::new();
    let mut made: HashSet<String> = HashSet::new();
    let mut modes = Vec::new();
    let mut looker = Looker::new(root)?;
    // The destination and every directory an entry needs, made if missing.
    let mut ensure_dir = |looker: &mut Looker,
                          path: &str,
                          entry: &str,
                          steps: &mut Vec<PlannedStep>| {
        if path.is_empty() || made.contains(path) {
            return Ok(false);
        }
        let kind = looker.there(path, entry)?;
        let new = match kind {
            There::Dir => false,
            There::Nothing => {
                steps.push(PlannedStep::MakeDir(path.as_bytes().to_vec()));
                true
            }
            // Something below it is to be written: through the symlink.
            There::Symlink if path != entry => {
                return Err(Error::Unsafe {
                    entry: entry.to_string(),
                    why: Unsafe::ThroughSymlink(path.to_string()),
                });
            }
            _ => {
                return Err(Error::Conflict {
                    path: path.to_string(),
                    why: "a directory of the archive would replace a file or symlink of the workspace",
                });
            }
        };
        made.insert(path.to_string());
        Ok(new)
    };
    let mut sorted: Vec<&String> = order.iter().collect();
    sorted.sort();
    for p in [dest]
        .into_iter()
        .flat_map(|d| ancestors(d).chain((!d.is_empty()).then_some(d)))
    {
        // Anything written there is written through it.
        if ensure_dir(&mut looker, p, &format!("{dest}/"), &mut steps)? {
            modes.push((p.to_string(), 0o755));
        }
    }
    for rel in sorted {
        let path = at(rel);
        for a in ancestors(rel) {
            let full = at(a);
            if ensure_dir(&mut looker, &full, &path, &mut steps)? && !entries.contains_key(a) {
                modes.push((full, 0o755));
            }
        }
        match &entries[rel] {
            Staged::Dir { mode } => {
                if ensure_dir(&mut looker, &path, &path, &mut steps)? {
                    modes.push((path, *mode));
                }
            }
            Staged::Entry { n, .. } => {
                allow(&path).map_err(Error::Denied)?;
                match looker.there(&path, &path)? {
                    There::Nothing => steps.push(PlannedStep::Place(path.into_bytes(), *n)),
                    There::Dir => {
                        return Err(Error::Conflict {
                            path,
                            why: "a file of the archive would replace a directory of the workspace",
                        });
                    }
                    There::Symlink | There::Other => {
                        steps.push(PlannedStep::Exchange(path.into_bytes(), *n))
                    }
                }
            }
        }
    }
    // Modes of new directories last, deepest first.
    modes.sort_by(|a, b| b.0.cmp(&a.0));
    steps.extend(
        modes
            .into_iter()
            .map(|(p, m)| PlannedStep::Chmod(p.into_bytes(), m)),
    );
    Ok(steps)
}
