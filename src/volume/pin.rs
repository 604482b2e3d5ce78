//! Pinning a directory lent to a session: a bind mount made from the
//! directory fd the file tools hold, `nosuid,nodev`, id-mapped where root
//! owns it, refused where other users of the host could reach it or a file
//! in it is linked from outside. A service that cannot mount has the
//! engine bind the directory by its path instead (`bound`).

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::attrs;
use super::hardlinks::linked_outside;
use super::idmap::{self, IdMap};
use super::{Error, Inner, Kind, Volume, Volumes, check_id, proc_fd_path, unmount};

impl Volumes {
    /// [`Volumes::pin`] for a session that comes back after a restart: a
    /// pin an earlier instance left for `id` is let go first, so the new one
    /// is made from the directory fd just opened and checked, never taken
    /// on trust. Blocking.
    pub fn repin(
        &self,
        id: &str,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
    ) -> Result<Volume, Error> {
        check_id(id)?;
        let pins = &self.inner.pins;
        unmount(&pins.path.join(id)).map_err(Error::Pin)?;
        match rustix::fs::unlinkat(&pins.fd, id, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(Error::Pin(e.into())),
        }
        self.pin(id, root, host, root_user, no_idmap)
    }

    /// Pins the existing directory whose fd (`O_PATH` is enough) the file
    /// tools hold, for session `id`: a bind mount of exactly that directory,
    /// `nosuid,nodev`, made from the fd (no path is resolved). Refuses a
    /// directory other users of the host could reach. Blocking.
    ///
    /// A service that cannot mount (it does not run as root) checks the
    /// same, then has the engine bind the directory by its path: see
    /// [`Volumes::bound`].
    ///
    /// When root owns the directory, its commands run as `root_user` (uid,
    /// gid): the pin is then id-mapped, on-disk uid 0 to that uid and the
    /// directory's group to that gid, so they can work in it as in their
    /// own. Where that cannot be done (an old kernel, a filesystem without
    /// support) or must not be (`no_idmap` says why: a runtime it does not
    /// work under), the pin is a plain one, as without the map, and
    /// [`Volume::note`] says what that means for the session.
    pub fn pin(
        &self,
        id: &str,
        root: &OwnedFd,
        host: &Path,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
    ) -> Result<Volume, Error> {
        check_id(id)?;
        let st = self.lendable(root, host)?;
        if !self.inner.can_mount {
            super::bound::held(host, st.st_uid)?;
            return Ok(self.bound(id, host, (st.st_dev, st.st_ino)));
        }
        rustix::fs::mkdirat(&self.inner.pins.fd, id, Mode::from_raw_mode(0o700))
            .map_err(|e| Error::Pin(e.into()))?;
        self.attach(id, root, host, &st, root_user, no_idmap, None)
    }

    /// What every lent directory must be, checked: reachable by no other
    /// user of the host, holding no service's state, and with no file in
    /// it linked from outside. Returns its stat. Blocking (the hard-link
    /// check walks the tree).
    pub(super) fn lendable(&self, root: &OwnedFd, host: &Path) -> Result<rustix::fs::Stat, Error> {
        let st = rustix::fs::fstat(root).map_err(|e| Error::Pin(e.into()))?;
        // A set-id file a command makes in the directory lands on the host
        // with the directory owner's ids (root's, when id-mapped): only a
        // directory no other user can reach may be lent.
        if !private(host, st.st_uid).map_err(Error::Pin)? {
            return Err(Error::NotPrivate {
                path: host.to_path_buf(),
            });
        }
        // A service's state (its token, sockets, other sessions) is never
        // lent, whichever service it belongs to.
        if let Some(state) = host
            .ancestors()
            .find(|dir| dir.join(crate::state::MARKER).symlink_metadata().is_ok())
        {
            return Err(Error::HoldsState {
                path: state.to_path_buf(),
            });
        }
        // Privacy covers the directory's own files only: a file hard-linked
        // from elsewhere (a local `git clone`, `cp -al`) is the same file
        // there, where others may reach it. The same walk finds state below.
        linked_outside(root)?;
        Ok(st)
    }

