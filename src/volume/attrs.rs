//! Mount attributes a pin adds to what it pins, and never takes away.
//!
//! A pin is a clone of the lent directory's mount, and a clone keeps the
//! source's per-mount flags: a directory the host lends read-only (or
//! `noexec`) stays so through the pin. `nosuid,nodev` are added with
//! `mount_setattr` on the still detached tree, which sets the flags it is
//! given and clears only those it is told to clear (none). A remount would
//! instead set the mount's flags to exactly what it names, dropping `ro`.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Adds `nosuid` and `nodev` to the detached mount `tree` (from
/// `open_tree(OPEN_TREE_CLONE)`), keeping every flag it has, and makes it
/// private: a clone of a shared mount is otherwise a peer of its source,
/// so mounts made later under the source (an `sshfs` in the checkout)
/// would appear in it, and unmounting it would unmount them at the
/// source. `Ok(false)` where the kernel has no `mount_setattr` (before
/// Linux 5.12): see [`remount_flags`] and [`make_private`].
pub(super) fn add_nosuid_nodev(tree: &impl AsFd) -> io::Result<bool> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
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
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if e.raw_os_error() == Some(libc::ENOSYS) => Ok(false),
        e => Err(e),
    }
}

/// Makes the attached mount `tree` private (see [`add_nosuid_nodev`]), on
/// a kernel without `mount_setattr`. The fd names the mount itself: no
/// path is resolved.
pub(super) fn make_private(tree: &impl AsFd) -> io::Result<()> {
    rustix::mount::mount_change(
        format!("/proc/self/fd/{}", tree.as_fd().as_raw_fd()),
        rustix::mount::MountPropagationFlags::PRIVATE,
    )?;
    Ok(())
}

/// Whether this kernel has `mount_setattr` (Linux 5.12+).
pub(super) fn has_mount_setattr() -> bool {
    // SAFETY: a plain system call on no descriptor with no struct: it
    // fails at once, and how tells whether the call exists.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            std::ptr::null::<libc::mount_attr>(),
            0usize,
        )
    };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// The flags a remount of the mount `tree` must name to add `nosuid,nodev`
/// and keep the restricting flags it has (`ro`, `noexec`, and the atime
/// ones): for a kernel without `mount_setattr`.
pub(super) fn remount_flags(tree: &impl AsFd) -> io::Result<rustix::mount::MountFlags> {
    use rustix::fs::StatVfsMountFlags as Has;
    use rustix::mount::MountFlags as Set;
    let has = rustix::fs::fstatvfs(tree)?.f_flag;
    let mut flags = Set::BIND | Set::NOSUID | Set::NODEV;
    for (had, keep) in [
        (Has::RDONLY, Set::RDONLY),
        (Has::NOEXEC, Set::NOEXEC),
        (Has::NOATIME, Set::NOATIME),
        (Has::NODIRATIME, Set::NODIRATIME),
        (Has::RELATIME, Set::RELATIME),
    ] {
        if has.contains(had) {
            flags |= keep;
        }
    }
    Ok(flags)
}
