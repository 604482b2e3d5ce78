//! Atomic file replacement: write a temp file in the same directory, fsync
//! it, then rename it over the target. Readers see the old bytes or the new
//! bytes, never a torn file; a crash leaves at most a stray temp file.
//!
//! A file these tools write never carries set-user-ID or set-group-ID bits:
//! a replaced file keeps its owner and its other mode bits, but loses those
//! two (the caller chose the bytes; a command that wants them back runs
//! chmod itself). The temp file starts readable by its owner only, gets its
//! final owner first and its final mode last, so at no moment is it a
//! set-id file, nor a file others can read that the old one did not allow.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, RenameFlags, Stat, Uid};

/// How the target is treated.
pub enum Target<'a> {
    /// Replace an existing file, keeping its mode and owner.
    Replace(&'a Stat),
    /// Create a new file owned by `owner` (if given); fail with
    /// `AlreadyExists` if the name is taken.
    CreateNew(Option<(u32, u32)>),
}

/// Atomically writes `bytes` as `name` inside the directory `dir`.
pub fn write_atomic(dir: &OwnedFd, name: &str, bytes: &[u8], target: Target<'_>) -> io::Result<()> {
    // A replacement gets its mode once its owner is final; until then only
    // its owner (us) may read what may be a private file's new bytes.
    let mode = match target {
        Target::Replace(_) => 0o600,
        Target::CreateNew(_) => 0o644,
    };
    let (tmp_name, file) = create_temp(dir, name, mode)?;
    let result = fill(file, bytes, &target).and_then(|()| match target {
        Target::Replace(_) => {
            rustix::fs::renameat(dir, tmp_name.as_str(), dir, name).map_err(io::Error::from)
        }
        Target::CreateNew(_) => rename_noreplace(dir, &tmp_name, name),
    });
    if result.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp_name.as_str(), AtFlags::empty());
    }
    result
}

/// Creates a fresh, exclusive temp file next to `name`, with `mode`.
fn create_temp(dir: &OwnedFd, name: &str, mode: u32) -> io::Result<(String, File)> {
    let mut tries = 0;
    loop {
        // Keep the temp name short of NAME_MAX whatever the target's length.
        let stem: String = name.chars().take(32).collect();
        let tmp = format!(".{stem}.{:016x}.sandboxd-tmp", rand_u64());
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(dir, tmp.as_str(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => return Ok((tmp, File::from(fd))),
            Err(rustix::io::Errno::EXIST) if tries < 8 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Set-user-ID and set-group-ID: never given to a file the tools write.
const SET_ID_BITS: u32 = 0o6000;

fn fill(mut file: File, bytes: &[u8], target: &Target<'_>) -> io::Result<()> {
    file.write_all(bytes)?;
    match target {
        Target::CreateNew(Some((uid, gid))) => {
            rustix::fs::fchown(&file, Some(Uid::from_raw(*uid)), Some(Gid::from_raw(*gid)))?;
        }
        Target::CreateNew(None) => {}
        Target::Replace(old) => {
            // Owner before mode: chown may clear mode bits, and until the
            // owner is final no bit beyond the temp file's 0600 is set.
            let (uid, gid) = (old.st_uid, old.st_gid);
            let st = rustix::fs::fstat(&file)?;
            if st.st_uid != uid || st.st_gid != gid {
                let owner = Some(Uid::from_raw(uid));
                let group = Some(Gid::from_raw(gid));
                match rustix::fs::fchown(&file, owner, group) {
                    Ok(()) => {}
                    // An unprivileged service cannot give files away; the new
                    // file keeps our owner, which still has the old permissions.
                    Err(rustix::io::Errno::PERM) => {
                        tracing::debug!("cannot keep owner {uid}:{gid} of replaced file")
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let mode = old.st_mode & 0o7777 & !SET_ID_BITS;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
        }
    }
    file.sync_all()
}

fn rename_noreplace(dir: &OwnedFd, tmp: &str, name: &str) -> io::Result<()> {
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // Filesystems without RENAME_NOREPLACE: link(2) also refuses an
        // existing name atomically.
        Err(rustix::io::Errno::INVAL) => {
            rustix::fs::linkat(dir, tmp, dir, name, AtFlags::empty())?;
            rustix::fs::unlinkat(dir, tmp, AtFlags::empty())?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

fn rand_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn dir_fd(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    #[test]
    fn replace_keeps_mode_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run.sh");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).unwrap();
        let dir = dir_fd(tmp.path());
        let st = rustix::fs::stat(&path).unwrap();
        write_atomic(&dir, "run.sh", b"new", Target::Replace(&st)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o751);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn create_new_refuses_existing_and_cleans_up() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), "keep").unwrap();
        let dir = dir_fd(tmp.path());
        let err = write_atomic(&dir, "a", b"x", Target::CreateNew(None)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        write_atomic(&dir, "b", b"fresh", Target::CreateNew(None)).unwrap();
        assert_eq!(std::fs::read(tmp.path().join("b")).unwrap(), b"fresh");
    }

    #[test]
    fn replace_strips_set_id_bits_and_keeps_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tool");
        std::fs::write(&path, "old").unwrap();
        // As root, give the file away first, as a command's file would be.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755)).unwrap();
        let before = std::fs::metadata(&path).unwrap();
        assert_eq!(before.mode() & 0o7777, 0o6755);
        let dir = dir_fd(tmp.path());
        let st = rustix::fs::stat(&path).unwrap();
        write_atomic(&dir, "tool", b"#!/bin/sh\n", Target::Replace(&st)).unwrap();
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(after.mode() & 0o7777, 0o755);
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        assert_eq!(std::fs::read(&path).unwrap(), b"#!/bin/sh\n");
    }

    #[test]
    fn replace_keeps_a_private_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("secret");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dir = dir_fd(tmp.path());
        let st = rustix::fs::stat(&path).unwrap();
        write_atomic(&dir, "secret", b"new", Target::Replace(&st)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
    }
}
