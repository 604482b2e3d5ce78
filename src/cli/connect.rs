//! Reaching the service: a channel over TCP (plain or TLS) or a Unix
//! socket, and a client that carries the bearer token on every call and
//! accepts messages as large as the service sends.
//!
//! An address the CLI found by itself, and a token it read from a state
//! directory, come with a [`Trust`]: whose service may answer. The channel
//! reconnects by itself whenever a connection drops, so the check is made
//! on every connection, in the connector, after the connection is made and
//! before hyper sends a byte on it: the owner of the socket that accepted
//! it (`owner::accepting_owner`, or the peer's credentials on a Unix
//! socket). Checking the listener before connecting would leave a window
//! in which the port changes hands; the accepting socket is the one our
//! bytes would reach.

mod owner;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint, Uri};

use super::AnyError;

pub use owner::listener_owner;

/// A client of the service that sends the token, if any, with every call.
pub type Client = sandboxd::local::Client;

/// Whose service a connection may reach. Cloned into the channel's
/// connector, it shares the last refusal with its maker.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// The uids one of which must own the service's end of every
    /// connection; `None`: anyone (an address the user gave).
    owners: Option<Vec<u32>>,
    /// Who those are, for the refusal: "you (uid 1000) or root".
    whom: String,
    /// Why, for the refusal.
    why: String,
    /// What to do instead, for the refusal.
    fix: String,
    /// The last connection refused, and why.
    refused: Arc<Mutex<Option<String>>>,
}

impl Trust {
    /// Whoever answers: the user named the address (`--addr`,
    /// `SANDBOXD_ADDR`).
    pub fn anyone() -> Self {
        Trust::default()
    }

    /// The user's own service or root's: for an address found on this
    /// machine rather than given; `fix` says how to name the right one.
    pub fn own_or_root(fix: String) -> Self {
        let me = rustix::process::geteuid().as_raw();
        Trust {
            owners: Some(if me == 0 { vec![0] } else { vec![me, 0] }),
            whom: if me == 0 {
                "you (root)".into()
            } else {
                format!("you (uid {me}) or root")
            },
            why: "the address was found, not given".into(),
            fix,
            refused: Arc::default(),
        }
    }

    /// Narrowed to the service of `owner`, who made the token read from
    /// its state directory `dir`: the token goes to that service alone.
    pub fn carrying_token_of(mut self, owner: u32, dir: &Path) -> Self {
        let others = self.owners.as_ref().is_some_and(|o| !o.contains(&owner));
        self.owners = Some(if others { Vec::new() } else { vec![owner] });
        if others {
            let _ = write!(
                self.why,
                ", and the token it would carry (from {}) is uid {owner}'s",
                dir.display()
            );
        } else {
            self.whom = format!("uid {owner}");
            self.why = format!(
                "the token it would carry was read from {}, which uid {owner} owns",
                dir.display()
            );
        }
        if self.fix.is_empty() {
            self.fix = "Start that service again, or give a token yourself (SANDBOXD_TOKEN) \
                        to send one to whoever listens there"
                .into();
        }
        self
    }

    /// Why the last connection was refused, if one was since the last ask.
    pub fn refusal(&self) -> Option<String> {
        self.refused.lock().map_or(None, |mut r| r.take())
    }

    /// Checks the owner `found` of the service's end of a connection to
    /// `addr`; a refusal is kept for [`Trust::refusal`].
    fn check(&self, addr: &str, found: Option<u32>) -> std::io::Result<()> {
        let Some(owners) = &self.owners else {
            return Ok(());
        };
        if let Some(uid) = found
            && owners.contains(&uid)
        {
            return Ok(());
        }
        let owner = match found {
            Some(uid) => format!("belongs to uid {uid}"),
            None => "has an owner the kernel's tables do not show".into(),
        };
        let message = format!(
            "nothing was sent to {addr}: the service answering there {owner}, and only a \
             service of {whom} is trusted there ({why}); another local user can take a port \
             while its service is down. {fix}",
            whom = if owners.is_empty() {
                "nobody"
            } else {
                &self.whom
            },
            why = self.why,
            fix = self.fix,
        );
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(message.clone());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            message,
        ))
    }
}

