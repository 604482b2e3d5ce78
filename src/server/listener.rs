//! Who may hold a connection, and for how long: the accept loop of every
//! listener (gRPC over TCP or a Unix socket, and the metrics endpoint).
//!
//! Any local user can connect to a loopback port, token or no token, so
//! connections are a resource a stranger could hold. A [`Gate`] bounds
//! them:
//! - at most `max` connections are open; past it, a new one takes the
//!   place of the oldest connection nobody has vouched for yet, or, when
//!   every open connection is vouched for, is closed at once;
//! - a connection must be vouched for within the handshake deadline (the
//!   TLS and HTTP/2 handshakes and a first call carrying a valid token all
//!   fit in it), or it is closed; a stranger's idle or slow-loris
//!   connection lives that long at most;
//! - one session's token vouches for a few connections only, and all
//!   sessions together for all but an eighth of the places, so sessions
//!   cannot fill the table with vouched ones; the operator's token has no
//!   such bound;
//! - a voucher lives as long as the token that gave it: once a session is
//!   closed (or expired), its connections count for nobody. They are
//!   strangers again, with a new handshake deadline, the first to go for
//!   a newcomer (a connection kept alive by pings alone cannot hold a
//!   place for a dead session).
//!
//! The accept loop backs off when accepting fails for want of descriptors
//! or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): retried at once, such an
//! error comes back at once, and the loop would spin.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;

use crate::session::defaults;

/// The bounds of one listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max: usize,
    /// Time a connection has to be vouched for (handshakes and a first
    /// call carrying a valid token).
    pub handshake: Duration,
    /// Connections one session's token vouches for at once.
    pub per_session: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max: usize::try_from(defaults::MAX_CONNECTIONS).unwrap_or(usize::MAX),
            handshake: Duration::from_secs(defaults::HANDSHAKE_SECS),
            per_session: usize::try_from(defaults::SESSION_CONNECTIONS).unwrap_or(usize::MAX),
        }
    }
}

/// Keeps the count of one listener's connections (see the module's notes).
#[derive(Debug, Clone)]
pub struct Gate(Arc<Shared>);

/// Whether the session of this id is still open.
pub type Liveness = Arc<dyn Fn(&str) -> bool + Send + Sync>;

struct Shared {
    limits: ConnectionLimits,
    /// Whether a session's voucher still holds (`None`: always).
    live: Option<Liveness>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("limits", &self.limits)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    open: usize,
    next: u64,
    /// Connections not vouched for yet, oldest first.
    unvouched: BTreeMap<u64, Arc<Ticket>>,
    /// Vouched connections per session.
    sessions: HashMap<String, BTreeMap<u64, Arc<Ticket>>>,
    /// Connections vouched for by sessions, all together.
    session_vouched: usize,
    /// Connections closed since memory was last given back.
    closed_since_trim: usize,
}

impl State {
    /// Takes `ticket` off its session's count, if a session vouched for it.
    fn disown(&mut self, ticket: &Ticket) {
        let owner = ticket
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(owner) = owner
            && let Some(held) = self.sessions.get_mut(&owner)
            && held.remove(&ticket.id).is_some()
        {
            self.session_vouched = self.session_vouched.saturating_sub(1);
            if held.is_empty() {
                self.sessions.remove(&owner);
            }
        }
    }
}

/// One connection's standing, shared by its stream and its calls.
#[derive(Debug)]
struct Ticket {
    id: u64,
    vouched: AtomicBool,
    /// Set when the gate closes the connection; the waker wakes its task.
    closed: AtomicBool,
    /// Set when the voucher died: the connection's task starts a new
    /// handshake deadline.
    demoted: AtomicBool,
    waker: AtomicWaker,
    owner: Mutex<Option<String>>,
}

