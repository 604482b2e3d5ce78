//! The command suite once more with every container under gVisor (`runsc`,
//! a user-space kernel between the command and the host's). Its own binary:
//! it needs runsc registered with the Docker daemon, which the other tests
//! do not. `host_sockets` checks which gVisor runtime each kind of workspace
//! gets, and what that opens.

// Public: this binary uses only part of the shared support (the `it`
// binary checks that all of it is used).
#[path = "it/common/mod.rs"]
pub mod common;
#[path = "it/commands/suite/mod.rs"]
pub mod suite;

mod commands {
    super::suite::stamp!(crate::common::Mode::Gvisor);
}

#[path = "gvisor/host_sockets.rs"]
mod host_sockets;
