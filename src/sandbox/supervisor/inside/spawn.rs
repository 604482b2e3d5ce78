//! Starting a command's shell as cheaply as the kernel allows: one
//! `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn` does, instead of the
//! `fork` a `pre_exec` hook forces on `std` (copying the supervisor's page
//! tables, then tearing them down again at `exec`, cost 0.6 ms a command
//! here). `posix_spawn` itself cannot switch user; this does the same
//! steps the hook did, in the same order, between clone and exec.
//!
//! The child shares the supervisor's memory until it execs, and the
//! calling thread is suspended until then: the child only makes system
//! calls on data prepared before the clone, never allocates, never takes
//! a lock, and runs with every signal blocked until its handlers are back
//! to their defaults. Its end is learned from a pidfd (or, where the
//! kernel has none, from the supervisor's SIGCHLD and a wait that never blocks).

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::process::{Pid, PidfdFlags, WaitIdOptions, WaitIdStatus};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// The stack the child runs on until it execs: a few frames of system
/// calls.
const CHILD_STACK: usize = 64 * 1024;

/// A command's shell, started.
pub(super) struct Child {
    pid: Pid,
    end: End,
    status: Option<ExitStatus>,
    /// Its stdout, read end.
    pub stdout: Option<pipe::Receiver>,
    /// Its stderr, read end.
    pub stderr: Option<pipe::Receiver>,
    /// When the clone was made and when it returned (monotonic ns):
    /// profile data.
    pub cloned: (u64, u64),
}

/// How its end is learned.
enum End {
    PidFd(AsyncFd<OwnedFd>),
    /// Where the kernel has no pidfd (gVisor): woken by every SIGCHLD the
    /// supervisor gets, it asks for this child's end without waiting (a
    /// thread waiting on it cost a thread's start a command there).
    Signal(tokio::signal::unix::Signal),
}

/// What the child does between clone and exec, all prepared before.
struct Plan {
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    user: Option<(u32, u32)>,
    /// stdin, stdout and stderr of the child, in that order.
    stdio: [libc::c_int; 3],
    /// Signals whose handlers the child puts back to their defaults.
    reset: &'static [libc::c_int],
    /// Where the child failed: (step << 16) | errno; 0 when it exec'd.
    failed: AtomicI32,
}

/// Steps the child can fail at.
const STEP_GROUP: i32 = 1;
const STEP_STDIO: i32 = 2;
const STEP_USER: i32 = 3;
const STEP_CWD: i32 = 4;
const STEP_EXEC: i32 = 5;

