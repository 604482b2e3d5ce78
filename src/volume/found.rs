//! Finding a lent directory again after a restart the way the service saw
//! it while it ran: through the pin an earlier instance left, not through
//! the path recorded when the session began.
//!
//! While the service runs, a lent directory is held by its fd and its pin:
//! a command of another session may rename it, or an ancestor, and swap
//! something else in at the old path, and the session goes on with its
//! very directory. At a restart the fd is gone, and the recorded path may
//! now name another directory, or none under an allowed root. The pin
//! (left mounted by a killed service, and kept by one that stopped with its
//! sessions) still holds the directory: its device and inode tell whether
//! it is the one recorded, and a file handle taken through it, opened again
//! through the directory's own filesystem, tells where that directory lies
//! now.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::{Volumes, check_id, proc_fd_path};

/// Room for a file handle: `struct file_handle` and `MAX_HANDLE_SZ` bytes.
const HANDLE_BYTES: usize = 128;

#[repr(C)]
struct Handle {
    bytes: u32,
    kind: i32,
    data: [u8; HANDLE_BYTES],
}

impl Volumes {
    /// Where the directory the pin of session `id` holds lies now, if that
    /// pin is still mounted and holds the directory whose (device, inode)
    /// is `identity`, and it can be reached through one of `within`
    /// (directories on the same filesystem, such as the allowed roots);
    /// its path as the kernel names it then, under that directory. Blocking.
    pub fn pinned_path(
        &self,
        id: &str,
        identity: (u64, u64),
        within: &[PathBuf],
    ) -> Option<PathBuf> {
        check_id(id).ok()?;
        let pin = rustix::fs::openat(
            &self.inner.pins.fd,
            id,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&pin).ok()?;
        if (st.st_dev, st.st_ino) != identity {
            return None;
        }
        let mut handle = Handle {
            bytes: HANDLE_BYTES as u32,
            kind: 0,
            data: [0; HANDLE_BYTES],
        };
        let mut mount_id = 0;
        let empty: &CStr = c"";
        // SAFETY: `handle` has room for `bytes` bytes after its header, as
        // the call requires; `empty` is a NUL-terminated string.
        let taken = unsafe {
            libc::name_to_handle_at(
                pin.as_raw_fd(),
                empty.as_ptr(),
                (&raw mut handle).cast(),
                &mut mount_id,
                libc::AT_EMPTY_PATH,
            )
        };
        if taken != 0 {
            return None;
        }
        within
            .iter()
            .find_map(|root| reach(root, &mut handle, identity))
    }
}

/// Opens the directory of `handle` through `root`'s filesystem and names
/// it, if that is the directory `identity` names and it lies under `root`.
fn reach(root: &Path, handle: &mut Handle, identity: (u64, u64)) -> Option<PathBuf> {
    // open_by_handle_at takes no O_PATH descriptor for the filesystem.
    let mount = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    if rustix::fs::fstat(&mount).ok()?.st_dev != identity.0 {
        return None;
    }
    // SAFETY: `handle` was filled by name_to_handle_at; the returned fd, if
    // any, is ours to own.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (handle as *mut Handle).cast(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor the call returned.
    let dir = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = rustix::fs::fstat(&dir).ok()?;
    if (st.st_dev, st.st_ino) != identity {
        return None;
    }
    let path = std::fs::read_link(proc_fd_path(&dir)).ok()?;
    (path.is_absolute() && path.starts_with(root)).then_some(path)
}
