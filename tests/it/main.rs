//! The integration tests: the service over real gRPC, in process (see
//! `common`), and real Docker where commands run. One binary with one
//! module per area: the shared support is compiled once, and anything in it
//! that no test uses is reported. Three binaries stand apart: `flood` and
//! `walk_cost` measure their own process, which no other test may share,
//! and `gvisor` needs the gVisor runtime registered with Docker.

mod common;

mod apply_patch;
mod approvals;
mod archives;
mod auth;
mod bounds;
mod change_names;
mod checkout_stop;
mod checkouts;
mod checkpoints;
mod cli_terminal;
mod close_crash;
mod commands;
mod confinement;
mod connections;
mod crash_landing;
mod deep_tree;
mod edit_cost;
mod edit_file;
mod engine_faults;
mod environments;
mod escapes;
mod fairness;
mod hostile;
mod image_links;
mod images;
mod lent_pool;
mod lifecycle;
mod local_service;
mod long_suites;
mod metrics;
mod policy;
mod processes;
mod report;
mod restart_deep;
mod restart_moved;
mod rootless;
mod scan_bounds;
mod served;
mod session_tokens;
mod sessions;
mod state_dir;
mod sweep_dead;
mod text_log;
mod ttl_ceiling;
mod walk;
mod web;
