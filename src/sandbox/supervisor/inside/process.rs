//! Long-running processes, inside the container: started like commands
//! (the session's user, its own process group, the OOM killer's first
//! choice), but with no timeout and no cap. Every byte they write crosses
//! to the service, which keeps what it keeps; the pipe back-pressures a
//! process the service cannot keep up with. A process may have a pipe to
//! its input or run on a terminal; the supervisor says when a port it was
//! to open listens, and how much CPU its group used, once a second.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::{
    DRAIN_AFTER_EXIT, KILL_GRACE, Reader, exit_code, ladder, prepare, read_some, spawn_retrying,
};
use crate::sandbox::command::KilledBy;
use crate::sandbox::supervisor::frames::{self, event};

/// How often a process's CPU time is sampled and its port looked at.
const USAGE_EVERY: Duration = Duration::from_secs(1);
const PORT_EVERY: Duration = Duration::from_millis(25);
/// Bytes read from a process's output at once (one frame at most).
const CHUNK: usize = 256 * 1024;

/// What the request loop may do to a running process.
struct Control {
    /// Its input, while open: bytes, and whether to close after them.
    input: Option<mpsc::Sender<(Vec<u8>, bool)>>,
    /// Its terminal's controlling side, for resizing.
    pty: Option<Arc<OwnedFd>>,
    /// Its process group.
    group: Option<Pid>,
}

/// The running processes of one supervisor.
#[derive(Clone, Default)]
pub(super) struct Table(Arc<Mutex<HashMap<u64, Control>>>);

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Control>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues bytes for a process's input; a process with no open input
    /// (or one ended) is answered at once.
    pub(super) fn input(&self, input: frames::Input, tx: &mpsc::Sender<frames::Event>) {
        let queued = match self.lock().get(&input.id).and_then(|c| c.input.clone()) {
            Some(feed) => feed
                .try_send((input.data, input.close))
                .map_err(|_| "its input is busy or closed"),
            None => Err("its input is closed"),
        };
        if let Err(why) = queued {
            let tx = tx.clone();
            let id = input.id;
            tokio::spawn(async move {
                let done = frames::InputDone {
                    written: 0,
                    closed: true,
                    error: why.to_string(),
                };
                let _ = tx
                    .send(frames::Event {
                        id,
                        kind: Some(event::Kind::InputDone(done)),
                    })
                    .await;
            });
        }
    }

    /// Sets the size of a process's terminal.
    pub(super) fn resize(&self, size: &frames::Resize) {
        if let Some(pty) = self.lock().get(&size.id).and_then(|c| c.pty.clone()) {
            let _ = rustix::termios::tcsetwinsize(&*pty, winsize(size));
        }
    }

    /// Sends INT, TERM or KILL to a process's group (no other signal).
    pub(super) fn signal(&self, sig: &frames::SignalGroup) {
        let signal = match sig.signal {
            2 => Signal::INT,
            9 => Signal::KILL,
            15 => Signal::TERM,
            _ => return,
        };
        if let Some(group) = self.lock().get(&sig.id).and_then(|c| c.group) {
            let _ = rustix::process::kill_process_group(group, signal);
        }
    }
}

