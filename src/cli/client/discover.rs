//! Where the client verbs call when given no address (`--addr` or
//! `SANDBOXD_ADDR`): the service on this machine, found in this order:
//!
//! 1. the user's own service on its private socket,
//!    `$XDG_RUNTIME_DIR/sandboxd.sock`, if the socket is there, is this
//!    user's, and accepts a connection;
//! 2. the system service's socket, `/run/sandboxd.sock`, if it is there and
//!    this user may connect to it (a member of its `--socket-group`);
//! 3. the default loopback address, with the token `token::local_token`
//!    finds for it.
//!
//! Whatever is found is trusted only as the user's own service or root's:
//! the returned [`Trust`] makes every connection of the channel check the
//! owner of the socket that accepted it (any local user can listen on a
//! free loopback port, or on the fallback port while the user's service is
//! down).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxd::session::defaults;

use crate::cli::connect::Trust;

/// The name of a user's private service socket in `$XDG_RUNTIME_DIR`.
pub const PRIVATE_SOCKET: &str = "sandboxd.sock";
/// The system service's socket (see deploy/sandboxd.service).
pub const SYSTEM_SOCKET: &str = "/run/sandboxd.sock";
/// How long a socket may take to accept the probing connection.
const PROBE: Duration = Duration::from_secs(2);

/// The service a client verb calls, and whose it must be.
#[derive(Debug, Clone)]
pub struct Service {
    /// Its address.
    pub addr: String,
    /// Whose service may answer there.
    pub trust: Trust,
}

impl Service {
    /// The address the user gave: whoever answers there is the user's
    /// choice.
    pub fn given(addr: &str) -> Self {
        Service {
            addr: addr.to_string(),
            trust: Trust::anyone(),
        }
    }
}

/// The service this user reaches on this machine.
pub async fn find() -> Service {
    let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute());
    find_in(
        runtime_dir.as_deref(),
        Path::new(SYSTEM_SOCKET),
        defaults::ADDR,
    )
    .await
}

/// [`find`] with the user's runtime directory, the system socket and the
/// loopback address to fall back to given.
pub(super) async fn find_in(
    runtime_dir: Option<&Path>,
    system_socket: &Path,
    fallback: &str,
) -> Service {
    let found = |addr: String| Service {
        addr,
        trust: Trust::own_or_root(format!(
            "Start your own service (`sandboxd serve`), or point at the right one: --addr ADDR \
             or SANDBOXD_ADDR, or XDG_RUNTIME_DIR (your service's socket is \
             $XDG_RUNTIME_DIR/{PRIVATE_SOCKET}{})",
            match runtime_dir {
                Some(dir) => format!(", here {}", dir.join(PRIVATE_SOCKET).display()),
                None => ", and XDG_RUNTIME_DIR is not set here".into(),
            }
        )),
    };
    if let Some(dir) = runtime_dir {
        let own = dir.join(PRIVATE_SOCKET);
        if socket_owner(&own) == Some(rustix::process::geteuid().as_raw())
            && let Some(addr) = answering(&own).await
        {
            return found(addr);
        }
    }
    if socket_owner(system_socket).is_some()
        && let Some(addr) = answering(system_socket).await
    {
        return found(addr);
    }
    found(fallback.to_string())
}

/// The owner of the socket at `path` (itself a socket, not a link to one).
fn socket_owner(path: &Path) -> Option<u32> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.file_type().is_socket().then(|| meta.uid())
}

/// `unix:PATH` if a connection to the socket at `path` is accepted in time.
async fn answering(path: &Path) -> Option<String> {
    let addr = format!("unix:{}", path.to_str()?);
    let connected = tokio::time::timeout(PROBE, tokio::net::UnixStream::connect(path)).await;
    matches!(connected, Ok(Ok(_))).then_some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(path: &Path) -> String {
        format!("unix:{}", path.display())
    }

    async fn find_in(runtime_dir: Option<&Path>, system_socket: &Path) -> String {
        super::find_in(runtime_dir, system_socket, defaults::ADDR)
            .await
            .addr
    }

    #[tokio::test]
    async fn the_users_socket_comes_first_then_the_systems_then_loopback() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        let own = runtime.join(PRIVATE_SOCKET);
        let system = dir.path().join("system.sock");
        let none = dir.path().join("none");
        // Nothing runs: the default address.
        assert_eq!(find_in(Some(&runtime), &system).await, defaults::ADDR);
        assert_eq!(find_in(None, &none).await, defaults::ADDR);
        let system_listener = tokio::net::UnixListener::bind(&system).unwrap();
        assert_eq!(find_in(Some(&runtime), &system).await, unix(&system));
        let own_listener = tokio::net::UnixListener::bind(&own).unwrap();
        assert_eq!(find_in(Some(&runtime), &system).await, unix(&own));
        // The user's socket must be the user's own: another's is passed by.
        std::os::unix::fs::chown(&own, Some(65534), None).unwrap();
        assert_eq!(find_in(Some(&runtime), &system).await, unix(&system));
        std::os::unix::fs::chown(&own, Some(rustix::process::geteuid().as_raw()), None).unwrap();
        // A socket nobody listens on any more is passed by.
        drop(own_listener);
        assert_eq!(find_in(Some(&runtime), &system).await, unix(&system));
        drop(system_listener);
        assert_eq!(find_in(Some(&runtime), &system).await, defaults::ADDR);
        // A link to a socket, or any other file, is not a service's socket.
        let _again = tokio::net::UnixListener::bind(dir.path().join("real.sock")).unwrap();
        std::fs::remove_file(&own).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real.sock"), &own).unwrap();
        assert_eq!(find_in(Some(&runtime), &none).await, defaults::ADDR);
    }
}