impl Ticket {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn demote(&self) {
        self.vouched.store(false, Ordering::Release);
        self.demoted.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// The places of `max` that sessions' vouchers may not take: the
/// operator's (and newcomers') share.
fn reserved(max: usize) -> usize {
    // A table of one place keeps none back: sessions could use no place.
    (max / 8).max(usize::from(max > 1))
}

impl Gate {
    /// A gate with `limits` (a `max` of 0 is taken as 1).
    pub fn new(limits: ConnectionLimits) -> Gate {
        Gate::build(limits, None)
    }

    /// A gate with `limits` whose sessions' vouchers hold while `live`
    /// says their session is open.
    pub fn watching(limits: ConnectionLimits, live: Liveness) -> Gate {
        Gate::build(limits, Some(live))
    }

    fn build(limits: ConnectionLimits, live: Option<Liveness>) -> Gate {
        Gate(Arc::new(Shared {
            limits: ConnectionLimits {
                max: limits.max.max(1),
                ..limits
            },
            live,
            state: Mutex::default(),
        }))
    }

    /// Demotes the connections of sessions no longer open to strangers
    /// (see the module's notes); returns how many.
    pub fn sweep(&self) -> usize {
        let Some(live) = &self.0.live else {
            return 0;
        };
        // Asked outside the gate's lock: the registry takes locks of its own.
        let vouching: Vec<String> = self.state().sessions.keys().cloned().collect();
        let dead: Vec<String> = vouching.into_iter().filter(|s| !live(s)).collect();
        if dead.is_empty() {
            return 0;
        }
        let mut state = self.state();
        let mut n = 0;
        for session in dead {
            let Some(held) = state.sessions.remove(&session) else {
                continue;
            };
            state.session_vouched = state.session_vouched.saturating_sub(held.len());
            for (id, ticket) in held {
                *ticket.owner.lock().unwrap_or_else(|e| e.into_inner()) = None;
                ticket.demote();
                state.unvouched.insert(id, ticket);
                n += 1;
            }
        }
        n
    }

    /// Whether connections closed since the last call.
    fn any_closed(&self) -> bool {
        std::mem::take(&mut self.state().closed_since_trim) > 0
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.state().open
    }

    /// Takes `io` in, or refuses it (`None`: drop it, which closes it).
    pub fn admit<IO>(&self, io: IO) -> Option<Guarded<IO>> {
        if self.state().open >= self.0.limits.max {
            // Dead sessions' connections are strangers' first.
            self.sweep();
        }
        let mut state = self.state();
        if state.open >= self.0.limits.max {
            let (_, oldest) = state.unvouched.pop_first()?;
            // Counted until its stream is dropped, which its task does at
            // once: the table overshoots by the connections closing now.
            oldest.close();
        }
        state.open += 1;
        state.next += 1;
        let ticket = Arc::new(Ticket {
            id: state.next,
            vouched: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            demoted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            owner: Mutex::new(None),
        });
        state.unvouched.insert(ticket.id, Arc::clone(&ticket));
        drop(state);
        Some(Guarded {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(self.0.limits.handshake))),
            admission: Admission {
                ticket,
                gate: self.clone(),
            },
        })
    }
}

/// A connection's standing, as its calls see it: tonic puts it in every
/// request's extensions (it is the stream's connect info).
#[derive(Debug, Clone)]
pub struct Admission {
    ticket: Arc<Ticket>,
    gate: Gate,
}

