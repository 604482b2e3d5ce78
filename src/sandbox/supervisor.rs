//! The service's side of the in-container supervisor: one long-lived
//! attached exec per container carries every command of the session as
//! multiplexed frames, so a command costs a frame each way instead of
//! several Docker API calls. The container remains the hard stop: if the
//! supervisor reports a group that survived SIGKILL, or goes silent past the
//! ladder's time, the service kills the container.
//!
//! The link is the only way a result reaches a caller, so it trusts nothing
//! on the other end:
//! - the supervisor runs as root in the container (commands run as the
//!   session's user), so a command can neither signal, ptrace nor read it;
//! - the socket it connects to is root's, mode 0600, in a 0700 directory in
//!   the service's private state directory, so neither a command nor
//!   another user of the host can reach it;
//! - the peer is checked with `SO_PEERCRED` (root, and the very process the
//!   engine started as the supervisor exec), and its first frame must carry
//!   a secret handed to it over the exec's stdin, which only the engine and
//!   the supervisor see;
//! - every command's frames are capped by a byte budget derived from its
//!   output caps: a peer that sends more is cut off and the container is
//!   killed, whatever it sends;
//! - a link that dies is never re-opened in the same container: the
//!   container is replaced (see `Sandbox`).

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::command::{CommandSpec, Event, ExitReport, KilledBy, TERM_GRACE};
use super::frames::{self, Decoder, event, request};
use super::{Error, ExecSpec, InputSink, Output, Runtime};

/// Where the supervisor binary is mounted in every container.
pub const MOUNT_PATH: &str = "/.sandboxd/sandboxd";
/// Where the container's socket directory is mounted (read-only).
pub const RUN_PATH: &str = "/.sandboxd/run";
/// The socket's name in that directory.
const SOCKET: &str = "sock";
/// The user the supervisor runs as in the container: not the commands'.
pub const SUPERVISOR_USER: &str = "0:0";
/// Capabilities the container keeps for its supervisor alone (commands run
/// as another user, so theirs are empty): switching to the commands' user
/// and signalling their process groups.
pub const SUPERVISOR_CAPS: [&str; 3] = ["SETUID", "SETGID", "KILL"];

type FrameStream = Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>;

/// Makes a container's socket directory: root's (the service's), mode
/// 0700, so only root in that container can reach the socket inside.
pub fn make_socket_dir(dir: &Path) -> Result<(), Error> {
    use rustix::fs::{Mode, OFlags};
    let fail = |e: rustix::io::Errno| {
        Error::StartContainer(format!("socket directory {}: {e}", dir.display()))
    };
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(fail(e)),
    }
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(fail)
}

/// Listens on the socket in `dir` (made private first: only root can reach
/// the socket through it, from the moment it exists), then makes the socket
/// itself 0600. The process umask is never touched: other threads create
/// files meanwhile.
fn listen(dir: &Path) -> Result<tokio::net::UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| {
        Error::StartExec(format!("supervisor socket in {}: {e}", dir.display()))
    };
    make_socket_dir(dir)?;
    let path = dir.join(SOCKET);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let listener = tokio::net::UnixListener::bind(&path).map_err(fail)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
    Ok(listener)
}

/// A fresh secret for one link: 256 random bits, hex.
fn new_secret() -> String {
    let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
    let (c, d) = uuid::Uuid::new_v4().as_u64_pair();
    format!("{a:016x}{b:016x}{c:016x}{d:016x}")
}

/// Compares secrets in constant time.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// How long a new supervisor may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack past timeout + ladder before the service stops waiting for the
/// supervisor and kills the container itself.
const SILENCE_SLACK: Duration = Duration::from_secs(5);
/// How often a stdio-framed supervisor's exec is checked for life.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes of frames one command may receive beyond its output caps (exit
/// codes, framing, the empty parts of its result).
const FRAME_SLACK: u64 = 64 * 1024;

/// Bytes of frames a command with these caps can legitimately cause: live
/// text and the final head and tail of each stream, 4 bytes a character.
pub fn frame_budget(stdout_cap: usize, stderr_cap: usize) -> u64 {
    (stdout_cap as u64 + stderr_cap as u64) * 4 * 3 + FRAME_SLACK
}