fn winsize(size: &frames::Resize) -> rustix::termios::Winsize {
    rustix::termios::Winsize {
        ws_row: size.rows.clamp(1, 1000) as u16,
        ws_col: size.cols.clamp(1, 1000) as u16,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new terminal of `size`: its controlling side (non-blocking) and the
/// process's side.
fn open_pty(size: &frames::Resize) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    // The peer straight from the controlling side: no path to look up.
    let peer = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    rustix::termios::tcsetwinsize(&master, winsize(size))?;
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok((master, peer))
}

/// Runs one process until it ends or is cancelled (then the ladder), and
/// reports its end.
pub(super) async fn run(
    start: frames::StartProcess,
    user: Option<(u32, u32)>,
    tx: mpsc::Sender<frames::Event>,
    mut cancel: oneshot::Receiver<()>,
    table: Table,
) {
    let id = start.id;
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
    let failed = |why: String| frames::Exit {
        exit_code: 127,
        spawn_error: format!("cannot start /bin/sh in {}: {why}", start.cwd),
        ..Default::default()
    };
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(&start.command);
    let mut master = None;
    match &start.pty {
        Some(size) => {
            let (m, peer) = match open_pty(size) {
                Ok(pair) => pair,
                Err(e) => {
                    send(event::Kind::Exit(failed(format!("no terminal: {e}")))).await;
                    return;
                }
            };
            let (Ok(a), Ok(b)) = (peer.try_clone(), peer.try_clone()) else {
                send(event::Kind::Exit(failed("no terminal".into()))).await;
                return;
            };
            cmd.stdin(Stdio::from(a))
                .stdout(Stdio::from(b))
                .stderr(Stdio::from(peer));
            // A session of its own (so a group of its own), with the
            // terminal as its controlling terminal: ^C, job control and
            // `/dev/tty` work as at a shell.
            // SAFETY: runs in the child between fork and exec, and makes
            // only async-signal-safe system calls.
            unsafe {
                cmd.pre_exec(|| {
                    rustix::process::setsid()?;
                    rustix::process::ioctl_tiocsctty(BorrowedFd::borrow_raw(0))?;
                    Ok(())
                });
            }
            master = Some(Arc::new(m));
        }
        None => {
            cmd.stdin(if start.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        }
    }
    // Its orphaned descendants stay its family (see `family`).
    // SAFETY: runs in the child between fork and exec; one system call.
    unsafe {
        cmd.pre_exec(super::family::become_subreaper);
    }
    let spawned = match prepare(&mut cmd, &start.cwd, &start.env, user) {
        Ok(()) => spawn_retrying(|| cmd.spawn())
            .await
            .map_err(|e| e.to_string()),
        Err(why) => Err(why),
    };
    // The parent's copies of the terminal's process side go now: the
    // controlling side then reads the end when the process's own close.
    drop(cmd);
    let mut child = match spawned {
        Ok(child) => child,
        Err(why) => {
            send(event::Kind::Exit(failed(why))).await;
            return;
        }
    };
    let pid = child.id().unwrap_or(0);
    let group = i32::try_from(pid).ok().and_then(Pid::from_raw);

    // Its streams: a terminal's controlling side, or pipes.
    type Out = Reader<Box<dyn AsyncRead + Unpin + Send>>;
    type In = Box<dyn AsyncWrite + Unpin + Send>;
    let (mut out, mut err, input): (Option<Out>, Option<Out>, Option<In>) = match &master {
        Some(m) => match terminal_halves(m) {
            Ok((read, write)) => (
                Some(Reader::sized(Box::new(read), CHUNK)),
                None,
                Some(Box::new(write)),
            ),
            Err(_) => (None, None, None),
        },
        None => (
            child.stdout.take().map(|p| {
                widen(&p);
                Reader::sized(Box::new(p) as Box<dyn AsyncRead + Unpin + Send>, CHUNK)
            }),
            child.stderr.take().map(|p| {
                widen(&p);
                Reader::sized(Box::new(p) as Box<dyn AsyncRead + Unpin + Send>, CHUNK)
            }),
            child.stdin.take().map(|p| Box::new(p) as In),
        ),
    };
    let feed = input.map(|sink| {
        let (feed_tx, feed_rx) = mpsc::channel(2);
        tokio::spawn(feed_input(sink, feed_rx, master.is_some(), tx.clone(), id));
        feed_tx
    });
    table.lock().insert(
        id,
        Control {
            input: feed,
            pty: master.clone(),
            group,
        },
    );
    send(event::Kind::Started(pid)).await;

    let mut usage = tokio::time::interval(USAGE_EVERY);
    usage.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probe = tokio::time::interval(PORT_EVERY);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut port = start.ready_port;
    let mut cpu = 0;
    let mut status = None;
    let mut drain_until = None;
    let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    let mut stop = false;
    while out.is_some() || err.is_some() || status.is_none() {
        tokio::select! {
            chunk = read_some(&mut out) => match chunk {
                Some(bytes) => { send(event::Kind::Out(bytes)).await; }
                None => out = None,
            },
            chunk = read_some(&mut err) => match chunk {
                Some(bytes) => { send(event::Kind::Err(bytes)).await; }
                None => err = None,
            },
            st = child.wait(), if status.is_none() => {
                status = st.ok();
                // Background children may hold its output: read what is
                // in flight, then let go.
                drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
            _ = &mut cancel, if status.is_none() => { stop = true; break; }
            _ = usage.tick(), if status.is_none() => {
                let now = group.map_or(0, group_cpu_ms);
                if now != cpu {
                    cpu = now;
                    send(event::Kind::Usage(cpu)).await;
                }
            }
            _ = probe.tick(), if port != 0 && status.is_none() => {
                if listening(port) {
                    send(event::Kind::Listening(port)).await;
                    port = 0;
                }
            }
        }
    }
    // Nothing more may reach it.
    table.lock().remove(&id);
    let mut killed_by = KilledBy::None;
    if stop {
        // The family as it is now, while the leader holds it together:
        // children that left the group get the ladder's rungs too.
        let family = super::family::descendants(pid);
        super::family::signal_all(&family, Signal::TERM);
        killed_by = ladder(pid, &mut child).await;
        let (killed, all_gone) = super::family::end(&family, KILL_GRACE).await;
        killed_by = match (killed_by, killed, all_gone) {
            (_, _, false) => KilledBy::Container,
            (KilledBy::ProcessGroupTerm, true, true) => KilledBy::ProcessGroupKill,
            (k, _, _) => k,
        };
        let until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
        while out.is_some() || err.is_some() {
            tokio::select! {
                chunk = read_some(&mut out) => match chunk { Some(b) => { send(event::Kind::Out(b)).await; }, None => out = None },
                chunk = read_some(&mut err) => match chunk { Some(b) => { send(event::Kind::Err(b)).await; }, None => err = None },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        status = child.try_wait().ok().flatten();
    }
    let exit_code = exit_code(status);
    let exit = frames::Exit {
        exit_code,
        rung: killed_by.into(),
        signal: status.and_then(|s| s.signal()).unwrap_or(0),
        ..Default::default()
    };
    send(event::Kind::Exit(exit)).await;
}

/// Widens an output pipe to the kernel's most for an unprivileged pipe
/// (1 MiB by default): a process that writes fast fills fewer, larger
/// frames. Where it cannot, the pipe keeps its size.
fn widen(pipe: &impl AsFd) {
    let _ = rustix::pipe::fcntl_setpipe_size(pipe, CHUNK * 4);
}

/// The reading and writing halves of a terminal's controlling side.
fn terminal_halves(
    master: &Arc<OwnedFd>,
) -> std::io::Result<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    let read = master.as_fd().try_clone_to_owned()?;
    let write = master.as_fd().try_clone_to_owned()?;
    Ok((
        tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(read)?,
        tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(write)?,
    ))
}

/// Writes each queued piece of input, answering each with what was taken.
/// Closing a pipe drops it (the process reads the end); a terminal cannot
/// be closed, so it gets ^D, which ends a line-reading program's input.
async fn feed_input(
    mut sink: Box<dyn AsyncWrite + Unpin + Send>,
    mut pieces: mpsc::Receiver<(Vec<u8>, bool)>,
    terminal: bool,
    tx: mpsc::Sender<frames::Event>,
    id: u64,
) {
    while let Some((data, close)) = pieces.recv().await {
        let mut written = 0;
        let mut error = String::new();
        while written < data.len() {
            match sink.write(&data[written..]).await {
                Ok(0) => {
                    error = "it no longer reads its input".into();
                    break;
                }
                Ok(n) => written += n,
                Err(e) => {
                    error = format!("it no longer reads its input ({e})");
                    break;
                }
            }
        }
        let mut closed = false;
        if close && error.is_empty() {
            if terminal {
                if let Err(e) = sink.write_all(b"\x04").await {
                    error = format!("it no longer reads its input ({e})");
                }
            } else {
                closed = true;
            }
        }
        let _ = sink.flush().await;
        if closed || (!terminal && !error.is_empty()) {
            drop(sink);
            let done = frames::InputDone {
                written: written as u64,
                closed: true,
                error,
            };
            let _ = tx
                .send(frames::Event {
                    id,
                    kind: Some(event::Kind::InputDone(done)),
                })
                .await;
            return;
        }
        let done = frames::InputDone {
            written: written as u64,
            closed: false,
            error,
        };
        if tx
            .send(frames::Event {
                id,
                kind: Some(event::Kind::InputDone(done)),
            })
            .await
            .is_err()
        {
            return;
        }
    }
}

/// CPU time (user and system) of every process in `group`, and of the
/// children its leader has waited for, in milliseconds.
fn group_cpu_ms(group: Pid) -> u64 {
    let leader = group.as_raw_nonzero().get();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut ticks = 0u64;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold anything: fields start after its ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if field(2) != leader as u64 {
            continue;
        }
        ticks += field(11) + field(12);
        if pid == leader {
            ticks += field(13) + field(14);
        }
    }
    ticks * 1000 / rustix::param::clock_ticks_per_second().max(1)
}

/// Whether something listens on TCP `port` in the container (any address,
/// IPv4 or IPv6), as the kernel's socket tables say: no connection is made,
/// so the server sees nothing. Only where no table can be read at all does
/// it knock (a connection to 127.0.0.1).
fn listening(port: u32) -> bool {
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        if text.lines().skip(1).any(|line| listens_on(line, port)) {
            return true;
        }
    }
    // No socket tables here (some runtimes keep them out): knock.
    !read_any
        && std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port as u16)),
            Duration::from_millis(100),
        )
        .is_ok()
}

/// Whether one line of a socket table is a listening socket on `port`.
fn listens_on(line: &str, port: u32) -> bool {
    let mut fields = line.split_whitespace();
    let (Some(_), Some(local), Some(_), Some(state)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    // 0A is TCP_LISTEN.
    state == "0A"
        && local
            .rsplit_once(':')
            .and_then(|(_, p)| u32::from_str_radix(p, 16).ok())
            == Some(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_socket_is_found_by_its_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0000000000000000 20 4 30 10 -1";
        let lines: Vec<&str> = table.lines().skip(1).collect();
        assert!(listens_on(lines[0], 8000));
        // Port 8001 is an established connection, not a listener.
        assert!(!listens_on(lines[1], 8001));
        assert!(!listens_on(lines[0], 8001));
        let v6 = "   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3 1";
        assert!(listens_on(v6, 8000));
    }
}
