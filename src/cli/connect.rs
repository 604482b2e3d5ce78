//! Reaching the service: a channel over TCP (plain or TLS) or a Unix
//! socket, and a client that carries the bearer token on every call and
//! accepts messages as large as the service sends.

use std::path::{Path, PathBuf};

use tonic::transport::Channel;

use super::AnyError;

/// A client of the service that sends the token, if any, with every call.
pub type Client = sandboxd::local::Client;

/// Connects to `addr` (see [`connect`]) with `token` as the bearer token.
pub async fn client(
    addr: &str,
    ca_cert: Option<&Path>,
    token: Option<String>,
) -> Result<Client, AnyError> {
    let bearer = sandboxd::local::Bearer::new(token.as_deref())
        .ok_or("the token has characters a header cannot carry")?;
    let channel = connect(addr, ca_cert).await?;
    Ok(sandboxd::local::client(channel, bearer))
}

/// A client over `channel` that sends `token` with every call.
pub fn with_token(channel: Channel, token: &str) -> Result<Client, AnyError> {
    let bearer = sandboxd::local::Bearer::new(Some(token))
        .ok_or("the token has characters a header cannot carry")?;
    Ok(sandboxd::local::client(channel, bearer))
}

/// Connects to `addr`: http://, https:// (trusting `ca_cert`, or the
/// system's roots when none is given) or unix:/PATH.
pub async fn connect(addr: &str, ca_cert: Option<&Path>) -> Result<Channel, AnyError> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let unreachable = |e: tonic::transport::Error| {
        format!("cannot reach sandboxd at {addr}: {e:?} (start it with `sandboxd serve`)")
    };
    if let Some(path) = addr.strip_prefix("unix:") {
        let path = PathBuf::from(path.trim_start_matches("//"));
        // The URI is required by the API and unused by the connector.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
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
    Ok(endpoint.connect().await.map_err(unreachable)?)
}
