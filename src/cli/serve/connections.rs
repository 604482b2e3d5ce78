//! The flags of `serve` about connections and transfers: how many
//! connections stay open, how long one has to show a valid token, and how
//! fast an upload or download must keep up.

use std::time::Duration;

use clap::Args;
use sandboxd::session::defaults;

/// Connections and transfers.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// Connections open at once; past it, a new connection takes the place
    /// of the oldest one no valid token has vouched for yet.
    #[arg(long, env = "SANDBOXD_MAX_CONNECTIONS", default_value_t = defaults::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Seconds a connection has to make a call with a valid token (TLS and
    /// HTTP/2 handshakes included) before it is closed.
    #[arg(long, env = "SANDBOXD_HANDSHAKE_TIMEOUT", default_value_t = defaults::HANDSHAKE_SECS,
          value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout: u64,
    /// Connections one session's token keeps open at once.
    #[arg(long, env = "SANDBOXD_SESSION_CONNECTIONS", default_value_t = defaults::SESSION_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..))]
    session_connections: u64,
    /// Bytes per second an upload or download must keep up (counted over
    /// the time it waits for its caller); 0 turns the bound off.
    #[arg(long, env = "SANDBOXD_TRANSFER_MIN_RATE", default_value_t = defaults::TRANSFER_MIN_RATE)]
    transfer_min_rate: u64,
    /// Seconds a transfer may fall behind --transfer-min-rate.
    #[arg(long, env = "SANDBOXD_TRANSFER_GRACE", default_value_t = defaults::TRANSFER_GRACE_SECS)]
    transfer_grace: u64,
}

impl ConnectionArgs {
    /// The bounds on connections the server keeps.
    pub fn limits(&self) -> sandboxd::server::ConnectionLimits {
        sandboxd::server::ConnectionLimits {
            max: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            handshake: Duration::from_secs(self.handshake_timeout),
            per_session: usize::try_from(self.session_connections).unwrap_or(usize::MAX),
        }
    }

    /// The rate an upload or download must keep up.
    pub fn min_rate(&self) -> sandboxd::session::MinRate {
        sandboxd::session::MinRate {
            bytes_per_sec: self.transfer_min_rate,
            grace: Duration::from_secs(self.transfer_grace),
        }
    }
}
