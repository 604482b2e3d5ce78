//! What a restore would change: the steps from the workspace's picture to
//! a checkpoint's, and every file they touch (for the policy to judge
//! before anything is changed).

use std::collections::HashSet;

use super::{Restored, Staged, Step};
use crate::workspace::tree::{Manifest, Node};

/// The steps from `current` to `target`, the entries to stage (by index),
/// and the counts of removals, directories and mode changes.
pub(super) fn plan<'a>(
    current: &'a Manifest,
    target: &'a Manifest,
) -> (Vec<Step<'a>>, Vec<Staged<'a>>, Restored) {
    let mut steps = Vec::new();
    let mut staged = Vec::new();
    let mut stats = Restored::default();
    // Removals first, only the topmost of a removed tree.
    let mut removed: HashSet<&[u8]> = HashSet::new();
    for (path, node) in &current.entries {
        let path = path.as_slice();
        if ancestors(path).any(|a| removed.contains(a)) {
            continue;
        }
        let goes = match target.entries.get(path) {
            None => true,
            Some(want) => !same_kind(node, want),
        };
        if goes {
            removed.insert(path);
            steps.push(Step::Remove(path));
            stats.removed += 1;
        }
    }
    let mut dir_modes = Vec::new();
    for (path, want) in &target.entries {
        let path = path.as_slice();
        let have = current
            .entries
            .get(path)
            .filter(|_| !removed.contains(path) && !ancestors(path).any(|a| removed.contains(a)));
        match (want, have) {
            (Node::Dir { mode }, None) => {
                steps.push(Step::MakeDir(path));
                dir_modes.push((path, *mode));
                stats.dirs_made += 1;
            }
            (Node::Dir { mode }, Some(Node::Dir { mode: had })) if mode != had => {
                dir_modes.push((path, *mode));
                stats.modes += 1;
            }
            (Node::File { .. } | Node::Symlink { .. }, None) => {
                steps.push(Step::Place(path, staged.len()));
                staged.push((path, want));
            }
            (_, Some(have)) if !want.same_contents(have) => {
                steps.push(Step::Exchange(path, staged.len()));
                staged.push((path, want));
            }
            (Node::File { mode, .. }, Some(Node::File { mode: had, .. })) if mode != had => {
                steps.push(Step::Chmod(path, *mode));
                stats.modes += 1;
            }
            _ => {}
        }
    }
    // Directory modes last, deepest first: a directory made read-only
    // before its contents are placed would refuse them.
    dir_modes.sort_by(|a, b| b.0.cmp(a.0));
    steps.extend(dir_modes.into_iter().map(|(p, m)| Step::Chmod(p, m)));
    (steps, staged, stats)
}

/// Every path whose file, symlink or special entry a restore from
/// `current` to `target` would write, replace or remove. Directories
/// alone are left out: making one or setting its mode writes no file, and
/// removing one removes the entries under it, which are listed themselves.
pub fn touched<'a>(current: &'a Manifest, target: &'a Manifest) -> impl Iterator<Item = &'a [u8]> {
    let differs =
        |a: &Node, b: &Node| !(same_kind(a, b) && a.same_contents(b) && mode(a) == mode(b));
    let file = |n: &Node| !matches!(n, Node::Dir { .. });
    let gone_or_changed = current.entries.iter().filter(move |(path, have)| {
        match target.entries.get(path.as_slice()) {
            None => file(have),
            Some(want) => (file(have) || file(want)) && differs(have, want),
        }
    });
    let new = target
        .entries
        .iter()
        .filter(move |(path, want)| file(want) && !current.entries.contains_key(path.as_slice()));
    gone_or_changed.chain(new).map(|(path, _)| path.as_slice())
}

fn mode(n: &Node) -> Option<u32> {
    match n {
        Node::Dir { mode } | Node::File { mode, .. } => Some(*mode),
        Node::Symlink { .. } | Node::Special => None,
    }
}

fn same_kind(a: &Node, b: &Node) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b) && !matches!(a, Node::Special)
}

/// Proper ancestors of `path`, nearest last.
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(move |(i, _)| &path[..i])
}