/// Connects to `addr` (see [`connect`]) with `token` as the bearer token,
/// to a service `trust` accepts.
pub async fn client(
    addr: &str,
    ca_cert: Option<&Path>,
    token: Option<String>,
    trust: &Trust,
) -> Result<Client, AnyError> {
    let bearer = sandboxd::local::Bearer::new(token.as_deref())
        .ok_or("the token has characters a header cannot carry")?;
    let channel = connect_trusting(addr, ca_cert, trust).await?;
    Ok(sandboxd::local::client(channel, bearer))
}

/// A client over `channel` that sends `token` with every call.
pub fn with_token(channel: Channel, token: &str) -> Result<Client, AnyError> {
    let bearer = sandboxd::local::Bearer::new(Some(token))
        .ok_or("the token has characters a header cannot carry")?;
    Ok(sandboxd::local::client(channel, bearer))
}

/// Connects to `addr`: http://, https:// (trusting `ca_cert`, or the
/// system's roots when none is given) or unix:/PATH, every connection of
/// the channel checked by `trust`.
pub async fn connect_trusting(
    addr: &str,
    ca_cert: Option<&Path>,
    trust: &Trust,
) -> Result<Channel, AnyError> {
    use tonic::transport::{Certificate, ClientTlsConfig};
    let unreachable = |e: tonic::transport::Error| -> AnyError {
        match trust.refusal() {
            Some(refused) => refused.into(),
            None => {
                format!("cannot reach sandboxd at {addr}: {e:?} (start it with `sandboxd serve`)")
                    .into()
            }
        }
    };
    if let Some(path) = addr.strip_prefix("unix:") {
        let path = PathBuf::from(path.trim_start_matches("//"));
        let (trust, addr) = (trust.clone(), addr.to_string());
        // The URI is required by the API and unused by the connector.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let (path, trust, addr) = (path.clone(), trust.clone(), addr.clone());
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    let peer = stream.peer_cred().ok().map(|c| c.uid());
                    trust.check(&addr, peer)?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(unreachable)?;
        return Ok(channel);
    }
    let mut endpoint = Endpoint::from_shared(addr.to_string())?;
    if addr.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        match ca_cert {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            None => return Err("an https:// address needs --ca-cert (or SANDBOXD_CA_CERT)".into()),
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    if trust.owners.is_none() {
        return endpoint.connect().await.map_err(unreachable);
    }
    let trust = trust.clone();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |uri: Uri| {
            let trust = trust.clone();
            async move { connect_tcp(&uri, &trust).await }
        }))
        .await
        .map_err(unreachable)?;
    Ok(channel)
}

/// A TCP connection to `uri`'s host and port, handed over only once
/// `trust` accepts the owner of the socket that accepted it.
async fn connect_tcp(
    uri: &Uri,
    trust: &Trust,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>> {
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{uri}: no host and port"),
        )
    };
    let host = uri.host().ok_or_else(invalid)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().ok_or_else(invalid)?;
    let mut last = None;
    for target in tokio::net::lookup_host((host, port)).await? {
        match tokio::net::TcpStream::connect(target).await {
            Ok(stream) => {
                let owner = service_end_owner(&stream, target).await;
                trust.check(&target.to_string(), owner)?;
                stream.set_nodelay(true)?;
                return Ok(hyper_util::rt::TokioIo::new(stream));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(invalid))
}

/// The owner of the socket that accepted `stream`, a connection to
/// `target`. The kernel lists it as soon as the handshake is done; a few
/// short retries cover a table read mid-change.
async fn service_end_owner(stream: &tokio::net::TcpStream, target: SocketAddr) -> Option<u32> {
    let local = stream.local_addr().ok()?;
    for _ in 0..5 {
        if let Some(uid) = owner::accepting_owner(local, target) {
            return Some(uid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}