impl Child {
    /// Starts `/bin/sh -c command` in its own process group, stdin from
    /// /dev/null, stdout and stderr to new pipes: as the OOM killer's first
    /// choice, then as `user` (no groups), then in `cwd`, with `env` over
    /// the supervisor's own environment.
    pub(super) fn spawn(
        command: &str,
        cwd: &str,
        env: &[String],
        user: Option<(u32, u32)>,
    ) -> io::Result<Child> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
        let cwd =
            CString::new(cwd).map_err(|_| invalid("the working directory contains a NUL byte"))?;
        let args = [
            c"/bin/sh".to_owned(),
            c"-c".to_owned(),
            CString::new(command).map_err(|_| invalid("the command contains a NUL byte"))?,
        ];
        let mut vars: std::collections::BTreeMap<OsString, OsString> =
            std::env::vars_os().collect();
        for kv in env {
            if let Some((k, v)) = kv.split_once('=') {
                vars.insert(k.into(), v.into());
            }
        }
        let vars = vars
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend(v.into_vec());
                CString::new(kv).map_err(|_| invalid("an environment variable contains a NUL byte"))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let null = dev_null()?;
        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let terminated = |v: &[CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let plan = Plan {
            argv: terminated(&args),
            envp: terminated(&vars),
            cwd,
            user,
            stdio: [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
            reset: signals_to_reset(),
            failed: AtomicI32::new(0),
        };
        let cloning = crate::profile::now_ns();
        let pid = clone_exec(&plan)?;
        let cloned = (cloning, crate::profile::now_ns());
        // The child has exec'd or failed: its ends of the pipes are its own.
        drop((out_w, err_w));
        let failed = plan.failed.load(Ordering::Acquire);
        if failed != 0 {
            // It exited at once; reap it.
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            let errno = io::Error::from_raw_os_error(failed & 0xffff);
            return Err(match failed >> 16 {
                STEP_CWD | STEP_EXEC => errno,
                STEP_USER => io::Error::new(errno.kind(), format!("switching user: {errno}")),
                _ => io::Error::new(errno.kind(), format!("setting up its process: {errno}")),
            });
        }
        static NO_PIDFD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let pidfd = match NO_PIDFD.load(Ordering::Relaxed) {
            true => Err(rustix::io::Errno::NOSYS),
            false => rustix::process::pidfd_open(pid, PidfdFlags::empty()),
        };
        if matches!(pidfd, Err(rustix::io::Errno::NOSYS)) {
            NO_PIDFD.store(true, Ordering::Relaxed);
        }
        let end = match pidfd {
            // SAFETY: the pidfd is owned here and neither replaced nor
            // closed while registered.
            Ok(fd) => End::PidFd(unsafe { AsyncFd::register(fd)? }),
            // Made before anything can wait: a SIGCHLD from here on wakes it.
            Err(_) => End::Signal(tokio::signal::unix::signal(
                tokio::signal::unix::SignalKind::child(),
            )?),
        };
        Ok(Child {
            pid,
            end,
            status: None,
            stdout: Some(receiver(out_r)?),
            stderr: Some(receiver(err_r)?),
            cloned,
        })
    }

    /// Its process id (and process group id).
    pub(super) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// Its exit status, if it has exited (reaped now).
    pub(super) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        self.status = match &self.end {
            End::PidFd(fd) => rustix::process::waitid(
                rustix::process::WaitId::PidFd(std::os::fd::AsFd::as_fd(fd.get_ref())),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            )?
            .map(|s| status_of(&s)),
            End::Signal(_) => rustix::process::waitid(
                rustix::process::WaitId::Pid(self.pid),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            )?
            .map(|s| status_of(&s)),
        };
        Ok(self.status)
    }

    /// Waits for it to exit.
    pub(super) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(s);
            }
            match &mut self.end {
                End::PidFd(fd) => {
                    // Readable once it has exited; a wakeup without an exit
                    // is cleared and waited out again.
                    let mut ready = fd.readable().await?;
                    if self.status.is_none() {
                        ready.clear_ready();
                    }
                }
                End::Signal(sigchld) => {
                    sigchld
                        .recv()
                        .await
                        .ok_or_else(|| io::Error::other("the signal driver stopped"))?;
                }
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Not reaped yet (it survived the kill ladder): reaped whenever it
        // ends, so it never stays a zombie.
        if self.status.is_none() && matches!(self.try_wait(), Ok(None)) {
            let pid = self.pid;
            std::thread::spawn(move || {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            });
        }
    }
}

/// `/dev/null`, read-only, opened once for every command's stdin.
fn dev_null() -> io::Result<std::os::fd::BorrowedFd<'static>> {
    static NULL: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(std::os::fd::AsFd::as_fd(fd));
    }
    let fd = rustix::fs::open(
        c"/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok(std::os::fd::AsFd::as_fd(NULL.get_or_init(|| fd)))
}

/// The status a wait status means to `std`.
fn status_of(s: &WaitIdStatus) -> ExitStatus {
    let raw = if let Some(code) = s.exit_status() {
        (code & 0xff) << 8
    } else {
        let sig = s.terminating_signal().unwrap_or(0);
        if s.dumped() { sig | 0x80 } else { sig }
    };
    ExitStatus::from_raw(raw)
}

/// The read end of a pipe, non-blocking, for the runtime.
fn receiver(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    pipe::Receiver::from_owned_fd_unchecked(fd)
}

