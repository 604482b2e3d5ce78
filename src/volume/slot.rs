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

/// A directory checked to be one that may be lent (see
/// [`Volumes::check_lendable`]).
#[derive(Debug)]
pub struct Lendable(rustix::fs::Stat);

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
            source: None,
            slot: None,
        };
        let made = (|| -> std::io::Result<((u64, u64), OwnedFd)> {
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
            // The slot's own mount, by an fd: a pin on top of it later
            // hides it from every path.
            let root = volume.open_root()?;
            let st = rustix::fs::fstat(&root)?;
            Ok(((st.st_dev, st.st_ino), root))
        })();
        match made {
            Ok((identity, root)) => Ok(Volume {
                identity,
                slot: Some(root),
                ..volume
            }),
            Err(e) => {
                volume.discard();
                Err(Error::Pin(e))
            }
        }
    }

    /// Checks the directory whose fd the file tools hold as
    /// [`Volumes::pin`] checks it, before any warm container is spent on
    /// it. Blocking (the hard-link check walks the tree).
    pub fn check_lendable(&self, root: &OwnedFd, host: &Path) -> Result<Lendable, Error> {
        self.lendable(root, host).map(Lendable)
    }

    /// Lends the directory `lendable` was checked for (`root`, at `host`)
    /// to the container that binds `slot`: pinned on top of the slot, which
    /// the kernel propagates into that container. The volume returned is
    /// the session's pin (the slot is removed with it); once the container
    /// has confirmed it, [`Volume::settle`] takes both off the host. When the pin
    /// cannot be made the slot is removed too, and its container must be
    /// discarded. Blocking.
    pub fn lend(
        &self,
        slot: &Volume,
        lendable: &Lendable,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
    ) -> Result<Volume, Error> {
        // Still the slot this container binds, and nothing on it yet.
        slot.check_identity().map_err(Error::Pin)?;
        let mount = slot
            .slot
            .as_ref()
            .ok_or_else(|| Error::Pin(std::io::Error::other("not a slot")))?
            .try_clone()
            .map_err(Error::Pin)?;
        self.attach(
            &slot.id,
            root,
            host,
            &lendable.0,
            root_user,
            None,
            Some(mount),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Bound, as_root, mount, mounts_at, volumes_in};
    use super::*;
    use rustix::fs::OFlags;

    /// Checks `lent` and lends it on `slot`, its commands as uid 1000.
    fn lend(volumes: &Volumes, slot: &Volume, fd: &OwnedFd, lent: &Path) -> Result<Volume, Error> {
        let checked = volumes.check_lendable(fd, lent)?;
        volumes.lend(slot, &checked, fd, lent, (1000, 1000))
    }

    /// A slot is a shared `nosuid,nodev` mount of an empty directory; a
    /// directory lent on it reaches a bind made earlier with slave
    /// propagation (a warm container's view), id-mapped and `nosuid,nodev`
    /// there too. Once settled, nothing of it is mounted on the host any
    /// more, while the view keeps it; later starts mount the pin only for
    /// their time. A lend that is not
    /// settled (the container refused it) is removed from the view with the
    /// pin. A restart's repin of a lent slot unmounts both layers before it
    /// pins anew.
    #[test]
    fn a_directory_lent_on_a_slot_reaches_its_earlier_bind_and_leaves_the_host() {
        as_root();
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        assert!(
            volumes.lends_to_running(),
            "this kernel lends to running containers"
        );
        let lent = base.path().join("repo");
        std::fs::create_dir(&lent).unwrap();
        std::fs::write(lent.join("f"), "x\n").unwrap();
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        // A warm container's view of `slot`.
        let view_of = |slot: &Volume, name: &str| {
            let view = Bound(base.path().join(name));
            std::fs::create_dir(&view.0).unwrap();
            let (from, to) = (slot.path().to_str().unwrap(), view.0.to_str().unwrap());
            mount(&["--bind", from, to]);
            mount(&["--make-rslave", to]);
            view
        };

        let slot = volumes.slot("warm").unwrap();
        let at = mounts_at(slot.path());
        assert_eq!(at.len(), 1, "{at:?}");
        assert!(at[0].contains(" shared:"), "{at:?}");
        assert!(
            at[0].contains("nosuid") && at[0].contains("nodev"),
            "{at:?}"
        );
        let view = view_of(&slot, "view");
        assert!(std::fs::read_dir(&view.0).unwrap().next().is_none());

        let mut pin = lend(&volumes, &slot, &fd, &lent).unwrap();
        assert_eq!(pin.path(), slot.path());
        assert_eq!(mounts_at(slot.path()).len(), 2);
        assert_eq!(std::fs::read(view.0.join("f")).unwrap(), b"x\n");
        let seen = mounts_at(&view.0);
        let top = seen.last().unwrap();
        for want in ["nosuid", "nodev", "idmapped"] {
            assert!(top.contains(want), "{want}: {seen:?}");
        }
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(view.0.join("f")).unwrap()),
            1000
        );

        pin.settle().unwrap();
        assert!(
            mounts_at(pin.path()).is_empty(),
            "the host still mounts the lent directory"
        );
        assert!(std::fs::read_dir(pin.path()).unwrap().next().is_none());
        assert_eq!(std::fs::read(view.0.join("f")).unwrap(), b"x\n");
        let mount = pin.engine_mount().unwrap();
        mount.mount().unwrap();
        assert_eq!(mounts_at(pin.path()).len(), 1, "one pin for a start");
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(pin.path().join("f")).unwrap()),
            1000,
            "a later start's pin is id-mapped as the first"
        );
        mount.unmount();
        assert!(mounts_at(pin.path()).is_empty());
        assert_eq!(std::fs::read(view.0.join("f")).unwrap(), b"x\n");

        // The container goes before its pin is removed (the removal of
        // the slot's directory would detach what is mounted on it).
        drop(view);
        pin.remove().unwrap();
        assert!(!pin.path().exists());
        assert_eq!(std::fs::read(lent.join("f")).unwrap(), b"x\n");

        let slot = volumes.slot("refused").unwrap();
        let view = view_of(&slot, "view2");
        let pin = lend(&volumes, &slot, &fd, &lent).unwrap();
        assert!(view.0.join("f").exists());
        pin.remove().unwrap();
        assert!(mounts_at(slot.path()).is_empty());
        assert!(
            !view.0.join("f").exists(),
            "an unsettled lend stays in the view without the host's pin"
        );
        drop(view);

        let slot = volumes.slot("again").unwrap();
        lend(&volumes, &slot, &fd, &lent).unwrap();
        let pin = volumes
            .repin("again", &fd, &lent, (1000, 1000), None)
            .unwrap();
        assert!(mounts_at(pin.path()).is_empty(), "nothing left mounted");
        let mount = pin.engine_mount().unwrap();
        mount.mount().unwrap();
        assert_eq!(std::fs::read(pin.path().join("f")).unwrap(), b"x\n");
        mount.unmount();
        pin.remove().unwrap();
        assert!(mounts_at(pin.path()).is_empty());
    }

    /// A directory on a shared mount (every mount of a systemd host is)
    /// is pinned, cold or on a slot, as a private mount: a mount the host
    /// makes later under the directory reaches neither the pin nor a
    /// container's view of it, and removing the pin leaves the host's
    /// mount where it is.
    #[test]
    fn a_pin_of_a_shared_mount_takes_no_later_host_mounts_and_leaves_them_be() {
        as_root();
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        let shared = Bound(base.path().join("shared"));
        std::fs::create_dir(&shared.0).unwrap();
        mount(&["-t", "tmpfs", "tmpfs", shared.0.to_str().unwrap()]);
        mount(&["--make-shared", shared.0.to_str().unwrap()]);
        let lent = shared.0.join("w");
        std::fs::create_dir_all(lent.join("sub")).unwrap();
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let cold = volumes.pin("cold", &fd, &lent, (1000, 1000), None).unwrap();
        // As during its container's start.
        let cold_start = cold.engine_mount().unwrap();
        cold_start.mount().unwrap();
        let slot = volumes.slot("warm").unwrap();
        let view = Bound(base.path().join("view"));
        std::fs::create_dir(&view.0).unwrap();
        mount(&[
            "--bind",
            slot.path().to_str().unwrap(),
            view.0.to_str().unwrap(),
        ]);
        mount(&["--make-rslave", view.0.to_str().unwrap()]);
        let warm = lend(&volumes, &slot, &fd, &lent).unwrap();
        // Peer groups, by the mountinfo's optional fields.
        let groups = |line: &str| -> Vec<String> {
            line.split(" - ")
                .next()
                .unwrap()
                .split(' ')
                .skip(6)
                .map(str::to_string)
                .collect()
        };
        let source = groups(&mounts_at(&shared.0)[0]);
        assert!(
            source.iter().any(|g| g.starts_with("shared:")),
            "{source:?}"
        );
        for pin in [&cold, &warm] {
            let at = mounts_at(pin.path());
            let theirs = groups(at.last().unwrap());
            assert!(
                !theirs.iter().any(|g| source.contains(g)),
                "a pin is in its source's peer group: {at:?} {source:?}"
            );
        }

        let secret = base.path().join("secret");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("s"), "the host's\n").unwrap();
        let host_mount = Bound(lent.join("sub"));
        mount(&[
            "--bind",
            secret.to_str().unwrap(),
            host_mount.0.to_str().unwrap(),
        ]);
        for seen in [cold.path(), warm.path(), view.0.as_path()] {
            assert!(
                !seen.join("sub/s").exists(),
                "{} shows a mount the host made after the pin",
                seen.display()
            );
        }
        cold_start.unmount();
        cold.remove().unwrap();
        warm.remove().unwrap();
        assert_eq!(
            std::fs::read(host_mount.0.join("s")).unwrap(),
            b"the host's\n",
            "removing the pins left the host's own mount alone"
        );
        drop(host_mount);
        drop(view);
    }

    /// A slot whose identity changed (something else mounted or swapped
    /// there) is not lent anything.
    #[test]
    fn a_slot_that_is_no_longer_itself_is_not_lent() {
        as_root();
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        let lent = base.path().join("repo");
        std::fs::create_dir(&lent).unwrap();
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let slot = volumes.slot("swapped").unwrap();
        let other = base.path().join("other");
        std::fs::create_dir(&other).unwrap();
        mount(&[
            "--bind",
            other.to_str().unwrap(),
            slot.path().to_str().unwrap(),
        ]);
        let refused = lend(&volumes, &slot, &fd, &lent);
        assert!(matches!(refused, Err(Error::Pin(_))), "{refused:?}");
        assert_eq!(mounts_at(slot.path()).len(), 2, "nothing added");
        slot.remove().unwrap();
        assert!(mounts_at(slot.path()).is_empty());
    }
}
