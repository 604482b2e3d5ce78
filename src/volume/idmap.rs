//! Id-mapped pins: a lent directory that root owns (a CI checkout) shown to
//! its commands, which run as an unprivileged user, as their own, without
//! an owner on disk ever changing.
//!
//! An id-mapped mount takes its mapping from a user namespace. An id
//! stored on disk is read as an id *inside* that namespace and shown as
//! the host id it maps to; an id a caller writes with goes the other way
//! (the kernel's `Documentation/filesystems/idmappings.rst`). So a
//! namespace whose `uid_map` is `0 1000 1` makes a file stored as uid 0
//! appear as uid 1000 through the mount, and a file uid 1000 creates there
//! is stored as uid 0. An id with no line in the map (a file of some third
//! owner) appears as the overflow id (65534): it cannot be chowned, and its
//! mode bits for "others" are all a command gets.
//!
//! The namespace comes from a short-lived child that unshares a user
//! namespace of its own; the service writes the child's maps, keeps a
//! descriptor of the namespace, and ends the child. The mount keeps the
//! namespace alive for as long as it exists.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// One user and one group: the id stored on disk, and the id it is shown
/// as through the mount (and written back as).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    /// User: (on disk, seen through the mount).
    pub uid: (u32, u32),
    /// Group: (on disk, seen through the mount).
    pub gid: (u32, u32),
}

