//! Setting a mode without ever following a symlink: the one way restores,
//! uploads and patches change a mode.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags};

/// Sets the mode of the directory or regular file `name` of `dir`, never
/// through a symlink (chmod follows one, and a command may swap one in at
/// any moment): the entry is opened `O_PATH | O_NOFOLLOW`, checked to be a
/// directory or a regular file, and changed through that very fd. Returns
/// the mode it had.
pub fn chmod_nofollow(dir: &OwnedFd, name: &[u8], mode: u32) -> io::Result<u32> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::openat(
        dir,
        OsStr::from_bytes(name),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Directory | rustix::fs::FileType::RegularFile => {}
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a directory or a regular file (a symlink was swapped in?)",
            ));
        }
    }
    // fchmod refuses an O_PATH fd; its /proc link names the very inode
    // opened, which is no symlink.
    rustix::fs::chmod(
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
        Mode::from_raw_mode(mode),
    )?;
    Ok(st.st_mode & 0o7777)
}
