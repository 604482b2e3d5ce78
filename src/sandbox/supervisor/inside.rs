//! The in-container supervisor (`sandboxd supervise`): started once per
//! container as one long-lived exec, it reads [`frames::Request`]s on stdin
//! and writes [`frames::Event`]s on stdout. It spawns each command itself in
//! its own process group, caps output at the source (only the kept text
//! crosses to the service, however much is written), enforces the timeout,
//! and runs the TERM / KILL ladder on the group directly. Only a group that
//! survives SIGKILL is handed back to the service for the hard stop.
//!
//! This is the same static binary as the service, mounted read-only, so it
//! needs nothing from the image but `/bin/sh` for the commands themselves.
//!
//! It runs as root in the container (with only the capabilities to switch
//! user and signal) and starts every command as the session's user, so no
//! command can signal, ptrace or read it. Its first line of stdin is a
//! secret from the service; its first frame returns it, so the service
//! knows it talks to the process it started.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::frames::{self, Decoder, event, request};

mod family;
mod process;
mod spawn;
use crate::sandbox::capture::Capture;
use crate::sandbox::command::{KilledBy, TERM_GRACE};
use spawn::Child;

/// Wait after SIGKILL before asking the service for the hard stop.
const KILL_GRACE: Duration = Duration::from_secs(1);
/// How long a spawn refused for lack of pids is retried.
const SPAWN_RETRY: Duration = Duration::from_secs(3);
/// Output still read after the command's own process exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Runs the supervisor until its input closes (the service went away),
/// then stops every command still running.
///
/// With `connect`, frames travel over the Unix socket the service listens on
/// (mounted read-only into the container): no Docker hop on the way. Without
/// it, they travel over the exec's stdin and stdout.
///
/// With `workspace_identity` ("dev:ino"), it first checks that
/// `/workspace` is that directory, and serves nothing otherwise: the
/// engine bound it by a path the service does not control.
pub async fn supervise(
    connect: Option<std::path::PathBuf>,
    user: Option<String>,
    workspace_identity: Option<String>,
) -> std::io::Result<()> {
    // Not even a process of our own uid may attach to or read us.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    // Which handlers a command's shell gets back to their defaults, asked
    // before any of ours is installed.
    spawn::signals_to_reset();
    let user = user.as_deref().map(parse_user).transpose()?;
    if let Some(want) = workspace_identity {
        check_workspace(&want)?;
    }
    let mut stdin = tokio::io::stdin();
    let secret = read_secret(&mut stdin).await?;
    match connect {
        Some(path) => {
            let stream = tokio::net::UnixStream::connect(&path).await?;
            let (read, write) = stream.into_split();
            serve_frames(read, write, secret, user).await
        }
        None => serve_frames(stdin, tokio::io::stdout(), secret, user).await,
    }
}

/// Refuses unless `/workspace` (the mount point itself, no link followed)
/// has the device and inode `want` ("dev:ino") names.
fn check_workspace(want: &str) -> std::io::Result<()> {
    let st = rustix::fs::statat(
        rustix::fs::CWD,
        super::WORKSPACE_PATH,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    let have = format!("{}:{}", st.st_dev, st.st_ino);
    if have != want {
        return Err(std::io::Error::other(format!(
            "{} is {have}, not the session's directory {want}: the engine mounted another \
             directory; serving nothing",
            super::WORKSPACE_PATH
        )));
    }
    Ok(())
}

/// "uid:gid" as numbers; never root's: commands never run as root,
/// whatever the service asks.
fn parse_user(user: &str) -> std::io::Result<(u32, u32)> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("bad user {user:?}"),
        )
    };
    let (uid, gid) = user.split_once(':').ok_or_else(bad)?;
    let (uid, gid) = (
        uid.parse().map_err(|_| bad())?,
        gid.parse().map_err(|_| bad())?,
    );
    if uid == 0 || gid == 0 {
        return Err(bad());
    }
    Ok((uid, gid))
}

