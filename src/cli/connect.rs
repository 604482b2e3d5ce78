//! Reaching the service: a channel over TCP (plain or TLS) or a Unix
//! socket, and a client that carries the bearer token on every call and
//! accepts messages as large as the service sends.

use std::path::{Path, PathBuf};

use sandboxd::pb::sandbox_client::SandboxClient;
use tonic::transport::Channel;

use super::AnyError;

/// Adds the bearer token, if any, to every call.
#[derive(Clone)]
pub struct TokenHeader(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for TokenHeader {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

/// A client of the service that sends the token, if any, with every call.
pub type Client =
    SandboxClient<tonic::service::interceptor::InterceptedService<Channel, TokenHeader>>;

/// Connects to `addr` (see [`connect`]) with `token` as the bearer token.
pub async fn client(
    addr: &str,
    ca_cert: Option<&Path>,
    token: Option<String>,
) -> Result<Client, AnyError> {
    let header = token
        .map(|t| format!("Bearer {t}").parse())
        .transpose()
        .map_err(|_| "the token has characters a header cannot carry")?;
    let channel = connect(addr, ca_cert).await?;
    Ok(
        SandboxClient::with_interceptor(channel, TokenHeader(header))
            .max_decoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(sandboxd::server::MAX_MESSAGE_BYTES),
    )
}

/// Connects to `addr`: http://, https:// (trusting `ca_cert`, or the
/// system's roots when none is given) or unix:/PATH.
async fn connect(addr: &str, ca_cert: Option<&Path>) -> Result<Channel, AnyError> {
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
