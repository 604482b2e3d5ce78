//! An early baseline: the starting point of a fresh workspace (empty, as
//! every one starts) is taken when the session opens, off the first
//! command's path. The first change adopts it only if the workspace is
//! still empty, which one directory read tells: anything put there before
//! (an upload, which does not begin the history so that it is part of
//! where the session began, or files written on the host through the
//! workspace's path) makes the first change take the baseline as ever.
//!
//! On the disk, the index says the baseline was taken early; the first
//! change that adopts it leaves a marker file beside it (one create, no
//! rewrite). A service that restarts reads an early baseline without the
//! marker as still early (an upload may still drop it), and one with the
//! marker as the session's starting point.

use std::sync::atomic::Ordering;

use super::persist::{BEGUN, persist};
use super::{Baseline, History};

impl History {
    /// Takes the baseline now, ahead of the first change: only for a
    /// workspace nothing but the service and the session's commands
    /// change. One that cannot be taken is left to the first change.
    pub async fn take_early(&self) {
        if self.begun.load(Ordering::Acquire) {
            return;
        }
        self.take_baseline(true).await;
    }

    /// The first change adopts the early baseline: `false` (and it is
    /// dropped) when the workspace is no longer empty; the change then
    /// takes one.
    pub(super) async fn adopt_early(&self) -> bool {
        let mut state = self.state.lock().await;
        if !self.early.load(Ordering::Acquire) {
            return false;
        }
        // Something may have written the workspace's files on the host
        // (through its path) since: an early baseline stands only for a
        // workspace still as empty as it was. One directory read, here.
        let unchanged = matches!(&state.baseline, Baseline::Taken(m) if m.entries.is_empty())
            && is_empty(self.workspace.root_fd());
        if !unchanged {
            state.baseline = Baseline::NotYet;
            state.baseline_memory = 0;
            state.early = false;
            self.early.store(false, Ordering::Release);
            return false;
        }
        // One empty file made, on the thread that runs the change: cheaper
        // than a hop to the blocking pool, and a restart must find it.
        let marked = rustix::fs::openat(
            state.store.dir(),
            BEGUN,
            rustix::fs::OFlags::CREATE
                | rustix::fs::OFlags::WRONLY
                | rustix::fs::OFlags::CLOEXEC
                | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::from_raw_mode(0o600),
        );
        if let Err(e) = marked {
            // Rare: the index is written again instead, no longer early.
            tracing::warn!(error = %e, "cannot mark the session's early starting point as adopted; writing the index again");
            state.early = false;
            persist(&state, None);
        }
        self.early.store(false, Ordering::Release);
        self.begun.store(true, Ordering::Release);
        crate::profile::mark("history: early starting point adopted");
        true
    }
}

/// Whether the directory `root` (an `O_PATH` fd is enough) holds nothing:
/// read until its first entry, whatever its name.
fn is_empty(root: &std::os::fd::OwnedFd) -> bool {
    let Ok(dir) = rustix::fs::openat(
        root,
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&dir) else {
        return false;
    };
    for entry in entries {
        match entry {
            Ok(e) if matches!(e.file_name().to_bytes(), b"." | b"..") => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::time::Duration;

    use super::super::{History, HistoryLimits};
    use crate::workspace::tree::changes::Bounds;
    use crate::workspace::{Limits, Workspace};

    /// A history of the (empty) workspace `ws` kept in `store`.
    fn history(ws: &Path, store: &Path) -> History {
        let ws = Workspace::open(ws, Default::default(), Limits::default()).unwrap();
        History::new(ws, dir(store), 1 << 30, HistoryLimits::default())
    }

    fn reopened(ws: &Path, store: &Path) -> History {
        let ws = Workspace::open(ws, Default::default(), Limits::default()).unwrap();
        History::reopen(ws, dir(store), 1 << 30, HistoryLimits::default()).unwrap()
    }

    fn dir(path: &Path) -> OwnedFd {
        std::fs::create_dir_all(path).unwrap();
        rustix::fs::open(
            path,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap()
    }

    /// The paths changed since the session began.
    async fn changed(h: &History) -> Vec<String> {
        let bounds = Bounds {
            max_changes: 100,
            max_patch_bytes: 1 << 20,
            max_file_bytes: 1 << 20,
            diff_time: Duration::from_secs(1),
        };
        let out = h.changes("", bounds).await.unwrap();
        out.changes
            .changes
            .iter()
            .map(|c| String::from_utf8_lossy(&c.path).into_owned())
            .collect()
    }

    /// A starting point taken early is the session's once its first change
    /// adopts it (what comes after is a change, also after a restart);
    /// anything put in the workspace before that (an upload, files written
    /// on the host through its path) makes the first change take it as
    /// ever, so it is where the session began, also across a restart.
    #[tokio::test]
    async fn an_early_starting_point_stands_only_for_an_untouched_workspace() {
        let base = tempfile::tempdir().unwrap();
        let (ws, store) = (base.path().join("ws"), base.path().join("store"));
        std::fs::create_dir(&ws).unwrap();

        // Adopted: the first change's own work is a change, after a
        // restart too.
        let h = history(&ws, &store);
        h.take_early().await;
        h.begin().await;
        assert!(store.join("begun").exists(), "the early one was adopted");
        std::fs::write(ws.join("made"), "by a command\n").unwrap();
        assert_eq!(changed(&h).await, ["made"]);
        let again = reopened(&ws, &store);
        again.begin().await;
        assert_eq!(changed(&again).await, ["made"]);
        std::fs::remove_dir_all(&store).unwrap();
        std::fs::remove_file(ws.join("made")).unwrap();

        // An upload first (the history's own path for one): where the
        // session began.
        let h = history(&ws, &store);
        h.take_early().await;
        std::fs::write(ws.join("uploaded"), "a repository\n").unwrap();
        h.begin().await;
        assert!(!store.join("begun").exists(), "taken again, not adopted");
        assert!(changed(&h).await.is_empty());
        std::fs::remove_dir_all(&store).unwrap();
        std::fs::remove_file(ws.join("uploaded")).unwrap();

        // Files written on the host, through the path: the same.
        let h = history(&ws, &store);
        h.take_early().await;
        std::fs::write(ws.join("copied"), "by the host\n").unwrap();
        assert!(
            changed(&h).await.is_empty(),
            "nothing changed before the start"
        );
        h.begin().await;
        assert!(changed(&h).await.is_empty());
        std::fs::write(ws.join("copied"), "then changed\n").unwrap();
        assert_eq!(changed(&h).await, ["copied"]);
        std::fs::remove_dir_all(&store).unwrap();
        std::fs::remove_file(ws.join("copied")).unwrap();

        // A name that is not UTF-8 counts like any other.
        let odd = ws.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        let h = history(&ws, &store);
        h.take_early().await;
        std::fs::write(&odd, "latin-1\n").unwrap();
        h.begin().await;
        assert!(!store.join("begun").exists(), "taken again, not adopted");
        assert!(changed(&h).await.is_empty());
        std::fs::remove_dir_all(&store).unwrap();
        std::fs::remove_file(&odd).unwrap();

        // A restart before any change: still early, so what is put there
        // after it is still where the session began.
        let h = history(&ws, &store);
        h.take_early().await;
        drop(h);
        let h = reopened(&ws, &store);
        std::fs::write(ws.join("uploaded"), "after the restart\n").unwrap();
        h.begin().await;
        assert!(changed(&h).await.is_empty());
    }
}
