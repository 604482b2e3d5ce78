//! The same command suite over the fallback path: one Docker exec per
//! command, signalled through a second exec.

mod common;

const MODE: common::Mode = common::Mode::Exec;

include!("suite/commands.rs");