    /// Pins `root` (whose stat is `st`) at `pins/<id>`, a directory
    /// already there: `nosuid,nodev` added, id-mapped where root owns it.
    /// `shared_slot`: `pins/<id>` is a slot a running container already
    /// binds (see [`Volumes::slot`]), so the pin reaches it by propagation,
    /// which carries a mount's attributes as they are when it is attached:
    /// they must be set on the detached tree, never by a remount after.
    ///
    /// A cold pin is unmounted again once it is checked: it is mounted only
    /// while a container starts over it (see [`Volume::engine_mount`]). A
    /// pin on a slot stays until the container's supervisor has confirmed
    /// it ([`Volume::settle`]). On failure `pins/<id>` is removed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attach(
        &self,
        id: &str,
        root: &OwnedFd,
        host: &Path,
        st: &rustix::fs::Stat,
        root_user: (u32, u32),
        no_idmap: Option<&str>,
        slot: Option<OwnedFd>,
    ) -> Result<Volume, Error> {
        let wanted = (st.st_uid == 0 && root_user.0 != 0).then_some(IdMap {
            uid: (0, root_user.0),
            gid: (st.st_gid, root_user.1),
        });
        let inner = &self.inner;
        let mut volume = Volume {
            inner: Arc::clone(inner),
            id: id.to_string(),
            kind: Kind::Pin,
            path: inner.pins.path.join(id),
            identity: (st.st_dev, st.st_ino),
            quota: None,
            note: None,
            source: None,
            slot: None,
        };
        let shared_slot = slot.is_some();
        let pinned = (|| -> io::Result<Option<io::Error>> {
            let root = root.try_clone()?;
            let (idmap, refused) = match (wanted, no_idmap) {
                (Some(_), Some(why)) => (None, Some(io::Error::other(why))),
                (wanted, _) => (wanted, None),
            };
            let unmapped = mount_tree(inner, id, &root, idmap, shared_slot)?;
            volume.source = Some(Arc::new(Source {
                root,
                // A map that could not be made once is not tried again at
                // each start: the session was told what that means.
                idmap: idmap.filter(|_| unmapped.is_none()),
            }));
            Ok(refused.or(unmapped))
        })();
        let checked = pinned.and_then(|unmapped| volume.check_identity().map(|()| unmapped));
        let checked = match (checked, shared_slot) {
            (Ok(unmapped), false) => unmount(&volume.path).map(|()| unmapped),
            (checked, _) => checked,
        };
        volume.slot = slot;
        match checked {
            Ok(None) => {
                if let Some(map) = wanted {
                    tracing::info!(
                        volume = %id,
                        path = %host.display(),
                        uid = map.uid.1,
                        gid = map.gid.1,
                        "root's checkout id-mapped for its commands"
                    );
                }
                Ok(volume)
            }
            Ok(Some(e)) => {
                tracing::warn!(
                    volume = %id,
                    path = %host.display(),
                    error = %e,
                    "cannot id-map a root-owned checkout: its commands run as uid {} and cannot write root's files in it",
                    root_user.0
                );
                volume.note = Some(format!(
                    "{} is owned by root and could not be id-mapped for the sandbox ({e}), so commands run as uid {} and cannot write what root owns there; lend a checkout owned by the user commands should run as, or keep it on a filesystem with id-mapped mounts (Linux 5.12+; ext4, xfs, btrfs, tmpfs)",
                    host.display(),
                    root_user.0
                ));
                Ok(volume)
            }
            Err(e) => {
                volume.discard();
                Err(Error::Pin(e))
            }
        }
    }
}

/// What a lent directory's pin is made from, each time it is mounted: the
/// directory fd the file tools hold (never its path), and the id-map its
/// commands see it through.
#[derive(Debug)]
pub(super) struct Source {
    root: OwnedFd,
    idmap: Option<IdMap>,
}