impl Admission {
    /// Vouches for the connection: it is no longer closed at the handshake
    /// deadline or for a newcomer. `session` is the session whose token
    /// vouches (`None`: the operator, or a transport that vouches). A
    /// session already vouching for its share of connections does not
    /// vouch for another, nor does any session once sessions hold all
    /// places but the operator's share: that one stays a stranger's, and is
    /// closed at the deadline. Returns whether the connection is vouched
    /// for.
    pub fn vouch(&self, session: Option<&str>) -> bool {
        if self.ticket.vouched.load(Ordering::Acquire) {
            return true;
        }
        let limits = &self.gate.0.limits;
        let mut state = self.gate.state();
        if let Some(s) = session
            && (state.sessions.get(s).map_or(0, BTreeMap::len) >= limits.per_session
                || state.session_vouched >= limits.max.saturating_sub(reserved(limits.max)))
        {
            return false;
        }
        if state.unvouched.remove(&self.ticket.id).is_none() {
            // Closed by the gate meanwhile.
            return false;
        }
        if let Some(s) = session {
            state
                .sessions
                .entry(s.to_string())
                .or_default()
                .insert(self.ticket.id, Arc::clone(&self.ticket));
            state.session_vouched += 1;
            *self.ticket.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.to_string());
        }
        self.ticket.vouched.store(true, Ordering::Release);
        true
    }

    /// Whether the connection has been vouched for.
    pub fn vouched(&self) -> bool {
        self.ticket.vouched.load(Ordering::Acquire)
    }

    /// The connection's number, unique among this listener's.
    pub fn id(&self) -> u64 {
        self.ticket.id
    }
}

/// A connection the gate admitted: reads and writes fail once the gate
/// closes it, or once its handshake deadline passes unvouched; dropping it
/// gives its place back.
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    admission: Admission,
}

impl<IO> Guarded<IO> {
    /// The connection's standing.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Fails when the connection must close now; otherwise makes sure the
    /// task is woken when it must (the gate's waker, the deadline's timer).
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let ticket = &self.admission.ticket;
        ticket.waker.register(cx.waker());
        if ticket.closed.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed for a newer connection: too many connections open",
            ));
        }
        if ticket.vouched.load(Ordering::Acquire) {
            self.deadline = None;
            return Ok(());
        }
        if ticket.demoted.swap(false, Ordering::AcqRel) {
            // Its voucher died: a stranger again, with a stranger's time.
            self.deadline = Some(Box::pin(tokio::time::sleep(
                self.admission.gate.0.limits.handshake,
            )));
        }
        if let Some(deadline) = &mut self.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no call with a valid token came within the handshake deadline",
            ));
        }
        Ok(())
    }
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        let ticket = &self.admission.ticket;
        let mut state = self.admission.gate.state();
        state.open = state.open.saturating_sub(1);
        state.closed_since_trim += 1;
        state.unvouched.remove(&ticket.id);
        state.disown(ticket);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO> Connected for Guarded<IO> {
    type ConnectInfo = Admission;

    fn connect_info(&self) -> Admission {
        self.admission.clone()
    }
}

/// A listener the accept loop can take connections from.
pub trait Accept: Send + 'static {
    /// A connection.
    type Io: Send + 'static;
    /// The next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    async fn accept(&self) -> io::Result<tokio::net::TcpStream> {
        let (conn, _) = tokio::net::TcpListener::accept(self).await?;
        // Small replies must not wait for Nagle's algorithm (a 40 ms
        // stall against delayed ACKs on every call).
        if let Err(e) = conn.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        Ok(conn)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;

    async fn accept(&self) -> io::Result<tokio::net::UnixStream> {
        let (conn, _) = tokio::net::UnixListener::accept(self).await?;
        Ok(conn)
    }
}

/// First and longest pause after a failed accept.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));

/// How often the accept loop demotes dead sessions' connections and,
/// after connections closed, gives freed memory back.
const SWEEP: Duration = Duration::from_secs(1);