/// The first line of stdin, read a byte at a time so nothing after it is
/// consumed (frames may follow on the same stream).
async fn read_secret(stdin: &mut tokio::io::Stdin) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 256 {
        if stdin.read(&mut byte).await? == 0 || byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

async fn serve_frames<R, W>(
    mut input: R,
    mut out: W,
    secret: String,
    mut user: Option<(u32, u32)>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<frames::Event>(256);
    let writer = tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let mut bytes = frames::encode(&ev);
            // Batch whatever else is ready into one write.
            while let Ok(more) = rx.try_recv() {
                bytes.extend(frames::encode(&more));
            }
            if out.write_all(&bytes).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let _ = tx
        .send(frames::Event {
            id: 0,
            kind: Some(event::Kind::Ready(secret)),
        })
        .await;

    let mut cancels: HashMap<u64, oneshot::Sender<()>> = HashMap::new();
    let processes = process::Table::default();
    let mut decoder = Decoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = input.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        decoder.push(&buf[..n]);
        while let Some(req) = decoder
            .next_frame::<frames::Request>()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
        {
            cancels.retain(|_, c| !c.is_closed());
            match req.kind {
                Some(request::Kind::Spawn(spawn)) => {
                    let received = crate::profile::now_ns();
                    let (cancel_tx, cancel_rx) = oneshot::channel();
                    cancels.insert(spawn.id, cancel_tx);
                    tokio::spawn(run_one(spawn, user, tx.clone(), cancel_rx, received));
                }
                Some(request::Kind::Cancel(id)) => {
                    if let Some(c) = cancels.remove(&id) {
                        let _ = c.send(());
                    }
                }
                Some(request::Kind::Start(start)) => {
                    let (cancel_tx, cancel_rx) = oneshot::channel();
                    cancels.insert(start.id, cancel_tx);
                    tokio::spawn(process::run(
                        start,
                        user,
                        tx.clone(),
                        cancel_rx,
                        processes.clone(),
                    ));
                }
                Some(request::Kind::Input(input)) => processes.input(input, &tx),
                Some(request::Kind::Resize(size)) => processes.resize(&size),
                Some(request::Kind::Signal(signal)) => processes.signal(&signal),
                Some(request::Kind::Lend(lend)) => {
                    let taken = check_workspace(&lend.identity)
                        .and_then(|()| parse_user(&lend.user))
                        .map(|lent| user = Some(lent));
                    let answer = taken.err().map(|e| e.to_string()).unwrap_or_default();
                    let _ = tx
                        .send(frames::Event {
                            id: lend.id,
                            kind: Some(event::Kind::Lent(answer)),
                        })
                        .await;
                }
                None => {}
            }
        }
    }
    // The service is gone: nobody will read results, stop everything.
    for (_, c) in cancels.drain() {
        let _ = c.send(());
    }
    drop(tx);
    let _ = tokio::time::timeout(TERM_GRACE + KILL_GRACE + Duration::from_secs(1), writer).await;
    Ok(())
}

