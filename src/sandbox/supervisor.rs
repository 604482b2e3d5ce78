//! The service's side of the in-container supervisor: one long-lived
//! attached exec per container carries every command of the session as
//! multiplexed frames, so a command costs a frame each way instead of
//! several Docker API calls. The container remains the hard stop: if the
//! supervisor reports a group that survived SIGKILL, or goes silent past the
//! ladder's time, the service kills the container.

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::frames::{self, Decoder, event, request};
use super::run::{CommandSpec, Event, ExitReport, KilledBy, TERM_GRACE};
use super::{Error, ExecSpec, InputSink, Output, Runtime};

/// Where the supervisor binary is mounted in every container.
pub const MOUNT_PATH: &str = "/.sandboxd/sandboxd";
/// Where the container's socket directory is mounted (read-only).
pub const RUN_PATH: &str = "/.sandboxd/run";
/// The socket's name in that directory.
const SOCKET: &str = "sock";

type FrameStream = Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>;

/// Makes `dir` (root-owned, only traversable by others) and listens on a
/// socket in it that the container's user may connect to.
fn listen(dir: &Path) -> Result<tokio::net::UnixListener, Error> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| {
        Error::StartExec(format!("supervisor socket in {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(fail)?;
    let path = dir.join(SOCKET);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let listener = tokio::net::UnixListener::bind(&path).map_err(fail)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(fail)?;
    Ok(listener)
}

/// How long a new supervisor may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack past timeout + ladder before the service stops waiting for the
/// supervisor and kills the container itself.
const SILENCE_SLACK: Duration = Duration::from_secs(5);
/// How often a stdio-framed supervisor's exec is checked for life.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

type Routes = Arc<Mutex<HashMap<u64, mpsc::Sender<frames::Event>>>>;

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

impl Link {
    /// Starts the supervisor in `container` as `user` and waits until it is
    /// ready. With `socket_dir` (the host side of the container's read-only
    /// `/.sandboxd/run`), frames travel over a Unix socket the service
    /// listens on, bypassing the Docker daemon; otherwise over the exec's
    /// stdin and stdout.
    pub async fn start(
        rt: &Arc<dyn Runtime>,
        container: &str,
        user: &str,
        socket_dir: Option<&Path>,
    ) -> Result<Link, Error> {
        let mut argv = vec![MOUNT_PATH.to_string(), "supervise".to_string()];
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
            user: user.to_string(),
        };
        let (exec, mut output, stdin) = rt.start_exec_with_stdin(container, &spec).await?;
        let (frames, input): (FrameStream, InputSink) = match (listener, socket_dir) {
            (Some(listener), Some(dir)) => {
                // A supervisor that cannot reach the socket (a runtime such
                // as gVisor keeps host sockets out) exits: fail at once.
                let accepted = tokio::select! {
                    accepted = tokio::time::timeout(READY_TIMEOUT, listener.accept()) => accepted.ok(),
                    () = async { while output.next().await.is_some() {} } => None,
                };
                // One supervisor per socket: nobody else may connect later.
                drop(listener);
                let _ = std::fs::remove_file(dir.join(SOCKET));
                let (stream, _) = accepted
                    .ok_or_else(|| Error::StartExec("the supervisor did not connect".into()))?
                    .map_err(|e| Error::StartExec(format!("accepting the supervisor: {e}")))?;
                let (read, write) = stream.into_split();
                // The exec's own streams carry nothing now; drain them so the
                // supervisor's stderr never blocks.
                tokio::spawn(output.for_each(|_| async {}));
                let frames = tokio_stream::StreamExt::map_while(
                    tokio_util::io::ReaderStream::new(read),
                    Result::ok,
                );
                (Box::pin(frames), Box::pin(write))
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
                (Box::pin(frames), stdin)
            }
        };
        let mut frames = frames;
        let routes: Routes = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let reader_routes = Arc::clone(&routes);
        let reader_alive = Arc::clone(&alive);
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut decoder = Decoder::default();
            'read: while let Some(bytes) = frames.next().await {
                decoder.push(&bytes);
                loop {
                    match decoder.next_frame::<frames::Event>() {
                        Ok(Some(ev)) => {
                            if let Some(event::Kind::Ready(_)) = ev.kind {
                                if let Some(tx) = ready.take() {
                                    let _ = tx.send(());
                                }
                                continue;
                            }
                            let route = reader_routes
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get(&ev.id)
                                .cloned();
                            if let Some(route) = route {
                                // A slow consumer slows the supervisor, never loses frames.
                                let _ = route.send(ev).await;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "supervisor sent a bad frame");
                            break 'read;
                        }
                    }
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
        match tokio::time::timeout(READY_TIMEOUT, ready_rx).await {
            Ok(Ok(())) => Ok(Link {
                input: tokio::sync::Mutex::new(input),
                routes,
                next_id: AtomicU64::new(1),
                alive,
                watched,
            }),
            _ => Err(Error::StartExec("the supervisor did not start".into())),
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
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
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
                    Some(event::Kind::Exit(exit)) => break Some(exit),
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
                    None => break None,
                },
                _ = events.closed(), if !client_gone => {
                    client_gone = true;
                    cancelled = true;
                    self.link.cancel(self.id).await;
                }
                _ = tokio::time::sleep_until(silence) => break None,
            }
        };
        self.link.forget(self.id);
        let report = match exit {
            Some(exit) => {
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
                    duration: self.started.elapsed(),
                    stdout: exit.stdout.unwrap_or_default().into(),
                    stderr,
                }
            }
            None => {
                self.kill_container().await;
                ExitReport {
                    exit_code: -1,
                    timed_out: self.started.elapsed() >= self.spec.timeout,
                    cancelled,
                    killed_by: KilledBy::Container,
                    oom_killed: false,
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

/// Whether the engine says exec `exec` has ended (an unreachable engine
/// tells nothing, so it is not taken as an end).
async fn exec_gone(rt: &dyn Runtime, exec: &str) -> bool {
    match rt.exec_state(exec).await {
        Ok(super::ExecState::Running) | Err(Error::Connect(_)) => false,
        Ok(super::ExecState::Exited(_)) | Err(_) => true,
    }
}