/// Memory is given back at most this often: a trim walks the allocator's
/// arenas, and a stranger's connects and closes must not make the service
/// do that every second.
const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Hands the allocator's free memory back to the system. What a closed
/// connection freed (its streams, its buffers) otherwise stays in the
/// allocator's arenas: a stranger's burst of streams would leave the
/// service gigabytes larger after its connections are gone.
fn give_back_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free pages of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The connections `gate` admits from `listener`, as a stream; the accept
/// loop stops when the stream is dropped. Every [`SWEEP`], dead sessions'
/// connections are demoted, and memory is given back after closes.
pub fn incoming<L: Accept>(listener: L, gate: Gate) -> Incoming<L::Io> {
    let (tx, rx) = mpsc::channel(16);
    let task = tokio::spawn(async move {
        let mut pause = BACKOFF.0;
        let mut sweep = tokio::time::interval(SWEEP);
        let mut last_trim = tokio::time::Instant::now();
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = sweep.tick() => {
                    gate.sweep();
                    if last_trim.elapsed() >= TRIM_EVERY && gate.any_closed() {
                        last_trim = tokio::time::Instant::now();
                        tokio::task::spawn_blocking(give_back_memory);
                    }
                    continue;
                }
            };
            match accepted {
                Ok(io) => {
                    pause = BACKOFF.0;
                    if let Some(conn) = gate.admit(io)
                        && tx.send(conn).await.is_err()
                    {
                        return;
                    }
                }
                // The peer left before it was accepted: nothing is short.
                Err(e) if per_connection(&e) => {}
                Err(e) => {
                    if pause == BACKOFF.0 {
                        tracing::warn!(error = %e, "accepting a connection failed; pausing the listener");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(BACKOFF.1);
                }
            }
        }
    });
    Incoming { rx, task }
}

/// Whether an accept error concerns that one connection only.
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// The admitted connections of one listener.
#[derive(Debug)]
pub struct Incoming<IO> {
    rx: mpsc::Receiver<Guarded<IO>>,
    task: tokio::task::JoinHandle<()>,
}

impl<IO> Incoming<IO> {
    /// The next admitted connection; `None` once the loop has stopped.
    pub async fn next(&mut self) -> Option<Guarded<IO>> {
        self.rx.recv().await
    }
}

