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
//!
//! This module holds the link itself; `peer` decides who may be the
//! supervisor, `relay` drives one command over the link.

#[cfg(test)]
mod blind;
mod peer;
mod process;
mod relay;

use std::collections::HashMap;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::frames::{self, Decoder, event, request};
use super::{MOUNT_PATH, RUN_PATH, SOCKET, SUPERVISOR_USER};
use crate::sandbox::command::CommandSpec;
use crate::sandbox::{Error, ExecSpec, ExecState, InputSink, Output, Runtime};
use crate::secret;

pub use peer::make_socket_dir;
pub use relay::Supervised;

type FrameStream = Pin<Box<dyn futures_util::Stream<Item = bytes::Bytes> + Send>>;

/// How long a new supervisor may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
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

impl Link {
    /// Starts the supervisor in `container` (as root there; its commands
    /// run as `user`) and waits until it is ready and proven. With
    /// `socket_dir` (the host side of the container's read-only
    /// `/.sandboxd/run`), frames travel over a Unix socket the service
    /// listens on, bypassing the Docker daemon; otherwise over the exec's
    /// stdin and stdout. With `workspace` (device and inode), the
    /// supervisor first checks that the container's workspace is that
    /// directory, and never starts otherwise.
    pub async fn start(
        rt: &Arc<dyn Runtime>,
        container: &str,
        user: &str,
        socket_dir: Option<&Path>,
        workspace: Option<(u64, u64)>,
    ) -> Result<Link, Error> {
        let mut argv = vec![
            MOUNT_PATH.to_string(),
            "supervise".to_string(),
            "--user".to_string(),
            user.to_string(),
        ];
        if let Some((dev, ino)) = workspace {
            argv.extend(["--workspace-identity".to_string(), format!("{dev}:{ino}")]);
        }
        let listener = match socket_dir {
            Some(dir) => {
                argv.extend(["--connect".to_string(), format!("{RUN_PATH}/{SOCKET}")]);
                Some(peer::listen(dir)?)
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
        let secret = secret::random_hex();
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
                    accepted = peer::accept_supervisor(&listener, rt.as_ref(), &exec, &secret, until) => accepted,
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
                                        if secret::constant_time_eq(
                                            given.as_bytes(),
                                            reader_secret.as_bytes(),
                                        ) =>
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

    /// Runs `true` (in `/`: a warm container's workspace may be a slot no
    /// command may enter yet) and waits (at most a few seconds) for
    /// its end, so what a command's first spawn looks up is cached before
    /// any caller's command. Its result is of no interest.
    pub async fn warm_up(&self) {
        let spec = CommandSpec {
            command: "true".into(),
            cwd: "/".into(),
            env: Default::default(),
            timeout: Duration::from_secs(5),
            stdout_cap: 0,
            stderr_cap: 0,
            hints: Default::default(),
        };
        let Ok((_, mut events)) = self.spawn(&spec).await else {
            return;
        };
        let ended = async {
            while let Some(ev) = events.recv().await {
                if matches!(ev.kind, Some(event::Kind::Exit(_))) {
                    break;
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(10), ended)
            .await
            .is_err()
        {
            tracing::debug!("the warm-up command did not end in time");
        }
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
        crate::profile::mark("host: spawn frame made");
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
        crate::profile::mark("host: spawn frame written");
        Ok((id, rx))
    }

    /// Tells the supervisor its container's workspace was lent the
    /// directory of `identity` (device and inode) and that commands run as
    /// `user` from now on; waits for it to check and agree. Until then its
    /// commands would run in the empty slot as the warm container's user.
    /// [`Error::WorkspaceGone`] when the supervisor sees another directory
    /// there.
    pub async fn lend(&self, identity: (u64, u64), user: &str) -> Result<(), Error> {
        if !self.is_alive() {
            return Err(Error::StartExec("the supervisor is gone".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::channel(1);
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Route { tx, budget: 4096 });
        let lend = frames::Lend {
            id,
            identity: format!("{}:{}", identity.0, identity.1),
            user: user.to_string(),
        };
        let sent = self
            .send(frames::Request {
                kind: Some(request::Kind::Lend(lend)),
            })
            .await;
        let answer = match sent {
            Ok(()) => tokio::time::timeout(READY_TIMEOUT, rx.recv()).await,
            Err(e) => {
                self.forget(id);
                return Err(e);
            }
        };
        self.forget(id);
        match answer {
            Ok(Some(frames::Event {
                kind: Some(event::Kind::Lent(why)),
                ..
            })) if why.is_empty() => Ok(()),
            Ok(Some(frames::Event {
                kind: Some(event::Kind::Lent(why)),
                ..
            })) => Err(Error::WorkspaceGone(format!(
                "the container does not show the lent directory: {why}"
            ))),
            Ok(other) => Err(Error::StartExec(format!(
                "the supervisor did not answer the lent directory: {other:?}"
            ))),
            Err(_) => Err(Error::StartExec(
                "the supervisor did not answer the lent directory in time".into(),
            )),
        }
    }

    async fn cancel(&self, id: u64) {
        let _ = self
            .send(frames::Request {
                kind: Some(request::Kind::Cancel(id)),
            })
            .await;
    }

    pub(in crate::sandbox) fn forget(&self, id: u64) {
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Hands a frame to its command, charging the command's budget. Frames for
/// no running command are dropped. Returns false when the peer broke the
/// protocol (a command's frames past its budget): the link must be cut.
async fn route(routes: &Routes, ev: frames::Event) -> bool {
    use prost::Message;
    if crate::profile::on() && matches!(ev.kind, Some(event::Kind::Exit(_))) {
        crate::profile::mark("host: exit frame decoded");
    }
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
        Ok(ExecState::Running) | Err(Error::Connect(_)) => false,
        Ok(ExecState::Exited(_)) | Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
