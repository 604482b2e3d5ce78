//! Slots: where a directory is lent to a container that already runs.
//!
//! A warm container for a lent directory is started before anyone knows
//! which directory: it binds `pins/<id>`, an empty directory of the
//! service's own that is made a shared mount of itself, with slave
//! propagation. Lending it a directory later is an ordinary pin made on
//! top of the slot on the host's side: the kernel propagates that mount
//! (with its `nosuid,nodev` and its id-map) into the container's
//! `/workspace`, and nothing the container does propagates back. Removing
//! the pin, and the slot under it, is an unmount, which propagates too.
//!
//! Only the service's own host-side mounts reach the container this way,
//! and only at `pins/<id>`: containers of other slots bind other
//! directories, and containers started cold keep private mounts.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use rustix::fs::Mode;
use rustix::mount::{MountPropagationFlags, MoveMountFlags, OpenTreeFlags};

use super::{Error, Kind, Volume, Volumes, attrs, check_id};

impl Volumes {
    /// Whether directories can be lent to running containers here: the
    /// service mounts, and the kernel sets a mount's attributes before
    /// attaching it (`mount_setattr`, Linux 5.12+).
    pub fn lends_to_running(&self) -> bool {
        self.inner.can_mount && attrs::has_mount_setattr()
    }

    /// Makes the slot `pins/<id>`: an empty directory (mode 0700, the
    /// service's own), bind-mounted on itself `nosuid,nodev` and made
    /// shared, for a warm container to bind with slave propagation before
    /// it is lent a directory ([`Volumes::lend`]). Removed like a pin.
    /// Blocking.
    pub fn slot(&self, id: &str) -> Result<Volume, Error> {
        check_id(id)?;
        if !self.lends_to_running() {
            return Err(Error::Pin(std::io::Error::other(
                "directories cannot be lent to running containers here",
            )));
        }
        let pins = &self.inner.pins;
        rustix::fs::mkdirat(&pins.fd, id, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::Pin(e.into()))?;
        let volume = Volume {
            inner: Arc::clone(&self.inner),
            id: id.to_string(),
            kind: Kind::Pin,
            path: pins.path.join(id),
            identity: (0, 0),
            quota: None,
            note: None,
        };
        let made = (|| -> std::io::Result<(u64, u64)> {
            let tree = rustix::mount::open_tree(
                &pins.fd,
                id,
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
            )?;
            if !attrs::add_nosuid_nodev(&tree)? {
                return Err(std::io::Error::other("no mount_setattr"));
            }
            rustix::mount::move_mount(
                &tree,
                "",
                &pins.fd,
                id,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )?;
            rustix::mount::mount_change(&volume.path, MountPropagationFlags::SHARED)?;
            let st = rustix::fs::fstat(volume.open_root()?)?;
            Ok((st.st_dev, st.st_ino))
        })();
        match made {
            Ok(identity) => Ok(Volume { identity, ..volume }),
            Err(e) => {
                volume.discard();
                Err(Error::Pin(e))
            }
        }
    }

    /// Lends the directory whose fd the file tools hold to the container
    /// that binds `slot`: checked as [`Volumes::pin`] checks it, then
    /// pinned on top of the slot, which the kernel propagates into that
    /// container. The volume returned is the session's pin (the slot is
    /// removed with it). When the pin cannot be made the slot is removed
    /// too, and its container must be discarded. Blocking.
    pub fn lend(
        &self,
        slot: &Volume,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
    ) -> Result<Volume, Error> {
        let st = self.lendable(root, host)?;
        // Still the slot this container binds, and nothing on it yet.
        slot.check_identity().map_err(Error::Pin)?;
        self.attach(&slot.id, root, host, &st, root_user, no_idmap, true)
    }
}
