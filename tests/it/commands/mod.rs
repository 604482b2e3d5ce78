//! RunCommand against the real Docker daemon, the whole suite once per way
//! commands reach their container. Under gVisor it runs in its own binary
//! (`tests/gvisor.rs`), which needs that runtime on the host.

mod suite;

/// Through the in-container supervisor over its Unix socket (the default).
mod supervisor {
    super::suite::stamp!(crate::common::Mode::Supervisor);
}

/// Through the supervisor with frames over the exec's stdio: the path used
/// when the service cannot share a socket directory with the Docker host.
mod stdio {
    super::suite::stamp!(crate::common::Mode::SupervisorStdio);
}

/// The fallback path: one Docker exec per command, signalled through a
/// second exec.
mod exec {
    super::suite::stamp!(crate::common::Mode::Exec);
}
