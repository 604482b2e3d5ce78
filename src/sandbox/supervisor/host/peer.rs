//! Who may be the supervisor: the host side of a container's supervisor
//! socket. The socket lives in a directory only root can enter, is itself
//! 0600, and a peer is taken for the supervisor only when it is root, is
//! the very process the engine started as the supervisor exec, and greets
//! with the secret handed to that exec. Anything else is dropped.
//!
//! A service that does not run as root owns the directory and the socket
//! as its own user, which root in the container (without a capability to
//! override permissions) could not reach: there they are 0711 and 0666.
//! No other user of the host reaches them even so, since they lie in the
//! service's private state directory (0700); in the container, commands
//! may connect, and are dropped like any peer that is not the supervisor.

use std::path::Path;
use std::time::Duration;

use crate::sandbox::supervisor::SOCKET;
use crate::sandbox::supervisor::frames::{self, Decoder, event};
use crate::sandbox::{Error, Runtime};
use crate::secret;

/// The modes of a container's socket directory and socket: private to
/// the service's user, which is root in the container when it is root.
fn modes() -> (u32, u32) {
    if rustix::process::geteuid().is_root() {
        (0o700, 0o600)
    } else {
        (0o711, 0o666)
    }
}

/// Makes a container's socket directory: the service's, mode 0700 (0711
/// for a service that is not root), so only root in that container can
/// reach the socket inside.
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
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(modes().0)).map_err(fail)
}

/// Listens on the socket in `dir` (made private first: only root can reach
/// the socket through it, from the moment it exists), then makes the socket
/// itself 0600. The process umask is never touched: other threads create
/// files meanwhile.
pub(super) fn listen(dir: &Path) -> Result<tokio::net::UnixListener, Error> {
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
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(modes().1)).map_err(fail)?;
    Ok(listener)
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
pub(super) async fn accept_supervisor(
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
        let is_exec = |p: i64| p == peer_pid || gofer_beside(peer_pid, p);
        if cred.uid.as_raw() != 0 || expected.is_some_and(|p| !is_exec(p)) {
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
            )) if secret::constant_time_eq(given.as_bytes(), secret.as_bytes()) => {
                return Ok((stream, decoder));
            }
            _ => {
                tracing::warn!(
                    pid = peer_pid,
                    "a link peer did not greet with the supervisor's secret; dropped"
                );
            }
        }
    }
}

/// Whether `peer` is gVisor's file server (`runsc-gofer`) for the
/// container that the exec `exec` (its `runsc exec`, as the engine reports
/// it) runs in: under gVisor, the sandbox's connections to host sockets
/// are made by that server, which the container's shim started beside the
/// exec. Only that container mounts the socket's directory.
fn gofer_beside(peer: i64, exec: i64) -> bool {
    // runsc starts its gofer as itself again (`/proc/self/exe`, so its
    // name is `exe`), naming it in argv[0].
    let is_gofer = std::fs::read(format!("/proc/{peer}/cmdline"))
        .is_ok_and(|argv| argv.split(|&b| b == 0).next() == Some(b"runsc-gofer"));
    is_gofer && parent(peer).is_some_and(|p| parent(exec) == Some(p))
}

/// A process's parent's pid, from `/proc/<pid>/stat`.
fn parent(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (name) state ppid ...": the name may hold spaces and parens.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::sandbox::supervisor::host::blind::Blind;

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

        let secret = secret::random_hex();
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
            frames::encode(&frames::Event {
                id: 1,
                kind: Some(event::Kind::Stdout("12 passed".into())),
            }),
            vec![0x80; 64 * 1024],
            Vec::new(),
        ] {
            tokio::spawn(greet(path.clone(), bytes));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::spawn(greet(path.clone(), ready(&secret)));
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let accepted =
            accept_supervisor(&listener, &Blind::default(), "exec", &secret, until).await;
        assert!(accepted.is_ok(), "{accepted:?}");
    }

    #[test]
    fn only_a_gofer_beside_the_exec_stands_for_it() {
        // This test's process is no gofer, beside its own thread or not.
        let me = i64::from(std::process::id());
        assert_eq!(
            parent(me),
            Some(i64::from(std::os::unix::process::parent_id()))
        );
        assert!(!gofer_beside(me, me));
        assert!(!gofer_beside(i64::from(i32::MAX), me));
    }
}