/// Where one command's frames go, and how many bytes it may still receive.
struct Route {
    tx: mpsc::Sender<frames::Event>,
    budget: u64,
}

type Routes = Arc<Mutex<HashMap<u64, Route>>>;

/// A live connection to one container's supervisor.
pub struct Link {
    input: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    routes: Routes,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
    /// For a stdio-framed link, the supervisor's exec and its engine: its
    /// stream may outlive a dead container, so life is asked of the engine.
    watched: Option<(String, Arc<dyn Runtime>)>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

/// How long a connecting peer may take to greet before it is dropped.
const GREETING_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads one frame from a fresh connection within `until` (and within
/// [`GREETING_TIMEOUT`], so a silent peer cannot hold up the real one).
async fn first_frame(
    stream: &mut tokio::net::UnixStream,
    until: tokio::time::Instant,
) -> Option<(frames::Event, Decoder)> {
    use tokio::io::AsyncReadExt;
    let until = until.min(tokio::time::Instant::now() + GREETING_TIMEOUT);
    let mut decoder = Decoder::default();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = tokio::time::timeout_at(until, stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        decoder.push(&buf[..n]);
        // A greeting is tiny: anything longer is not a supervisor.
        if decoder.buffered() > 4096 {
            return None;
        }
        match decoder.next_frame::<frames::Event>() {
            Ok(Some(ev)) => return Some((ev, decoder)),
            Ok(None) => {}
            Err(_) => return None,
        }
    }
}

/// Accepts connections on `listener` until one is the supervisor: root,
/// the process the engine started as exec `exec`, greeting with `secret`.
/// Anything else is dropped and logged.
async fn accept_supervisor(
    listener: &tokio::net::UnixListener,
    rt: &dyn Runtime,
    exec: &str,
    secret: &str,
    until: tokio::time::Instant,
) -> Result<(tokio::net::UnixStream, Decoder), Error> {
    loop {
        let (mut stream, _) = tokio::time::timeout_at(until, listener.accept())
            .await
            .map_err(|_| Error::StartExec("the supervisor did not connect".into()))?
            .map_err(|e| Error::StartExec(format!("accepting the supervisor: {e}")))?;
        let cred = match rustix::net::sockopt::socket_peercred(&stream) {
            Ok(cred) => cred,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a link peer's credentials; dropped");
                continue;
            }
        };
        let peer_pid = cred.pid.as_raw_nonzero().get() as i64;
        let expected = rt.exec_pid(exec).await;
        if cred.uid.as_raw() != 0 || expected.is_some_and(|p| p != peer_pid) {
            tracing::warn!(
                uid = cred.uid.as_raw(),
                pid = peer_pid,
                ?expected,
                "a process other than the supervisor connected to its socket; dropped"
            );
            continue;
        }
        match first_frame(&mut stream, until).await {
            Some((
                frames::Event {
                    kind: Some(event::Kind::Ready(given)),
                    ..
                },
                decoder,
            )) if same_secret(&given, secret) => return Ok((stream, decoder)),
            _ => {
                tracing::warn!(
                    pid = peer_pid,
                    "a link peer did not greet with the supervisor's secret; dropped"
                );
            }
        }
    }
}

impl Link {
    /// Starts the supervisor in `container` (as root there; its commands
    /// run as `user`) and waits until it is ready and proven. With
    /// `socket_dir` (the host side of the container's read-only
    /// `/.sandboxd/run`), frames travel over a Unix socket the service
    /// listens on, bypassing the Docker daemon; otherwise over the exec's
    /// stdin and stdout.
    pub async fn start(
        rt: &Arc<dyn Runtime>,
        container: &str,
        user: &str,
        socket_dir: Option<&Path>,
    ) -> Result<Link, Error> {
        let mut argv = vec![
            MOUNT_PATH.to_string(),
            "supervise".to_string(),
            "--user".to_string(),
            user.to_string(),
        ];
        let listener = match socket_dir {
            Some(dir) => {
                argv.extend(["--connect".to_string(), format!("{RUN_PATH}/{SOCKET}")]);
                Some(listen(dir)?)
            }
            None => None,
        };
        let spec = ExecSpec {
            argv,
            env: Default::default(),
            cwd: "/".into(),
            user: SUPERVISOR_USER.to_string(),
        };
        let (exec, mut output, mut stdin) = rt.start_exec_with_stdin(container, &spec).await?;
        // The secret travels over the exec's stdin: only the engine and the
        // supervisor see it (not the command line, not the environment).
        let secret = new_secret();
        stdin
            .write_all(format!("{secret}\n").as_bytes())
            .await
            .and(stdin.flush().await)
            .map_err(|e| Error::StartExec(format!("handing the supervisor its secret: {e}")))?;
        let until = tokio::time::Instant::now() + READY_TIMEOUT;
        let (frames, input, decoder, greeted): (FrameStream, InputSink, Decoder, bool) = match (
            listener, socket_dir,
        ) {
            (Some(listener), Some(dir)) => {
                // A supervisor that cannot reach the socket (a runtime
                // such as gVisor keeps host sockets out) exits: fail at
                // once.
                let accepted = tokio::select! {
                    accepted = accept_supervisor(&listener, rt.as_ref(), &exec, &secret, until) => accepted,
                    () = async { while output.next().await.is_some() {} } => {
                        Err(Error::StartExec("the supervisor exited before connecting".into()))
                    }
                };
                // One supervisor per socket: nobody may connect later.
                drop(listener);
                let _ = std::fs::remove_file(dir.join(SOCKET));
                let (stream, decoder) = accepted?;
                let (read, write) = stream.into_split();
                // The exec's own streams carry nothing now; drain them
                // so the supervisor's stderr never blocks.
                tokio::spawn(output.for_each(|_| async {}));
                let frames = tokio_stream::StreamExt::map_while(
                    tokio_util::io::ReaderStream::new(read),
                    Result::ok,
                );
                (Box::pin(frames), Box::pin(write), decoder, true)
            }
            _ => {
                let frames = tokio_stream::StreamExt::map_while(output, |item| match item {
                    Ok(Output::Stdout(bytes)) => Some(bytes),
                    Ok(Output::Stderr(bytes)) => {
                        tracing::debug!(stderr = %String::from_utf8_lossy(&bytes), "supervisor");
                        Some(bytes::Bytes::new())
                    }
                    Err(_) => None,
                });
                (Box::pin(frames), stdin, Decoder::default(), false)
            }
        };
        let mut frames = frames;
        let routes: Routes = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let reader_routes = Arc::clone(&routes);
        let reader_alive = Arc::clone(&alive);
        let reader_secret = secret.clone();
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            if greeted && let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
            let mut decoder = decoder;
            'read: loop {
                loop {
                    match decoder.next_frame::<frames::Event>() {
                        Ok(Some(ev)) => {
                            if ready.is_some() {
                                // The first frame must be the greeting.
                                match &ev.kind {
                                    Some(event::Kind::Ready(given))
                                        if same_secret(given, &reader_secret) =>
                                    {
                                        if let Some(tx) = ready.take() {
                                            let _ = tx.send(());
                                        }
                                        continue;
                                    }
                                    _ => {
                                        tracing::warn!(
                                            "the supervisor did not greet with its secret"
                                        );
                                        break 'read;
                                    }
                                }
                            }
                            if !route(&reader_routes, ev).await {
                                break 'read;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "supervisor sent a bad frame");
                            break 'read;
                        }
                    }
                }
                match frames.next().await {
                    Some(bytes) => decoder.push(&bytes),
                    None => break,
                }
            }
            reader_alive.store(false, Ordering::SeqCst);
            // Dropping the senders tells every waiting command the link died.
            reader_routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
        });
        let watched = socket_dir.is_none().then(|| (exec, Arc::clone(rt)));
        if let Some((exec, rt)) = watched.clone() {
            // A socket closes when its container dies; an attached exec
            // stream may not (gVisor): watch the exec itself.
            let (alive, routes) = (Arc::clone(&alive), Arc::clone(&routes));
            tokio::spawn(async move {
                while alive.load(Ordering::SeqCst) {
                    tokio::time::sleep(WATCH_INTERVAL).await;
                    if exec_gone(rt.as_ref(), &exec).await {
                        alive.store(false, Ordering::SeqCst);
                        routes.lock().unwrap_or_else(|e| e.into_inner()).clear();
                    }
                }
            });
        }
        match tokio::time::timeout_at(until, ready_rx).await {
            Ok(Ok(())) => Ok(Link {
                input: tokio::sync::Mutex::new(input),
                routes,
                next_id: AtomicU64::new(1),
                alive,
                watched,
            }),
            _ => {
                alive.store(false, Ordering::SeqCst);
                Err(Error::StartExec("the supervisor did not start".into()))
            }
        }
    }

    /// Whether the supervisor is still connected.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Like [`Link::is_alive`], but a stdio-framed link asks the engine now
    /// (its watcher looks only once a second), so a command is not handed
    /// to a supervisor that died with its container.
    pub async fn confirm_alive(&self) -> bool {
        if !self.is_alive() {
            return false;
        }
        match &self.watched {
            Some((exec, rt)) if exec_gone(rt.as_ref(), exec).await => {
                self.alive.store(false, Ordering::SeqCst);
                false
            }
            _ => true,
        }
    }

    async fn send(&self, req: frames::Request) -> Result<(), Error> {
        let bytes = frames::encode(&req);
        let mut input = self.input.lock().await;
        input
            .write_all(&bytes)
            .await
            .map_err(|e| Error::StartExec(format!("the supervisor is gone: {e}")))?;
        input
            .flush()
            .await
            .map_err(|e| Error::StartExec(format!("the supervisor is gone: {e}")))
    }

    /// Starts a command; returns its id and its events.
    pub async fn spawn(
        &self,
        spec: &CommandSpec,
    ) -> Result<(u64, mpsc::Receiver<frames::Event>), Error> {
        if !self.is_alive() {
            return Err(Error::StartExec("the supervisor is gone".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(64);
        let budget = frame_budget(spec.stdout_cap, spec.stderr_cap);
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Route { tx, budget });
        let spawn = frames::Spawn {
            id,
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            timeout_ms: spec.timeout.as_millis() as u64,
            stdout_cap: spec.stdout_cap as u64,
            stderr_cap: spec.stderr_cap as u64,
        };
        if let Err(e) = self
            .send(frames::Request {
                kind: Some(request::Kind::Spawn(spawn)),
            })
            .await
        {
            self.routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(e);
        }
        Ok((id, rx))
    }

    async fn cancel(&self, id: u64) {
        let _ = self
            .send(frames::Request {
                kind: Some(request::Kind::Cancel(id)),
            })
            .await;
    }

    fn forget(&self, id: u64) {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Said when a command's supervisor link died under it.
const LOST: &str = "the link to the sandbox's supervisor was lost during this command, so its result is unknown; the container was killed and the next command gets a fresh one (the workspace is intact)";
/// Said when the supervisor never reported a command's end.
const SILENT: &str = "the sandbox's supervisor did not report this command's end in time, so the container was killed; the next command gets a fresh one (the workspace is intact)";

/// A command started through a supervisor, ready to be driven.
#[derive(Debug)]
pub struct Supervised {
    pub(super) rt: Arc<dyn Runtime>,
    pub(super) link: Arc<Link>,
    pub(super) container: String,
    pub(super) id: u64,
    pub(super) frames: mpsc::Receiver<frames::Event>,
    pub(super) spec: CommandSpec,
    pub(super) started: Instant,
}

impl Supervised {
    /// Relays the supervisor's frames as events until the exit. A client
    /// that goes away cancels the command; a supervisor that dies or stays
    /// silent past the ladder's time gets the container killed.
    pub async fn drive(mut self, events: &mpsc::Sender<Event>) -> (ExitReport, bool) {
        let mut client_gone = events
            .send(Event::Started {
                container_id: self.container.clone(),
                cwd: self.spec.cwd.clone(),
                timeout: self.spec.timeout,
            })
            .await
            .is_err();
        if client_gone {
            self.link.cancel(self.id).await;
        }
        let silence = tokio::time::Instant::from_std(self.started)
            + self.spec.timeout
            + TERM_GRACE
            + SILENCE_SLACK;
        let mut cancelled = client_gone;
        let exit = loop {
            tokio::select! {
                frame = self.frames.recv() => match frame.and_then(|f| f.kind) {
                    Some(event::Kind::Exit(exit)) => break Ok(exit),
                    Some(event::Kind::Stdout(text)) => {
                        if !client_gone && events.send(Event::Stdout(text)).await.is_err() {
                            client_gone = true;
                            cancelled = true;
                            self.link.cancel(self.id).await;
                        }
                    }
                    Some(event::Kind::Stderr(text)) => {
                        if !client_gone && events.send(Event::Stderr(text)).await.is_err() {
                            client_gone = true;
                            cancelled = true;
                            self.link.cancel(self.id).await;
                        }
                    }
                    Some(event::Kind::Ready(_)) => {}
                    // The supervisor died (or the container with it).
                    None => break Err(LOST),
                },
                _ = events.closed(), if !client_gone => {
                    client_gone = true;
                    cancelled = true;
                    self.link.cancel(self.id).await;
                }
                _ = tokio::time::sleep_until(silence) => break Err(SILENT),
            }
        };
        self.link.forget(self.id);
        let report = match exit {
            Ok(exit) => {
                let killed_by = match exit.rung {
                    0 => KilledBy::None,
                    1 => KilledBy::ProcessGroupTerm,
                    2 => KilledBy::ProcessGroupKill,
                    _ => {
                        self.kill_container().await;
                        KilledBy::Container
                    }
                };
                let mut stderr: super::Captured = exit.stderr.unwrap_or_default().into();
                if !exit.spawn_error.is_empty() {
                    stderr.text.push_str(&exit.spawn_error);
                }
                ExitReport {
                    exit_code: exit.exit_code,
                    timed_out: exit.timed_out,
                    cancelled,
                    killed_by,
                    oom_killed: false,
                    pids_exhausted: false,
                    notes: Vec::new(),
                    duration: self.started.elapsed(),
                    stdout: exit.stdout.unwrap_or_default().into(),
                    stderr,
                }
            }
            Err(note) => {
                self.kill_container().await;
                ExitReport {
                    exit_code: -1,
                    timed_out: self.started.elapsed() >= self.spec.timeout,
                    cancelled,
                    killed_by: KilledBy::Container,
                    oom_killed: false,
                    pids_exhausted: false,
                    notes: vec![note.to_string()],
                    duration: self.started.elapsed(),
                    stdout: Default::default(),
                    stderr: Default::default(),
                }
            }
        };
        (report, client_gone)
    }

    async fn kill_container(&self) {
        if let Err(e) = self.rt.kill_container(&self.container).await {
            tracing::warn!(container = %self.container, error = %e, "cannot kill container");
        }
    }
}

/// Hands a frame to its command, charging the command's budget. Frames for
/// no running command are dropped. Returns false when the peer broke the
/// protocol (a command's frames past its budget): the link must be cut.
async fn route(routes: &Routes, ev: frames::Event) -> bool {
    use prost::Message;
    let len = ev.encoded_len() as u64;
    let tx = {
        let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(route) = routes.get_mut(&ev.id) else {
            return true;
        };
        if len > route.budget {
            tracing::warn!(
                command = ev.id,
                "the supervisor sent more than a command's output caps allow; cutting the link"
            );
            return false;
        }
        route.budget -= len;
        route.tx.clone()
    };
    // A slow consumer slows the supervisor, never loses frames; the budget
    // bounds what can queue.
    let _ = tx.send(ev).await;
    true
}

/// Whether the engine says exec `exec` has ended (an unreachable engine
/// tells nothing, so it is not taken as an end).
async fn exec_gone(rt: &dyn Runtime, exec: &str) -> bool {
    match rt.exec_state(exec).await {
        Ok(super::ExecState::Running) | Err(Error::Connect(_)) => false,
        Ok(super::ExecState::Exited(_)) | Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// An engine that knows nothing: exec pids are unknown, so only the
    /// peer's uid and secret decide.
    #[derive(Debug)]
    struct Blind;

    #[tonic::async_trait]
    impl Runtime for Blind {
        async fn ensure_image(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
        async fn start_container(&self, _: &super::super::ContainerSpec) -> Result<String, Error> {
            Err(Error::StartContainer("blind".into()))
        }
        async fn kill_container(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
        async fn remove_container(&self, _: &str) -> Result<(), Error> {
            Ok(())
        }
        async fn start_exec(
            &self,
            _: &str,
            _: &ExecSpec,
        ) -> Result<(String, super::super::OutputStream), Error> {
            Err(Error::StartExec("blind".into()))
        }
        async fn start_exec_with_stdin(
            &self,
            _: &str,
            _: &ExecSpec,
        ) -> Result<(String, super::super::OutputStream, InputSink), Error> {
            Err(Error::StartExec("blind".into()))
        }
        async fn exec_state(&self, _: &str) -> Result<super::super::ExecState, Error> {
            Ok(super::super::ExecState::Running)
        }
        async fn remove_labelled(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<usize, Error> {
            Ok(0)
        }
    }

    fn stdout(id: u64, text: &str) -> frames::Event {
        frames::Event {
            id,
            kind: Some(event::Kind::Stdout(text.into())),
        }
    }

    #[tokio::test]
    async fn frames_past_a_commands_budget_cut_the_link() {
        let routes: Routes = Arc::default();
        let (tx, mut rx) = mpsc::channel(64);
        routes.lock().unwrap().insert(1, Route { tx, budget: 100 });
        // Within the budget: delivered.
        assert!(route(&routes, stdout(1, &"x".repeat(40))).await);
        assert!(route(&routes, stdout(1, &"x".repeat(40))).await);
        // Frames for no running command are dropped, whatever their size.
        assert!(route(&routes, stdout(7, &"y".repeat(10_000))).await);
        // Past the budget: the peer broke the protocol.
        assert!(!route(&routes, stdout(1, &"x".repeat(40))).await);
        assert_eq!(rx.recv().await.map(|e| e.id), Some(1));
        assert_eq!(rx.recv().await.map(|e| e.id), Some(1));
        assert!(rx.try_recv().is_err(), "nothing past the budget arrived");
    }

    #[test]
    fn a_budget_covers_what_the_caps_allow_and_no_more() {
        let budget = frame_budget(4000, 4000);
        // Live head, final head and tail, 4 bytes a character, both streams.
        assert!(budget >= 2 * 4000 * 4 * 2);
        assert!(budget < 1 << 20);
    }

    async fn greet(path: std::path::PathBuf, bytes: Vec<u8>) {
        if let Ok(mut s) = tokio::net::UnixStream::connect(&path).await {
            let _ = s.write_all(&bytes).await;
            // Hold the connection until the service decides.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    #[tokio::test]
    async fn only_the_peer_with_the_secret_is_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let listener = listen(&dir).unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let sock = std::fs::metadata(dir.join(SOCKET)).unwrap();
        assert_eq!(sock.permissions().mode() & 0o777, 0o600);

        let secret = new_secret();
        let ready = |s: &str| {
            frames::encode(&frames::Event {
                id: 0,
                kind: Some(event::Kind::Ready(s.to_string())),
            })
        };
        let path = dir.join(SOCKET);
        // Impostors first: a wrong secret, a forged result with no
        // greeting, a flood, silence; then the supervisor.
        for bytes in [
            ready("wrong"),
            frames::encode(&stdout(1, "12 passed")),
            vec![0x80; 64 * 1024],
            Vec::new(),
        ] {
            tokio::spawn(greet(path.clone(), bytes));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::spawn(greet(path.clone(), ready(&secret)));
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let accepted = accept_supervisor(&listener, &Blind, "exec", &secret, until).await;
        assert!(accepted.is_ok(), "{accepted:?}");
    }

    #[test]
    fn secrets_are_fresh_and_compared_whole() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(same_secret(&a, &a.clone()));
        assert!(!same_secret(&a, &b));
        assert!(!same_secret(&a, &a[..63]));
    }
}
