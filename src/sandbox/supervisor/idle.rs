//! What keeps a session's container alive: its main process, which only
//! waits to be killed. The supervisor binary can do it (`sandboxd idle`),
//! but every copy of a static position-independent binary relocates its
//! own data at start, about 0.7 MiB of private memory per process, and one
//! such process lives in every open session. Where it can, the service
//! writes a program of a few instructions for it instead, which holds a
//! page or two: `pause()` in a loop. It is mounted read-only into each
//! container and runs there as the container's own process (as root, with
//! nothing to read, no file open and no system call but `pause`); a signal
//! that ends processes ends it, which is how a container is stopped.

use std::path::{Path, PathBuf};

/// Where the program is mounted in every container.
pub const MOUNT_PATH: &str = "/.sandboxd/idle";

/// The program's name in the state directory's `bin`.
const FILE: &str = "idle";

/// Writes the program to `<state>/bin/idle` (read-only, executable) and
/// returns its path, or `None` where it cannot run: another processor
/// architecture, or a state directory on a filesystem mounted `noexec`.
/// The containers then keep `sandboxd idle`. Blocking.
pub fn install(state: &Path) -> Option<PathBuf> {
    let program = program()?;
    let dir = state.join("bin");
    let written = (|| -> std::io::Result<PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let path = dir.join(FILE);
        if std::fs::read(&path).is_ok_and(|on_disk| on_disk == program) {
            return Ok(path);
        }
        // Written aside, then renamed over: a container starting meanwhile
        // never mounts a half-written program.
        let staged = dir.join(format!(".{FILE}.{}", std::process::id()));
        let _ = std::fs::remove_file(&staged);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o555)
            .open(&staged)?;
        file.write_all(&program)?;
        file.sync_all()?;
        std::fs::rename(&staged, &path)?;
        Ok(path)
    })();
    let path = match written {
        Ok(path) => path,
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "cannot write the idle program; containers keep `sandboxd idle`");
            return None;
        }
    };
    match rustix::fs::statvfs(&path) {
        Ok(fs) if !fs.f_flag.contains(rustix::fs::StatVfsMountFlags::NOEXEC) => Some(path),
        _ => None,
    }
}

/// The program: an ELF executable of one loadable segment, its code
/// `pause()` in a loop. `None` on architectures it is not written for.
fn program() -> Option<Vec<u8>> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    // mov eax, 34 (pause); syscall; jmp back to the mov.
    const CODE: [u8; 9] = [0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7];
    const BASE: u64 = 0x40_0000;
    const EHDR: u16 = 64;
    const PHDR: u16 = 56;
    const PHNUM: u16 = 2;
    let code_at = u64::from(EHDR + PHNUM * PHDR);
    let size = code_at + CODE.len() as u64;
    let mut elf = Vec::with_capacity(size as usize);
    // The file header: 64-bit, little-endian, current version, System V.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // an executable
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes()); // version
    elf.extend_from_slice(&(BASE + code_at).to_le_bytes()); // entry point
    elf.extend_from_slice(&u64::from(EHDR).to_le_bytes()); // program headers at
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes()); // flags
    elf.extend_from_slice(&EHDR.to_le_bytes());
    elf.extend_from_slice(&PHDR.to_le_bytes());
    elf.extend_from_slice(&PHNUM.to_le_bytes());
    elf.extend_from_slice(&[0; 6]); // section header size, count, names
    // The whole file, loaded read-only and executable at BASE.
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // read, execute
    elf.extend_from_slice(&0u64.to_le_bytes()); // from offset 0
    elf.extend_from_slice(&BASE.to_le_bytes()); // virtual address
    elf.extend_from_slice(&BASE.to_le_bytes()); // physical address
    elf.extend_from_slice(&size.to_le_bytes()); // in the file
    elf.extend_from_slice(&size.to_le_bytes()); // in memory
    elf.extend_from_slice(&0x1000u64.to_le_bytes()); // page aligned
    // Its stack is not executable.
    elf.extend_from_slice(&0x6474_e551u32.to_le_bytes()); // PT_GNU_STACK
    elf.extend_from_slice(&6u32.to_le_bytes()); // read, write
    elf.extend_from_slice(&[0; 48]);
    elf.extend_from_slice(&CODE);
    debug_assert_eq!(elf.len() as u64, size);
    Some(elf)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    use super::*;

    /// The program runs, waits without using the processor, and a
    /// terminating signal ends it; installing twice keeps one file.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_idle_program_waits_until_a_signal_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = install(dir.path()).expect("written on x86-64");
        assert_eq!(install(dir.path()), Some(path.clone()));
        let names: Vec<_> = std::fs::read_dir(dir.path().join("bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE]);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o555);
        let mut child = std::process::Command::new(&path).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(child.try_wait().unwrap().is_none(), "it stopped by itself");
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        assert_eq!(fields[0], "S", "it is not asleep: {stat}");
        let (utime, stime): (u64, u64) = (fields[11].parse().unwrap(), fields[12].parse().unwrap());
        assert!(utime + stime <= 1, "it used the processor: {stat}");
        // A handled signal would wake it; a terminating one ends it.
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }
}
