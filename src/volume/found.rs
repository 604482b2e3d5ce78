//! Finding a lent directory again after a restart the way the service saw
//! it while it ran, not through the path recorded when the session began.
//!
//! While the service runs, a lent directory is held by its fd: a command
//! of another session may rename it, or an ancestor, and swap something
//! else in at the old path, and the session goes on with its very
//! directory. At a restart the fd is gone, and the recorded path may now
//! name another directory, or none under an allowed root. The directory's
//! file handle, taken while the session ran and kept in its record, still
//! names it: opened again through the directory's own filesystem, it tells
//! where that directory lies now (a handle carries the inode's generation,
//! so a directory removed and its inode reused is not taken for it). A pin
//! an earlier version of the service left mounted is asked the same way.
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
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

/// The file handle of the directory `dir`, as kept in a session's record:
/// `<type>:<hex bytes>`. `None` where the filesystem gives none. Blocking
/// (one system call).
pub fn handle_of(dir: &impl AsFd) -> Option<String> {
    let handle = take(dir)?;
    let bytes = &handle.data[..handle.bytes as usize];
    Some(format!("{}:{}", handle.kind, hex::encode(bytes)))
}

/// The handle [`handle_of`] wrote, read back.
fn parse(text: &str) -> Option<Handle> {
    let (kind, bytes) = text.split_once(':')?;
    let bytes = hex::decode(bytes).ok()?;
    if bytes.len() > HANDLE_BYTES {
        return None;
    }
    let mut handle = Handle {
        bytes: bytes.len() as u32,
        kind: kind.parse().ok()?,
        data: [0; HANDLE_BYTES],
    };
    handle.data[..bytes.len()].copy_from_slice(&bytes);
    Some(handle)
}

fn take(dir: &impl AsFd) -> Option<Handle> {
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
            dir.as_fd().as_raw_fd(),
            empty.as_ptr(),
            (&raw mut handle).cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    (taken == 0).then_some(handle)
}

impl Volumes {
    /// Where the directory of `handle` (from [`handle_of`]) lies now, if it
    /// is still the directory whose (device, inode) is `identity` and it
    /// can be reached through one of `within` (directories on the same
    /// filesystem, such as the allowed roots); its path as the kernel names
    /// it then, under that directory. Blocking.
    pub fn found_path(
        &self,
        handle: &str,
        identity: (u64, u64),
        within: &[PathBuf],
    ) -> Option<PathBuf> {
        let mut handle = parse(handle)?;
        within
            .iter()
            .find_map(|root| reach(root, &mut handle, identity))
    }

    /// [`Volumes::found_path`] through the pin of session `id`, if one is
    /// still mounted (left by an earlier version of the service, which kept
    /// pins mounted across a stop). Blocking.
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
        let mut handle = take(&pin)?;
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
