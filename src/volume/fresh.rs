//! A fresh workspace: its own ext4 filesystem in a sparse volume file when
//! the service may mount (its quota), else a plain directory; and the same
//! workspace mounted again for a session that comes back after a restart.

use std::io;
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::{Error, Inner, Kind, MIN_DISK_BYTES, MIN_INODES, Quota, Volume, Volumes, check_id};

/// What a session over a plain directory is told.
const NO_QUOTA: &str = "this service runs without root, so the workspace is a plain directory \
     with no disk quota: what commands write is bounded only by the free space of the \
     service's state directory";

impl Volumes {
    /// Makes a fresh, empty workspace `id` whose root is owned by `owner`:
    /// its own filesystem of `quota` when the service may mount, else a
    /// plain directory. Blocking.
    pub fn fresh(&self, id: &str, quota: Quota, owner: (u32, u32)) -> Result<Volume, Error> {
        check_id(id)?;
        // An inode table must fit in the filesystem: a small disk quota
        // holds at most one inode per 4 KiB (the default count is meant
        // for the default size).
        let quota = Quota {
            inodes: quota
                .inodes
                .min(quota.disk_bytes.max(MIN_DISK_BYTES) / 4096)
                .max(MIN_INODES),
            ..quota
        };
        let inner = &self.inner;
        let path = inner.workspaces.path.join(id);
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: if inner.can_mount {
                Kind::Filesystem
            } else {
                Kind::Directory
            },
            path,
            identity: (0, 0),
            quota: inner.can_mount.then_some(quota),
            note: (!inner.can_mount).then(|| NO_QUOTA.to_string()),
            source: None,
            slot: None,
        };
        let create = |e: io::Error| Error::Create(e.to_string());
        rustix::fs::mkdirat(&inner.workspaces.fd, id, Mode::from_raw_mode(0o700))
            .map_err(|e| create(e.into()))?;
        // From here on, dropping `volume` on an error path cleans up.
        if volume.kind == Kind::Filesystem {
            let made = make_filesystem(inner, id, quota, owner);
            if let Err(e) = made {
                volume.discard();
                return Err(e);
            }
        }
        let root = match volume.open_root() {
            Ok(root) => root,
            Err(e) => {
                volume.discard();
                return Err(Error::Create(e.to_string()));
            }
        };
        let prepared = (|| -> io::Result<(u64, u64)> {
            if volume.kind == Kind::Filesystem {
                // The filesystem's own lost+found is noise in a checkout.
                match rustix::fs::unlinkat(&root, "lost+found", AtFlags::REMOVEDIR) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if rustix::process::geteuid().is_root() {
                rustix::fs::fchown(
                    &root,
                    Some(rustix::fs::Uid::from_raw(owner.0)),
                    Some(rustix::fs::Gid::from_raw(owner.1)),
                )?;
            }
            // Nobody but its owner (and root) may pass through the root.
            rustix::fs::fchmod(&root, Mode::from_raw_mode(0o700))?;
            let st = rustix::fs::fstat(&root)?;
            Ok((st.st_dev, st.st_ino))
        })();
        match prepared {
            Ok(identity) => {
                volume.identity = identity;
                Ok(volume)
            }
            Err(e) => {
                volume.discard();
                Err(Error::Create(e.to_string()))
            }
        }
    }

    /// The fresh workspace `id` an earlier instance of this service made
    /// (one whose session comes back after a restart), as it left it: still
    /// mounted where the service was killed, or mounted again from its
    /// volume file where the host restarted. Blocking.
    pub fn reopen_fresh(&self, id: &str, quota: Quota) -> Result<Volume, Error> {
        check_id(id)?;
        let inner = &self.inner;
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: if inner.can_mount {
                Kind::Filesystem
            } else {
                Kind::Directory
            },
            path: inner.workspaces.path.join(id),
            identity: (0, 0),
            quota: None,
            note: (!inner.can_mount).then(|| NO_QUOTA.to_string()),
            source: None,
            slot: None,
        };
        let gone =
            |e: &dyn std::fmt::Display| Error::Gone(format!("{}: {e}", volume.path.display()));
        if volume.kind == Kind::Filesystem {
            if !volume.mount_again().map_err(|e| gone(&e))? {
                return Err(gone(&"its volume file is missing"));
            }
            // The filesystem was made to this quota and enforces it.
            volume.quota = Some(quota);
        }
        let st =
            rustix::fs::fstat(volume.open_root().map_err(|e| gone(&e))?).map_err(|e| gone(&e))?;
        volume.identity = (st.st_dev, st.st_ino);
        Ok(volume)
    }
}

impl Volume {
    /// Mounts a fresh workspace's volume file at its mount point again if
    /// it is not mounted there (the host restarted), as it was first
    /// mounted (ext4 replays its own journal). False when there is no
    /// volume file to mount. Blocking.
    pub(super) fn mount_again(&self) -> io::Result<bool> {
        let inner = &self.inner;
        let root = self.open_root()?;
        let parent = rustix::fs::fstat(&inner.workspaces.fd)?;
        if rustix::fs::fstat(&root)?.st_dev != parent.st_dev {
            return Ok(true);
        }
        drop(root);
        let image = inner.images.path.join(format!("{}.img", self.id));
        if !image.exists() {
            return Ok(false);
        }
        run_tool(
            std::process::Command::new("mount")
                .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard"])
                .arg(&image)
                .arg(&self.path),
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(true)
    }
}

/// Creates `volumes/<id>.img` (sparse, `quota.disk_bytes`) with an ext4
/// filesystem of `quota.inodes` inodes whose root `owner` owns, and mounts
/// it `nosuid,nodev` at `workspaces/<id>`.
fn make_filesystem(inner: &Inner, id: &str, quota: Quota, owner: (u32, u32)) -> Result<(), Error> {
    let create = |what: &str, e: &dyn std::fmt::Display| Error::Create(format!("{what}: {e}"));
    let image_name = format!("{id}.img");
    let image = rustix::fs::openat(
        &inner.images.fd,
        image_name.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| create("creating the volume file", &e))?;
    rustix::fs::ftruncate(&image, quota.disk_bytes.max(MIN_DISK_BYTES))
        .map_err(|e| create("sizing the volume file", &e))?;
    drop(image);
    // Paths below lie entirely in the service's private directory: no other
    // user can change what they resolve to.
    let image_path = inner.images.path.join(&image_name);
    let mount_point = inner.workspaces.path.join(id);
    run_tool(
        std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-N"])
            .arg(quota.inodes.max(MIN_INODES).to_string())
            .arg("-E")
            .arg(format!(
                "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner={}:{}",
                owner.0, owner.1
            ))
            .arg(&image_path),
    )?;
    run_tool(
        std::process::Command::new("mount")
            .args([
                "-t",
                "ext4",
                "-o",
                "loop,nosuid,nodev,noatime,discard,noinit_itable",
            ])
            .arg(&image_path)
            .arg(&mount_point),
    )
}

/// Runs a filesystem tool to completion; its stderr explains a failure.
fn run_tool(cmd: &mut std::process::Command) -> Result<(), Error> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            Error::Create(format!(
                "cannot run {program} (install e2fsprogs and util-linux): {e}"
            ))
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Create(format!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