/// Clones a child that shares this process's memory and runs [`child`]
/// on its own stack; returns once it has exec'd or exited.
fn clone_exec(plan: &Plan) -> io::Result<Pid> {
    let mut stack = vec![0u8; CHILD_STACK];
    // SAFETY: the stack is ours and outlives the child's use of it (the
    // calling thread is suspended until the child execs or exits); the
    // plan is borrowed for as long; every signal is blocked around the
    // clone so no handler runs on the child's stack, and restored after.
    unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK);
        let top = top.sub(top as usize % 16);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(plan).cast_mut().cast(),
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        drop(stack);
        if pid < 0 {
            return Err(err);
        }
        Pid::from_raw(pid).ok_or_else(|| io::Error::other("clone returned no process id"))
    }
}

/// The child, from clone to exec. Only system calls, on the plan.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan `clone_exec` lent, alive until we exec or
    // exit; everything below is a system call on memory prepared before
    // the clone, as between vfork and exec.
    unsafe {
        let plan = &*(arg as *const Plan);
        let fail = |step: i32| failed(plan, step, *libc::__errno_location());
        let raw = |step: i32, r: rustix::io::Result<()>| {
            if let Err(e) = r {
                failed(plan, step, e.raw_os_error());
            }
        };
        // Handlers back to their defaults (see `signals_to_reset`).
        let dfl = KernelSigaction::default();
        for &sig in plan.reset {
            rt_sigaction(sig, &dfl, std::ptr::null_mut());
        }
        if libc::setpgid(0, 0) != 0 {
            fail(STEP_GROUP);
        }
        for (target, &fd) in plan.stdio.iter().enumerate() {
            let target = target as libc::c_int;
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                fail(STEP_STDIO);
            }
        }
        // While still root, the OOM killer's first choice (see `prepare`
        // in the caller for why this order).
        let oom = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if oom >= 0 {
            libc::write(oom, b"1000".as_ptr().cast(), 4);
            libc::close(oom);
        }
        if let Some((uid, gid)) = plan.user {
            // Raw system calls for this thread only: the C library's
            // wrappers would signal the supervisor's threads.
            raw(STEP_USER, rustix::thread::set_thread_groups(&[]));
            let gid = rustix::fs::Gid::from_raw(gid);
            raw(STEP_USER, rustix::thread::set_thread_res_gid(gid, gid, gid));
            let uid = rustix::fs::Uid::from_raw(uid);
            raw(STEP_USER, rustix::thread::set_thread_res_uid(uid, uid, uid));
        }
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            fail(STEP_CWD);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(plan.argv[0], plan.argv.as_ptr(), plan.envp.as_ptr());
        fail(STEP_EXEC)
    }
}

/// Signals a command's shell must not inherit a disposition of the
/// supervisor's for: every one not at its default when first asked (the
/// ignored SIGPIPE, the Rust runtime's stack overflow handlers), and those
/// a handler of the supervisor's may take later or that reach a command
/// from outside (the reaper's SIGCHLD; the kill ladder's and a client's
/// TERM, INT, HUP, QUIT, the user signals, a terminal's WINCH). Exec resets
/// caught ones anyway and keeps ignored ones; resetting these in the child
/// covers the ignored ones, and a signal that arrives between the child's
/// unblocking and its exec, which would run the supervisor's handler on
/// its memory. Asked once (a system call a signal), not in every child:
/// under gVisor each system call costs tens of microseconds, and resetting
/// all 62 signals cost 4 ms a command there.
pub(super) fn signals_to_reset() -> &'static [libc::c_int] {
    static RESET: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    RESET.get_or_init(|| {
        let always = [
            libc::SIGCHLD,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGWINCH,
            libc::SIGPIPE,
        ];
        (1..65)
            .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP)
            .filter(|sig| always.contains(sig) || !at_default(*sig))
            .collect()
    })
}

