//! The flags of `serve` about environment builds: who may build, the CA
//! bundle and proxy build steps see, and the time, context and turns a
//! build may take.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sandboxd::session::{Config, defaults};

use super::AnyError;

/// Environment builds.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Let every caller build and delete environments. Building runs the
    /// recipe's code with network access, so by default only calls
    /// carrying the build token may.
    #[arg(long, env = "SANDBOXD_ALLOW_BUILDS")]
    allow_builds: bool,
    /// File holding the build token: a call carrying it (as its bearer
    /// token) may build and delete environments, and do everything else.
    #[arg(long, env = "SANDBOXD_BUILD_TOKEN_FILE")]
    build_token_file: Option<PathBuf>,
    /// A CA bundle (PEM) that build steps trust, e.g. for a TLS-intercepting
    /// proxy: copied into each build stage and named by SSL_CERT_FILE,
    /// PIP_CERT, REQUESTS_CA_BUNDLE and the like during the build only.
    /// Give a whole bundle (the host's own, usually), not only the extra CA.
    /// The proxy variables of the service's environment (HTTP_PROXY,
    /// HTTPS_PROXY, NO_PROXY...) are handed to build steps as well.
    #[arg(long, env = "SANDBOXD_BUILD_CA_CERT")]
    build_ca_cert: Option<PathBuf>,
    /// Time an environment build may take unless the caller asks
    /// otherwise, in seconds.
    #[arg(long, env = "SANDBOXD_BUILD_TIMEOUT", default_value_t = defaults::BUILD_TIMEOUT_SECS)]
    build_timeout: u64,
    /// Ceiling on a build's requested time limit, in seconds.
    #[arg(long, env = "SANDBOXD_MAX_BUILD_TIMEOUT", default_value_t = defaults::MAX_BUILD_TIMEOUT_SECS)]
    max_build_timeout: u64,
    /// Bytes of build context (with the Dockerfile) a build may be sent.
    #[arg(long, env = "SANDBOXD_MAX_BUILD_CONTEXT_BYTES", default_value_t = defaults::BUILD_CONTEXT_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=defaults::MAX_BUILD_CONTEXT_BYTES))]
    max_build_context_bytes: u64,
    /// Environment builds that run at once; more wait for a turn (within
    /// their time limit).
    #[arg(long, env = "SANDBOXD_MAX_BUILDS", default_value_t = defaults::MAX_RUNNING_BUILDS,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_builds: u64,
}

impl BuildArgs {
    /// Puts the build settings in `config`; answers the build token.
    pub fn apply(self, config: &mut Config) -> Result<Option<String>, AnyError> {
        config.allow_builds = self.allow_builds;
        config.builds.timeout = Duration::from_secs(self.build_timeout);
        config.builds.max_timeout = Duration::from_secs(self.max_build_timeout);
        config.builds.max_context_bytes = self.max_build_context_bytes;
        config.builds.max_running = usize::try_from(self.max_builds).unwrap_or(usize::MAX);
        if let Some(path) = &self.build_ca_cert {
            let pem = std::fs::read(path)
                .map_err(|e| format!("cannot read the build CA {}: {e}", path.display()))?;
            if !pem.starts_with(b"-----BEGIN")
                && !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----")
            {
                return Err(format!("{} holds no PEM certificate", path.display()).into());
            }
            config.builds.ca_cert = Some(pem);
        }
        config.builds.proxy = sandboxd::environment::PROXY_VARIABLES
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let build_token = match &self.build_token_file {
            Some(file) => Some(super::secrets::read(file, "build token")?),
            None => None,
        };
        Ok(build_token)
    }
}