impl<IO> Drop for Incoming<IO> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<IO> futures_util::Stream for Incoming<IO> {
    type Item = io::Result<Guarded<IO>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Raises this process's soft limit of open files to its hard limit, so
/// that connections run out at the gate's bound, not at a low default
/// soft limit. Returns the soft limit now in force (`None`: unknown).
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(soft), Some(hard)) = (limit.current, limit.maximum)
        && soft < hard
    {
        limit.current = Some(hard);
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "cannot raise the open files limit");
            return Some(soft);
        }
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: usize, per_session: usize) -> Gate {
        Gate::new(ConnectionLimits {
            max,
            handshake: Duration::from_secs(3600),
            per_session,
        })
    }

    #[tokio::test]
    async fn a_newcomer_takes_the_place_of_the_oldest_stranger() {
        let g = gate(2, 4);
        let a = g.admit(()).unwrap();
        let b = g.admit(()).unwrap();
        assert!(b.admission().vouch(None));
        let c = g.admit(()).unwrap();
        assert!(
            a.admission.ticket.closed.load(Ordering::Acquire),
            "the oldest stranger goes"
        );
        assert!(!b.admission.ticket.closed.load(Ordering::Acquire));
        drop(a);
        assert_eq!(g.open(), 2);
        // Every open one vouched for: a newcomer is refused.
        assert!(c.admission().vouch(None));
        assert!(g.admit(()).is_none());
        drop((b, c));
        assert_eq!(g.open(), 0);
    }

    #[tokio::test]
    async fn a_session_vouches_for_its_share_only() {
        let g = gate(10, 2);
        let conns: Vec<_> = (0..3).map(|_| g.admit(()).unwrap()).collect();
        assert!(conns[0].admission().vouch(Some("s")));
        assert!(conns[1].admission().vouch(Some("s")));
        assert!(!conns[2].admission().vouch(Some("s")), "past its share");
        assert!(conns[2].admission().vouch(Some("t")), "another session");
        let mut conns = conns;
        drop(conns.remove(0));
        let next = g.admit(()).unwrap();
        assert!(next.admission().vouch(Some("s")), "the share came back");
    }

    /// A gate whose open sessions are those in the returned set.
    fn watching(
        max: usize,
        per_session: usize,
        handshake: Duration,
    ) -> (Gate, Arc<Mutex<std::collections::HashSet<String>>>) {
        let open = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let live = {
            let open = Arc::clone(&open);
            Arc::new(move |id: &str| open.lock().unwrap().contains(id)) as Liveness
        };
        let limits = ConnectionLimits {
            max,
            handshake,
            per_session,
        };
        (Gate::watching(limits, live), open)
    }

    /// The review's lockout, scaled down: four sessions fill a table of 13
    /// with vouched connections kept open, then are closed. Sessions never
    /// take the operator's share, and once they are closed their
    /// connections are the first to go for a newcomer.
    #[tokio::test]
    async fn closed_sessions_connections_count_for_nobody() {
        let (g, open) = watching(13, 4, Duration::from_secs(3600));
        let sessions = ["a", "b", "c", "d"];
        open.lock()
            .unwrap()
            .extend(sessions.iter().map(|s| s.to_string()));
        let mut held = Vec::new();
        let mut vouched = 0;
        for s in sessions {
            for _ in 0..4 {
                let Some(conn) = g.admit(()) else { break };
                vouched += usize::from(conn.admission().vouch(Some(s)));
                held.push(conn);
            }
        }
        assert_eq!(vouched, 12, "sessions take all but the operator's share");
        // The operator still gets in (the share is a stranger's place,
        // taken by the newcomer).
        let operator = g.admit(()).expect("the operator gets a place");
        assert!(operator.admission().vouch(None));
        assert!(g.admit(()).is_none(), "every place is vouched for");
        // The sessions are closed: their connections are strangers now,
        // the oldest taken first.
        open.lock().unwrap().clear();
        let first = Arc::clone(&held[0].admission.ticket);
        let newcomer = g.admit(()).expect("a dead session's place is taken");
        assert!(newcomer.admission().vouch(None));
        assert!(
            first.closed.load(Ordering::Acquire),
            "the oldest goes first"
        );
        assert!(
            held.iter().all(|c| !c.admission().vouched()),
            "no connection of a closed session stays vouched"
        );
        // A connection demoted can be vouched for again by a live token.
        assert!(held[5].admission().vouch(None));
        drop((held, operator, newcomer));
        assert_eq!(g.open(), 0);
        let state = g.state();
        assert!(state.sessions.is_empty() && state.session_vouched == 0);
    }

    /// A demoted connection has a stranger's time again: closed at a new
    /// handshake deadline unless a live token vouches for it.
    #[tokio::test]
    async fn a_demoted_connection_is_closed_at_a_new_deadline() {
        use tokio::io::AsyncReadExt;
        let (g, open) = watching(4, 4, Duration::from_millis(300));
        open.lock().unwrap().insert("s".into());
        let (near, _far) = tokio::io::duplex(64);
        let mut conn = g.admit(near).unwrap();
        assert!(conn.admission().vouch(Some("s")));
        // Vouched: outlives the first deadline.
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_millis(600), conn.read(&mut buf)).await;
        assert!(read.is_err(), "a vouched connection stays open: {read:?}");
        open.lock().unwrap().clear();
        assert_eq!(g.sweep(), 1);
        let t = std::time::Instant::now();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("closed well before 5 s");
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(
            t.elapsed() >= Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
    }

    /// A listener whose every accept fails for want of descriptors.
    struct OutOfFds(Arc<std::sync::atomic::AtomicUsize>);

    impl Accept for OutOfFds {
        type Io = ();

        async fn accept(&self) -> io::Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(io::Error::from_raw_os_error(libc::EMFILE))
        }
    }

    #[tokio::test]
    async fn accept_backs_off_when_descriptors_run_out() {
        let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let conns = incoming(OutOfFds(Arc::clone(&tries)), gate(4, 4));
        tokio::time::sleep(Duration::from_millis(700)).await;
        drop(conns);
        // 5, 10, 20 ... ms pauses: about 8 tries in 700 ms, where a loop
        // retrying at once makes millions.
        let n = tries.load(Ordering::Relaxed);
        assert!((2..=20).contains(&n), "{n} accepts in 700 ms");
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let now = raise_fd_limit().expect("a limit");
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        assert_eq!(Some(now), hard.or(Some(now)));
    }
}
