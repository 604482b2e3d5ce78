//! The integration tests: the service over real gRPC, in process (see
//! `common`), and real Docker where commands run. One binary, one module
//! per area, so the support code is compiled once and every test in it is
//! checked to be used. Tests that must be alone in their process have their
//! own binaries: `flood` and `walk_cost` measure the process's memory, and
//! `commands_gvisor` needs the gVisor runtime.

mod common;

mod auth;
mod cli_terminal;
mod commands;
mod confinement;
mod deep_tree;
mod edit_cost;
mod edit_file;
mod escapes;
mod hostile;
mod images;
mod lifecycle;
mod policy;
mod report;
mod sessions;
mod walk;