async fn run_one(
    spawn: frames::Spawn,
    user: Option<(u32, u32)>,
    tx: mpsc::Sender<frames::Event>,
    mut cancel: oneshot::Receiver<()>,
    received: u64,
) {
    let id = spawn.id;
    let mut times = frames::Times {
        received,
        started: crate::profile::now_ns(),
        ..Default::default()
    };
    let send = |kind| {
        let tx = tx.clone();
        async move {
            tx.send(frames::Event {
                id,
                kind: Some(kind),
            })
            .await
            .is_ok()
        }
    };
    let spawned =
        spawn_retrying(|| Child::spawn(&spawn.command, &spawn.cwd, &spawn.env, user)).await;
    let mut child = match spawned {
        Ok(child) => child,
        Err(why) => {
            let exit = frames::Exit {
                exit_code: 127,
                spawn_error: format!("cannot start /bin/sh in {}: {why}", spawn.cwd),
                ..Default::default()
            };
            send(event::Kind::Exit(exit)).await;
            return;
        }
    };
    times.spawned = crate::profile::now_ns();
    (times.cloning, times.cloned) = child.cloned;
    let pgid = child.id();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(spawn.timeout_ms);
    let mut out = child.stdout.take().map(Reader::new);
    let mut err = child.stderr.take().map(Reader::new);
    let mut stdout = Capture::new(spawn.stdout_cap as usize);
    let mut stderr = Capture::new(spawn.stderr_cap as usize);

    let mut status = None;
    let mut drain_until = None;
    let far = deadline + Duration::from_secs(86400);
    let mut timed_out = false;
    let mut stop = false;
    // Phase 1: until the command ends, times out or is cancelled.
    while out.is_some() || err.is_some() || status.is_none() {
        tokio::select! {
            chunk = read_some(&mut out) => match chunk {
                Some(bytes) => if let Some(text) = stdout.push(&bytes) { send(event::Kind::Stdout(text)).await; },
                None => out = None,
            },
            chunk = read_some(&mut err) => match chunk {
                Some(bytes) => if let Some(text) = stderr.push(&bytes) { send(event::Kind::Stderr(text)).await; },
                None => err = None,
            },
            st = child.wait(), if status.is_none() => {
                times.exited = crate::profile::now_ns();
                status = st.ok();
                // A background child may hold the pipes: read what is in
                // flight, then let go.
                drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
            _ = tokio::time::sleep_until(deadline), if status.is_none() => { timed_out = true; stop = true; break; }
            _ = &mut cancel, if status.is_none() => { stop = true; break; }
        }
    }

    let mut killed_by = KilledBy::None;
    if stop {
        killed_by = ladder(pgid, &mut child).await;
        // Collect what the pipes still hold, briefly.
        let until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
        while out.is_some() || err.is_some() {
            tokio::select! {
                chunk = read_some(&mut out) => match chunk { Some(b) => { stdout.push(&b); }, None => out = None },
                chunk = read_some(&mut err) => match chunk { Some(b) => { stderr.push(&b); }, None => err = None },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        status = child.try_wait().ok().flatten();
    }
    let exit_code = exit_code(status);
    let exit = frames::Exit {
        exit_code,
        timed_out,
        rung: killed_by.into(),
        stdout: Some(stdout.finish().into()),
        stderr: Some(stderr.finish().into()),
        spawn_error: String::new(),
        signal: status.and_then(|s| s.signal()).unwrap_or(0),
        times: Some(Box::new(frames::Times {
            done: crate::profile::now_ns(),
            ..times
        })),
    };
    send(event::Kind::Exit(exit)).await;
}

/// The exit code of `status` (128+n for signal n), -1 when unknown.
fn exit_code(status: Option<std::process::ExitStatus>) -> i64 {
    status.map_or(-1, |s| {
        s.code()
            .map_or_else(|| 128 + s.signal().unwrap_or(0) as i64, i64::from)
    })
}

/// Makes `cmd` start as a command of the session: the OOM killer's first
/// choice, as the session's `user`, in `cwd`, with `env` added. Refuses a
/// working directory that contains a NUL byte.
fn prepare(
    cmd: &mut tokio::process::Command,
    cwd: &str,
    env: &[String],
    user: Option<(u32, u32)>,
) -> Result<(), String> {
    // Prepared before the fork: the child may not allocate.
    let Ok(cwd) = std::ffi::CString::new(cwd) else {
        return Err("the working directory contains a NUL byte".into());
    };
    // In the child, in this order: while still root, make the command the
    // OOM killer's first choice (a process that changed its uid may no
    // longer open its /proc files; pinning the score against the command
    // lowering it again would take CAP_SYS_RESOURCE, which hosts such as
    // this one's VM do not grant); then become the session's user (no
    // groups, no capabilities left); only then enter the working directory,
    // which root without DAC override may not be allowed to.
    // SAFETY: runs in the child between fork and exec, and makes only
    // async-signal-safe system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Ok(fd) = rustix::fs::open(
                c"/proc/self/oom_score_adj",
                rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            ) {
                let _ = rustix::io::write(&fd, b"1000");
            }
            if let Some((uid, gid)) = user {
                // The child is single-threaded: the thread calls are the
                // process's.
                rustix::thread::set_thread_groups(&[])?;
                let gid = rustix::fs::Gid::from_raw(gid);
                rustix::thread::set_thread_res_gid(gid, gid, gid)?;
                let uid = rustix::fs::Uid::from_raw(uid);
                rustix::thread::set_thread_res_uid(uid, uid, uid)?;
            }
            rustix::process::chdir(cwd.as_c_str())?;
            Ok(())
        });
    }
    for kv in env {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    Ok(())
}