/// Mounts a clone of `root` at `pins/<id>` (see [`Volumes::attach`]):
/// `nosuid,nodev` added, id-mapped by `idmap`. Returns why the map could
/// not be made, if it could not (the pin is then a plain one).
fn mount_tree(
    inner: &Inner,
    id: &str,
    root: &OwnedFd,
    idmap: Option<IdMap>,
    shared_slot: bool,
) -> io::Result<Option<io::Error>> {
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let tree = rustix::mount::open_tree(
        root,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )?;
    // Only a detached tree can be id-mapped; a failure leaves it as it
    // was, and the plain pin is still the right one to make.
    let unmapped = idmap.and_then(|map| idmap::apply(&tree, map).err());
    // Added to the source's own flags, never replacing them: a directory
    // lent read-only stays read-only through its pin.
    let added = attrs::add_nosuid_nodev(&tree)?;
    if !added && shared_slot {
        return Err(io::Error::other(
            "this kernel cannot set a mount's attributes before attaching it (Linux 5.12+)",
        ));
    }
    rustix::mount::move_mount(
        &tree,
        "",
        &inner.pins.fd,
        id,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?;
    if !added {
        attrs::make_private(&tree)?;
        // The tree fd names the new mount itself: no path is resolved.
        rustix::mount::mount_remount(proc_fd_path(&tree), attrs::remount_flags(&tree)?, "")?;
    }
    Ok(unmapped)
}

/// A lent directory's pin, mounted for each container start and unmounted
/// after (see [`crate::sandbox::WorkspaceMount`]).
#[derive(Debug)]
pub(super) struct PinMount {
    pub(super) inner: Arc<Inner>,
    pub(super) id: String,
    pub(super) identity: (u64, u64),
    pub(super) source: Arc<Source>,
}

impl crate::sandbox::WorkspaceMount for PinMount {
    fn mount(&self) -> io::Result<()> {
        let pins = &self.inner.pins;
        // Whatever an earlier start could not take away goes first: the
        // engine gets exactly one pin, made now from the fd.
        unmount(&pins.path.join(&self.id))?;
        match rustix::fs::mkdirat(&pins.fd, self.id.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let source = &self.source;
        mount_tree(&self.inner, &self.id, &source.root, source.idmap, false)?;
        let st = rustix::fs::fstat(rustix::fs::openat(
            &pins.fd,
            self.id.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?)?;
        if (st.st_dev, st.st_ino) != self.identity || st.st_nlink == 0 {
            self.unmount();
            return Err(io::Error::other(
                "the pin does not hold the session's directory",
            ));
        }
        Ok(())
    }

    fn unmount(&self) {
        if let Err(e) = unmount(&self.inner.pins.path.join(&self.id)) {
            tracing::warn!(volume = %self.id, error = %e, "cannot unmount a lent directory's pin after its container started; its removal or the next start does");
        }
    }
}

/// Whether nobody but `owner` (and root) can reach `path`, whatever its
/// commands do: some directory strictly above it belongs to root or
/// `owner` and grants its group and others no access. The directory itself
/// does not count: commands run as its owner (or, through an id-mapped
/// pin of root's directory, are its owner there) and could open it up.
fn private(path: &Path, owner: u32) -> io::Result<bool> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open("/", flags, Mode::empty())?;
    let closed = |fd: &OwnedFd| -> io::Result<bool> {
        let st = rustix::fs::fstat(fd)?;
        Ok((st.st_uid == 0 || st.st_uid == owner) && st.st_mode & 0o011 == 0)
    };
    let names: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some((_, above)) = names.split_last() else {
        return Ok(false);
    };
    if closed(&fd)? {
        return Ok(true);
    }
    for name in above {
        fd = rustix::fs::openat(&fd, *name, flags, Mode::empty())?;
        if closed(&fd)? {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Bound, as_root, mount, mount_options, mounts_at, volumes_in};
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Pins removed (unmounted) also when an assertion fails.
    struct Pins(Vec<Volume>);

    /// Mounts `pin` as for a container start; unmounted when dropped.
    struct Started(Arc<dyn crate::sandbox::WorkspaceMount>);

    impl Started {
        fn of(pin: &Volume) -> Started {
            assert!(
                mounts_at(pin.path()).is_empty(),
                "a pin stays mounted between container starts"
            );
            let mount = pin.engine_mount().expect("a pin is mounted for each start");
            mount.mount().unwrap();
            Started(mount)
        }
    }

    impl Drop for Started {
        fn drop(&mut self) {
            self.0.unmount();
        }
    }

    impl Drop for Pins {
        fn drop(&mut self) {
            for v in &self.0 {
                v.remove().unwrap();
            }
        }
    }

    /// Root's lent directory gets an id-mapped pin (root's files are the
    /// command user's through it), unless the caller says it must not, in
    /// which case the pin is plain and the volume's note says why; another
    /// owner's directory is never id-mapped.
    #[test]
    fn a_root_owned_lent_directory_is_pinned_id_mapped_unless_it_must_not_be() {
        as_root();
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        let lent = base.path().join("repo");
        std::fs::create_dir(&lent).unwrap();
        std::fs::write(lent.join("f"), "x\n").unwrap();
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let user = (1000, 1000);
        let mut pins = Pins(Vec::new());

        pins.0
            .push(volumes.pin("mapped", &fd, &lent, user, None).unwrap());
        let mapped = &pins.0[0];
        assert_eq!(mapped.note(), None);
        let started = Started::of(mapped);
        let options = mount_options(mapped.path());
        assert!(options.contains("idmapped"), "{options}");
        assert!(options.contains("nosuid") && options.contains("nodev"));
        let seen = std::fs::metadata(mapped.path().join("f")).unwrap();
        assert_eq!((seen.uid(), seen.gid()), user);
        drop(started);
        assert!(
            mounts_at(mapped.path()).is_empty(),
            "unmounted after the start"
        );

        let why = "the runtime cannot create files through one";
        pins.0
            .push(volumes.pin("plain", &fd, &lent, user, Some(why)).unwrap());
        let plain = &pins.0[1];
        let note = plain.note().unwrap();
        assert!(note.contains(why) && note.contains("uid 1000"), "{note}");
        let started = Started::of(plain);
        let options = mount_options(plain.path());
        assert!(!options.contains("idmapped"), "{options}");
        assert!(options.contains("nosuid") && options.contains("nodev"));
        assert_eq!(std::fs::metadata(plain.path().join("f")).unwrap().uid(), 0);
        drop(started);

        std::os::unix::fs::chown(&lent, Some(1000), Some(1000)).unwrap();
        pins.0
            .push(volumes.pin("owned", &fd, &lent, user, None).unwrap());
        let owned = &pins.0[2];
        assert_eq!(owned.note(), None);
        let _started = Started::of(owned);
        assert!(!mount_options(owned.path()).contains("idmapped"));
        assert_eq!(std::fs::metadata(owned.path().join("f")).unwrap().uid(), 0);
    }

    /// A directory the host lends read-only and `noexec` keeps both through
    /// its pin, which adds `nosuid,nodev` on top: nothing is writable or
    /// runnable through the pin that is not so at the source.
    #[test]
    fn a_read_only_noexec_lent_directory_stays_so_through_its_pin() {
        as_root();
        let base = tempfile::tempdir().unwrap();
        let (_state, volumes) = volumes_in(base.path());
        let source = base.path().join("source");
        std::fs::create_dir(&source).unwrap();
        std::fs::write(source.join("f"), "x\n").unwrap();
        let lent = base.path().join("repo");
        std::fs::create_dir(&lent).unwrap();
        mount(&["--bind", source.to_str().unwrap(), lent.to_str().unwrap()]);
        let _bound = Bound(lent.clone());
        mount(&["-o", "remount,bind,ro,noexec", lent.to_str().unwrap()]);
        let fd = rustix::fs::open(
            &lent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let mut pins = Pins(Vec::new());
        for (id, user) in [("plain", (0, 0)), ("mapped", (1000, 1000))] {
            pins.0
                .push(volumes.pin(id, &fd, &lent, user, None).unwrap());
            let pin = pins.0.last().unwrap();
            let _started = Started::of(pin);
            let options = mount_options(pin.path());
            let options: Vec<&str> = options.split(',').collect();
            for want in ["ro", "noexec", "nosuid", "nodev"] {
                assert!(options.contains(&want), "{id}: {options:?}");
            }
            let wrote = std::fs::write(pin.path().join("g"), "y");
            assert_eq!(
                wrote.unwrap_err().raw_os_error(),
                Some(libc::EROFS),
                "{id}: written through the pin"
            );
            assert_eq!(std::fs::read(pin.path().join("f")).unwrap(), b"x\n");
        }
        assert!(!source.join("g").exists());
    }
}
