//! What no live session owns: removed, or moved to the quarantine when it
//! holds something someone may still want.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rustix::fs::AtFlags;

use super::{Kind, Volume, Volumes, unmount};
use crate::state::Dir;
use crate::workspace::remove::remove_tree_at;

impl Volumes {
    /// Removes every volume, pin and socket directory whose id is not in
    /// `live` (what an earlier instance of the service left behind).
    /// Containers that used them must be gone first. Blocking.
    pub fn sweep(&self, live: &[String]) -> usize {
        let mut removed = 0;
        let inner = &self.inner;
        let stale = |dir: &Dir| -> Vec<String> {
            let Ok((entries, _)) = crate::workspace::walk::list(&dir.fd, usize::MAX) else {
                return Vec::new();
            };
            entries
                .into_iter()
                .map(|e| e.name)
                .filter(|n| {
                    let id = n.strip_suffix(".img").unwrap_or(n);
                    !live.iter().any(|l| l == id)
                })
                .collect()
        };
        // Volumes whose session closed: removed, whatever they hold.
        let closed = crate::workspace::walk::list(&inner.closing.fd, usize::MAX)
            .map(|(entries, _)| entries.into_iter().map(|e| e.name).collect::<Vec<_>>())
            .unwrap_or_default();
        let fresh = if inner.can_mount {
            Kind::Filesystem
        } else {
            Kind::Directory
        };
        for (dir, kind) in [(&inner.workspaces, fresh), (&inner.pins, Kind::Pin)] {
            for id in stale(dir) {
                let volume = Volume {
                    inner: Arc::clone(inner),
                    path: dir.path.join(&id),
                    id,
                    kind,
                    identity: (0, 0),
                    quota: None,
                    note: None,
                    source: None,
                    slot: None,
                };
                // What someone may still want is moved aside, not deleted:
                // a volume the host no longer mounts is mounted to be seen.
                let holds_something = !closed.contains(&volume.id)
                    && match kind {
                        Kind::Filesystem => match inner.can_mount.then(|| volume.mount_again()) {
                            // A volume that cannot be looked into is kept.
                            Some(Err(_)) => true,
                            _ => !volume.is_empty(),
                        },
                        Kind::Directory => !volume.is_empty(),
                        Kind::Pin | Kind::Bound => false,
                    };
                if holds_something {
                    match volume.quarantine() {
                        Ok(to) => tracing::warn!(
                            volume = %volume.id,
                            to = %to.display(),
                            "a workspace no session owns was moved to the quarantine (empty it when it is not needed)"
                        ),
                        Err(e) => {
                            tracing::warn!(volume = %volume.id, error = %e, "cannot quarantine a workspace no session owns; it is left in place")
                        }
                    }
                    continue;
                }
                match volume.remove() {
                    Ok(()) => removed += 1,
                    Err(e) => {
                        tracing::warn!(volume = %volume.id, error = %e, "cannot remove a stale workspace")
                    }
                }
            }
        }
        // Marks whose volume is gone (removed above, or never made).
        for id in stale(&inner.closing) {
            let gone = |dir: &Dir| {
                rustix::fs::statat(&dir.fd, id.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_err()
            };
            if gone(&inner.workspaces) && gone(&inner.pins) {
                let _ = rustix::fs::unlinkat(&inner.closing.fd, id.as_str(), AtFlags::empty());
            }
        }
        for name in stale(&inner.images) {
            let _ = rustix::fs::unlinkat(&inner.images.fd, name.as_str(), AtFlags::empty());
        }
        for dir in [&inner.run, &inner.history] {
            for id in stale(dir) {
                let _ = remove_tree_at(&dir.fd, std::ffi::OsStr::new(&id));
            }
        }
        removed
    }
}

impl Volume {
    /// Whether the workspace holds nothing (or cannot be read at all).
    fn is_empty(&self) -> bool {
        match self.open_root() {
            Ok(root) => crate::workspace::walk::list(&root, 1)
                .map(|(entries, more)| entries.is_empty() && !more)
                .unwrap_or(false),
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Moves the workspace into the quarantine: its volume file (unmounted
    /// first), or the plain directory. Returns where it went. Blocking.
    fn quarantine(&self) -> io::Result<PathBuf> {
        let inner = &self.inner;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let container_free = match self.kind {
            Kind::Filesystem if self.inner.can_mount => {
                unmount(&self.path)?;
                let name = format!("{}-{stamp}.img", self.id);
                let from = format!("{}.img", self.id);
                match rustix::fs::renameat(
                    &inner.images.fd,
                    from.as_str(),
                    &inner.quarantine.fd,
                    name.as_str(),
                ) {
                    // The mount point holds the files of a workspace made
                    // while the service could not mount: move it instead.
                    Err(rustix::io::Errno::NOENT) => None,
                    Ok(()) => Some(name),
                    Err(e) => return Err(e.into()),
                }
            }
            _ => None,
        };
        let name = match container_free {
            Some(name) => {
                let _ = rustix::fs::unlinkat(
                    &inner.workspaces.fd,
                    self.id.as_str(),
                    AtFlags::REMOVEDIR,
                );
                name
            }
            None => {
                let name = format!("{}-{stamp}", self.id);
                rustix::fs::renameat(
                    &inner.workspaces.fd,
                    self.id.as_str(),
                    &inner.quarantine.fd,
                    name.as_str(),
                )?;
                name
            }
        };
        let _ = remove_tree_at(&inner.history.fd, std::ffi::OsStr::new(&self.id));
        Ok(inner.quarantine.path.join(name))
    }
}

#[cfg(test)]
mod tests {

    use super::super::Quota;
    use super::super::testing::volumes_in;

    /// A volume no session owns that holds something is quarantined; one
    /// whose session closed (marked so before the close answered) is
    /// removed whatever it holds, and its mark with it.
    #[test]
    fn a_closed_sessions_volume_is_removed_not_quarantined() {
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        let quota = Quota {
            disk_bytes: 32 << 20,
            inodes: 4096,
        };
        let (closed, orphan) = (
            volumes.fresh("closed1", quota, (1000, 1000)).unwrap(),
            volumes.fresh("orphan1", quota, (1000, 1000)).unwrap(),
        );
        for v in [&closed, &orphan] {
            std::fs::write(v.path().join("work"), "kept?\n").unwrap();
        }
        closed.mark_closed().unwrap();
        let dir = base.path().join("state");
        assert!(dir.join("closing/closed1").exists());
        // The service stopped before either was removed; the next start
        // sweeps.
        for v in [closed, orphan] {
            let _ = v.release();
        }
        assert_eq!(volumes.sweep(&[]), 1);
        assert!(!dir.join("workspaces/closed1").exists());
        assert!(!dir.join("closing/closed1").exists());
        let quarantined: Vec<String> = std::fs::read_dir(dir.join("quarantine"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(quarantined.len(), 1, "{quarantined:?}");
        assert!(quarantined[0].starts_with("orphan1"), "{quarantined:?}");
    }
}