/// Spawns `cmd`. Right after a fork bomb is killed the pids limit can
/// still be full until init reaps the dead: fork's EAGAIN is then worth a
/// short wait.
async fn spawn_retrying<C>(mut spawn: impl FnMut() -> std::io::Result<C>) -> std::io::Result<C> {
    let spawn_until = Instant::now() + SPAWN_RETRY;
    loop {
        match spawn() {
            Err(e)
                if e.raw_os_error() == Some(rustix::io::Errno::AGAIN.raw_os_error())
                    && Instant::now() < spawn_until =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// A started command whose exit can be checked without waiting.
trait Reap {
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>>;
}

impl Reap for tokio::process::Child {
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        tokio::process::Child::try_wait(self)
    }
}

impl Reap for Child {
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        Child::try_wait(self)
    }
}

/// SIGTERM to the group, grace, SIGKILL, grace. Returns the rung that
/// emptied the group; [`KilledBy::Container`] when not even SIGKILL did
/// (the service then kills the container).
async fn ladder(pgid: u32, child: &mut impl Reap) -> KilledBy {
    let Some(group) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return KilledBy::Container;
    };
    let _ = rustix::process::kill_process_group(group, Signal::TERM);
    if gone(group, child, TERM_GRACE).await {
        return KilledBy::ProcessGroupTerm;
    }
    let _ = rustix::process::kill_process_group(group, Signal::KILL);
    if gone(group, child, KILL_GRACE).await {
        return KilledBy::ProcessGroupKill;
    }
    KilledBy::Container
}

/// Waits until the command has exited and no process is left in its group.
async fn gone(group: Pid, child: &mut impl Reap, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    loop {
        let exited = matches!(child.try_wait(), Ok(Some(_)));
        // Signal 0 probes the group; ESRCH means nobody is left.
        let empty = rustix::process::test_kill_process_group(group).is_err();
        if exited && empty {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A pipe read in chunks.
struct Reader<R> {
    pipe: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    fn new(pipe: R) -> Self {
        Self::sized(pipe, 64 * 1024)
    }

    /// A reader of at most `size` bytes at a time.
    fn sized(pipe: R, size: usize) -> Self {
        Reader {
            pipe,
            buf: vec![0; size],
        }
    }
}

/// The next chunk of a pipe, `None` at EOF; pends forever when there is no pipe.
async fn read_some<R: AsyncRead + Unpin>(reader: &mut Option<Reader<R>>) -> Option<Vec<u8>> {
    let Some(r) = reader.as_mut() else {
        return std::future::pending().await;
    };
    match r.pipe.read(&mut r.buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(r.buf[..n].to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Sends one `Lend` to a supervisor serving frames over a pipe, and
    /// returns its answer.
    async fn lend(identity: &str, user: &str) -> String {
        let (mut service, supervisor) = tokio::io::duplex(64 * 1024);
        let (read, write) = tokio::io::split(supervisor);
        let served = tokio::spawn(serve_frames(read, write, "s".into(), Some((1000, 1000))));
        let request = frames::Request {
            kind: Some(request::Kind::Lend(frames::Lend {
                id: 7,
                identity: identity.into(),
                user: user.into(),
            })),
        };
        service.write_all(&frames::encode(&request)).await.unwrap();
        let mut decoder = Decoder::default();
        let mut buf = vec![0u8; 4096];
        let answer = loop {
            if let Some(ev) = decoder.next_frame::<frames::Event>().unwrap() {
                match ev.kind {
                    Some(event::Kind::Lent(why)) => {
                        assert_eq!(ev.id, 7);
                        break why;
                    }
                    Some(event::Kind::Ready(_)) => continue,
                    other => panic!("unexpected {other:?}"),
                }
            }
            let n = service.read(&mut buf).await.unwrap();
            assert!(n > 0, "the supervisor hung up");
            decoder.push(&buf[..n]);
        };
        drop(service);
        let _ = served.await;
        answer
    }

    /// A lend is refused, with why, when `/workspace` is not the
    /// directory named, and when it asks for root as the commands' user.
    #[tokio::test]
    async fn a_lend_is_refused_for_another_directory_or_for_root() {
        let why = lend("1:1", "1000:1000").await;
        assert!(!why.is_empty(), "a workspace that is not the one named");
        for user in ["0:0", "0:1000", "1000:0", "root", ""] {
            assert!(parse_user(user).is_err(), "{user}");
        }
        assert_eq!(parse_user("1000:1001").unwrap(), (1000, 1001));
    }
}