/// Whether `sig`'s disposition is the default (unknown counts as not).
fn at_default(sig: libc::c_int) -> bool {
    let mut old = KernelSigaction::default();
    // SAFETY: only reads the disposition into a struct of ours.
    unsafe { rt_sigaction(sig, std::ptr::null(), &mut old) == 0 && old.handler == libc::SIG_DFL }
}

/// The kernel's own `struct sigaction` (x86-64 and aarch64 alike): zeroed,
/// the default disposition.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The system call itself, not the C library's wrapper: that one refuses
/// the signals it keeps for its threads (32 and 33), which a supervisor
/// started with them ignored would otherwise hand on to every command.
///
/// # Safety
/// `new` and `old` are null or valid.
unsafe fn rt_sigaction(
    sig: libc::c_int,
    new: *const KernelSigaction,
    old: *mut KernelSigaction,
) -> libc::c_long {
    // SAFETY: as the caller promises; the mask is 8 bytes.
    unsafe { libc::syscall(libc::SYS_rt_sigaction, sig, new, old, 8usize) }
}

/// Records where the child failed, and ends it.
fn failed(plan: &Plan, step: i32, errno: i32) -> ! {
    plan.failed
        .store((step << 16) | (errno & 0xffff), Ordering::Release);
    // SAFETY: ends the child at once, as after a failed exec.
    unsafe { libc::_exit(127) }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    async fn run(command: &str, cwd: &str, env: &[String]) -> (ExitStatus, String, String) {
        let mut child = Child::spawn(command, cwd, env, None).unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .await
            .unwrap();
        (child.wait().await.unwrap(), out, err)
    }

    #[tokio::test]
    async fn runs_the_shell_with_its_output_status_directory_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().to_str().unwrap();
        let (st, out, err) = run(
            "echo \"$PWD $SPAWN_TEST\"; echo oops >&2; exit 3",
            cwd,
            &["SPAWN_TEST=yes".into()],
        )
        .await;
        assert_eq!(st.code(), Some(3));
        assert_eq!(out, format!("{cwd} yes\n"));
        assert_eq!(err, "oops\n");
        // Its own process group, stdin closed, SIGPIPE at its default.
        let (st, out, err) = run(
            "cut -d' ' -f5 /proc/$$/stat; echo $$; cat; yes | head -1",
            cwd,
            &[],
        )
        .await;
        assert!(st.success());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], lines[1], "{out}");
        assert_eq!(lines[2], "y");
        assert_eq!(err, "", "yes ended by SIGPIPE, silently");
    }

    /// The shell ignores and blocks nothing the supervisor did: this
    /// process ignores SIGPIPE, as every Rust program does, and the
    /// command does not.
    #[tokio::test]
    async fn the_command_inherits_no_ignored_or_blocked_signal() {
        assert!(!at_default(libc::SIGPIPE));
        let (status, out, _) = run("grep -E '^Sig(Ign|Blk)' /proc/self/status", "/", &[]).await;
        assert!(status.success());
        let ignored = out.lines().find(|l| l.starts_with("SigIgn")).unwrap();
        let blocked = out.lines().find(|l| l.starts_with("SigBlk")).unwrap();
        assert!(ignored.ends_with("0000000000000000"), "{out}");
        assert!(blocked.ends_with("0000000000000000"), "{out}");
        assert!(signals_to_reset().contains(&libc::SIGPIPE));
    }

    #[tokio::test]
    async fn a_signal_and_a_missing_directory_are_reported() {
        let (st, _, _) = run("kill -9 $$", "/", &[]).await;
        assert_eq!(st.signal(), Some(9));
        let e = Child::spawn("true", "/nonexistent/dir", &[], None)
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let mut child = Child::spawn("sleep 5", "/", &[], None).unwrap();
        assert!(child.try_wait().unwrap().is_none());
        rustix::process::kill_process_group(child.pid, rustix::process::Signal::KILL).unwrap();
        let st = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(st.signal(), Some(9));
    }
}
