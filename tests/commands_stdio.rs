//! The command suite through the supervisor with frames over the exec's
//! stdio: the path used when the service cannot share a socket directory
//! with the Docker host.

mod common;

const MODE: common::Mode = common::Mode::SupervisorStdio;

include!("suite/commands.rs");
