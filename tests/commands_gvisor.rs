//! The same command suite with every container under gVisor (`runsc`, a
//! user-space kernel between the command and the host's).

mod common;

const MODE: common::Mode = common::Mode::Gvisor;

include!("suite/commands.rs");