/// Makes the detached mount `tree` (from `open_tree(OPEN_TREE_CLONE)`, not
/// yet attached) id-mapped by `map`. Fails, changing nothing, where the
/// kernel or the filesystem cannot (`ENOSYS` before Linux 5.12, `EINVAL`
/// on a filesystem without support, `EPERM` without `CAP_SYS_ADMIN`).
pub(super) fn apply(tree: &impl AsFd, map: IdMap) -> io::Result<()> {
    let userns = user_namespace(map)?;
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a plain system call on a live descriptor, an empty C string
    // and a struct the kernel only reads, whose size is passed with it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_fd().as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A user namespace whose only ids are `map`'s: its uid `map.uid.0` is the
/// host's `map.uid.1`, its gid `map.gid.0` the host's `map.gid.1`.
fn user_namespace(map: IdMap) -> io::Result<OwnedFd> {
    let mut cmd = Command::new("cat");
    // cat waits on a pipe only this function holds: it ends with it, even
    // if the service dies before reaping it.
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: runs in the child between fork and exec and makes one system
    // call. The child is single-threaded, so it may enter a user namespace
    // of its own (the service, multi-threaded, may not).
    unsafe {
        cmd.pre_exec(|| {
            rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWUSER)
                .map_err(io::Error::from)
        });
    }
    // spawn returns once the child has exec'd: the namespace exists.
    let mut child = cmd.spawn()?;
    let made = (|| {
        let proc = format!("/proc/{}", child.id());
        // Each map is written in one write(2), as the kernel requires. The
        // service holds CAP_SETUID and CAP_SETGID over the namespace's
        // parent, so no "deny" to setgroups is needed first.
        for (file, (inside, outside)) in [("uid_map", map.uid), ("gid_map", map.gid)] {
            let line = format!("{inside} {outside} 1\n");
            OpenOptions::new()
                .write(true)
                .open(format!("{proc}/{file}"))?
                .write_all(line.as_bytes())?;
        }
        Ok(OwnedFd::from(File::open(format!("{proc}/ns/user"))?))
    })();
    // Our own unreaped child: its pid cannot have been reused.
    let _ = child.kill();
    let _ = child.wait();
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use rustix::fs::{Mode, OFlags};
    use rustix::mount::{OpenTreeFlags, open_tree};

    const USER: (u32, u32) = (1000, 1000);

    fn detached_tree(dir: &Path) -> OwnedFd {
        let fd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        open_tree(
            &fd,
            "",
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_EMPTY_PATH,
        )
        .unwrap()
    }

    /// Runs `script` as `USER` (no groups, no capabilities) with its working
    /// directory the root of `tree`; returns its stdout.
    fn as_user_in(tree: &OwnedFd, script: &str) -> std::process::Output {
        let tree = tree.as_raw_fd();
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        // SAFETY: between fork and exec, only system calls.
        unsafe {
            cmd.pre_exec(move || {
                let tree = std::os::fd::BorrowedFd::borrow_raw(tree);
                rustix::process::fchdir(tree)?;
                rustix::thread::set_thread_groups(&[])?;
                let gid = rustix::fs::Gid::from_raw(USER.1);
                rustix::thread::set_thread_res_gid(gid, gid, gid)?;
                let uid = rustix::fs::Uid::from_raw(USER.0);
                rustix::thread::set_thread_res_uid(uid, uid, uid)?;
                Ok(())
            });
        }
        cmd.output().unwrap()
    }

    /// Both directions, checked against the disk: root's files appear as
    /// the user's through the mount and are writable to them; what the user
    /// creates is stored as root's; a third owner's file is not mapped.
    #[test]
    fn an_idmapped_tree_shows_roots_files_as_the_users_and_stores_theirs_as_roots() {
        assert!(
            rustix::process::geteuid().is_root(),
            "id-mapped mounts need root: run the tests as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(root.join("old.txt"), "old\n").unwrap();
        std::fs::set_permissions(root.join("old.txt"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        std::fs::write(root.join("third.txt"), "third\n").unwrap();
        std::os::unix::fs::chown(root.join("third.txt"), Some(4242), Some(4242)).unwrap();
        for path in [root, &root.join("old.txt")] {
            let md = std::fs::metadata(path).unwrap();
            assert_eq!((md.uid(), md.gid()), (0, 0));
        }

        // Without the map, the user can do nothing in root's 0700 directory.
        let plain = detached_tree(root);
        let out = as_user_in(&plain, "echo x > denied.txt");
        assert!(!out.status.success(), "{out:?}");
        assert!(!root.join("denied.txt").exists());

        let tree = detached_tree(root);
        apply(
            &tree,
            IdMap {
                uid: (0, USER.0),
                gid: (0, USER.1),
            },
        )
        .unwrap();
        let out = as_user_in(
            &tree,
            "stat -c '%u:%g %n' . old.txt third.txt && echo more >> old.txt && \
             mkdir -p .cache/x && echo new > .cache/x/f && stat -c '%u:%g %n' .cache/x/f && \
             if echo x >> third.txt; then echo wrote third; fi",
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        // Disk to caller: root's files are shown as the user's; a third
        // owner's as the overflow id.
        assert!(said.contains("1000:1000 .\n"), "{said}");
        assert!(said.contains("1000:1000 old.txt\n"), "{said}");
        assert!(said.contains("65534:65534 third.txt\n"), "{said}");
        assert!(said.contains("1000:1000 .cache/x/f\n"), "{said}");
        assert!(!said.contains("wrote third"), "{said}");
        // Caller to disk: what the user wrote is stored as root's.
        assert_eq!(
            std::fs::read_to_string(root.join("old.txt")).unwrap(),
            "old\nmore\n"
        );
        for made in [".cache", ".cache/x", ".cache/x/f"] {
            let md = std::fs::metadata(root.join(made)).unwrap();
            assert_eq!((md.uid(), md.gid()), (0, 0), "{made}");
        }
        assert_eq!(
            std::fs::read_to_string(root.join("third.txt")).unwrap(),
            "third\n"
        );
        let md = std::fs::metadata(root.join("third.txt")).unwrap();
        assert_eq!((md.uid(), md.gid()), (4242, 4242));
    }

    /// A filesystem without id-mapped mounts (procfs) refuses, and the
    /// tree is left as it was, usable for the plain pin.
    #[test]
    fn a_filesystem_without_idmapped_mounts_refuses_cleanly() {
        let tree = detached_tree(Path::new("/proc"));
        let err = apply(
            &tree,
            IdMap {
                uid: (0, USER.0),
                gid: (0, USER.1),
            },
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        rustix::fs::statat(&tree, "self", rustix::fs::AtFlags::empty()).unwrap();
    }
}
