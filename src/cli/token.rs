//! The token `serve` makes for itself when it listens on a loopback TCP
//! port and was given none: every local user can reach such a port, so
//! without a token any of them could drive every session. `serve` writes it
//! to its private state directory with the address it is for; a client run
//! by the same user finds it there and sends it to that address alone. A
//! client also looks in the system service's state directory
//! (`/var/lib/sandboxd/<service name>`), where it finds a token only if the
//! operator let this user read it.

use sandboxd::session::defaults;

use super::connect::listener_owner;
use super::{AnyError, SERVICE_NAME_ENV};

/// The file where `serve` writes the token it made.
pub const TOKEN_FILE: &str = "token";
/// The file where `serve` writes the address the token is for.
pub const LISTEN_FILE: &str = "listen";
/// Where the system service (run by root) keeps its state directories.
const SYSTEM_STATE_ROOT: &str = "/var/lib/sandboxd";

/// Makes a fresh token for the service listening on `addr` and writes it
/// to `<state_dir>/token`, readable by the service's user only, with the
/// address beside it (the CLI run as that user finds both there).
pub fn make_token(
    state_dir: &std::path::Path,
    addr: &std::net::SocketAddr,
) -> Result<String, AnyError> {
    use std::io::Write;
    let state = sandboxd::state::StateDir::open(state_dir)?;
    let token = sandboxd::secret::random_hex();
    for (name, text) in [(LISTEN_FILE, addr.to_string()), (TOKEN_FILE, token.clone())] {
        state.remove_file(name)?;
        let mut file = state.create_private(name)?;
        file.write_all(format!("{text}\n").as_bytes())?;
        file.sync_all()?;
    }
    tracing::info!(
        file = %state.path().join(TOKEN_FILE).display(),
        "every call must carry the token in this file (the CLI, run as this user, reads it)"
    );
    Ok(token)
}

/// A token read from a service's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalToken {
    /// The token.
    pub token: String,
    /// The uid owning the token file: its service's. The token is for a
    /// listener of that uid only, on every connection (see
    /// `connect::Trust::carrying_token_of`).
    pub owner: u32,
    /// The state directory it was read from.
    pub dir: std::path::PathBuf,
}

/// The token a service on this machine made (see [`make_token`]): first
/// this user's own service's, then the system service's where this user
/// may read it. It is sent only to the exact address that service
/// recorded, and only while a socket of the token's owner listens there:
/// never to another port, another host, or a port someone else took after
/// the service stopped.
/// It comes with the owner and the directory it was read from.
pub fn found_token(addr: &str) -> Option<LocalToken> {
    let service = std::env::var(SERVICE_NAME_ENV).unwrap_or_else(|_| defaults::SERVICE_NAME.into());
    let own = sandboxd::state::StateDir::default_path(&service);
    let system = std::path::Path::new(SYSTEM_STATE_ROOT).join(&service);
    first_token(&[own, system], addr)
}

/// The token of the first of the state directories `dirs` that holds one
/// for `addr` (see [`local_token_in`]).
fn first_token(dirs: &[std::path::PathBuf], addr: &str) -> Option<LocalToken> {
    dirs.iter().find_map(|dir| local_token_in(dir, addr))
}

/// [`local_token`] for the service whose state directory is `dir`.
fn local_token_in(dir: &std::path::Path, addr: &str) -> Option<LocalToken> {
    use std::os::unix::fs::MetadataExt;
    let uri: tonic::transport::Uri = addr.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = host.parse().ok()?;
    let target = std::net::SocketAddr::new(ip, uri.port_u16()?);
    if !ip.is_loopback() {
        return None;
    }
    let recorded: std::net::SocketAddr = std::fs::read_to_string(dir.join(LISTEN_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if recorded != target {
        return None;
    }
    let file = dir.join(TOKEN_FILE);
    let owner = std::fs::metadata(&file).ok()?.uid();
    if listener_owner(target) != Some(owner) {
        return None;
    }
    let token = std::fs::read_to_string(file).ok()?.trim().to_string();
    (!token.is_empty()).then(|| LocalToken {
        token,
        owner,
        dir: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state directory holding a token for `addr`.
    fn state_for(addr: std::net::SocketAddr) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(TOKEN_FILE), "t0ken\n").unwrap();
        std::fs::write(dir.path().join(LISTEN_FILE), format!("{addr}\n")).unwrap();
        dir
    }

    #[test]
    fn the_local_token_goes_only_to_the_recorded_listener_of_its_owner() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = state_for(addr);
        let url = |a: std::net::SocketAddr| format!("http://{a}");
        assert_eq!(
            local_token_in(dir.path(), &url(addr))
                .map(|t| t.token)
                .as_deref(),
            Some("t0ken")
        );
        // Another port, even a listening one of ours: not sent.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            local_token_in(dir.path(), &url(other.local_addr().unwrap())),
            None
        );
        // A name instead of the address, or another host: not sent.
        assert_eq!(
            local_token_in(dir.path(), &format!("http://localhost:{}", addr.port())),
            None
        );
        assert_eq!(local_token_in(dir.path(), "https://example.com:443"), None);
        // The listener belongs to someone other than the token's owner
        // (say the service died and another user took its port): not sent.
        std::os::unix::fs::chown(dir.path().join(TOKEN_FILE), Some(65534), None).unwrap();
        assert_eq!(local_token_in(dir.path(), &url(addr)), None);
        let me = rustix::process::geteuid().as_raw();
        std::os::unix::fs::chown(dir.path().join(TOKEN_FILE), Some(me), None).unwrap();
        // Nobody listens there any more: not sent.
        drop(listener);
        assert_eq!(local_token_in(dir.path(), &url(addr)), None);
    }

    #[test]
    fn the_system_services_token_is_found_after_the_users_own() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!("http://{addr}");
        let system = state_for(addr);
        std::fs::write(system.path().join(TOKEN_FILE), "system\n").unwrap();
        // The user's own service has none, or one for another address.
        let own = tempfile::tempdir().unwrap();
        let dirs = [own.path().to_path_buf(), system.path().to_path_buf()];
        assert_eq!(
            first_token(&dirs, &url).map(|t| t.token).as_deref(),
            Some("system")
        );
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let own = state_for(other.local_addr().unwrap());
        let dirs = [own.path().to_path_buf(), system.path().to_path_buf()];
        assert_eq!(
            first_token(&dirs, &url).map(|t| t.token).as_deref(),
            Some("system")
        );
        // The user's own, for this address, comes first.
        let own = state_for(addr);
        let dirs = [own.path().to_path_buf(), system.path().to_path_buf()];
        assert_eq!(
            first_token(&dirs, &url).map(|t| t.token).as_deref(),
            Some("t0ken")
        );
    }
}
