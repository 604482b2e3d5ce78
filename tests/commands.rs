//! RunCommand against the real Docker daemon through the in-container
//! supervisor: the timeout and kill ladder, capped output, stdin, background
//! children, isolation, cwd confinement and the slip guard.

mod common;

const MODE: common::Mode = common::Mode::Supervisor;

include!("suite/commands.rs");
